// File: fuse/supervisor.h
//
// The supervisor keeps a mount's FUSE connection alive while the process
// that serves it dies and is replaced. The kernel keeps a FUSE connection as
// long as someone holds its /dev/fuse descriptor: the supervisor mounts,
// holds that descriptor, and runs the serving process (hoard-fuse
// --serve-fd=N: HoardFs and its libfuse loop) as a child that inherits it.
// When the child dies (a crash, kill -9, an out-of-memory kill) the mount
// stays; requests queue in the kernel; a new child takes the connection over
// (fuse/session_io.h: INIT replayed, requests in flight resent) with the
// state the last one left in CACHE_DIR/session (dataset slots, passthrough
// opens, checkpoint handles), so open files keep working.
//
// Signals to the supervisor (its PID is the one hoard-fuse was started as):
//   SIGHUP           restart in place: the child answers what it read and
//                    exits; the supervisor executes the hoard-fuse binary at
//                    its path again (a binary replaced there takes over:
//                    an upgrade), keeping the descriptor, and starts a child.
//   SIGTERM, SIGINT  stop: the child exits, then the supervisor unmounts.
// If the supervisor itself dies, its child gets kSupervisorGone
// (PR_SET_PDEATHSIG): it ends the connection (AbortConnection), detaches the
// mount and exits at once, so the mount never outlives both, and requests in
// flight and open files fail with ENOTCONN rather than wait on a stop (as
// when the whole mount is killed). The abort comes first: a detach alone
// would let a writer reopening its path write into the directory underneath. Under systemd with the
// descriptor in its store (fuse/systemd_fdstore.h) it only exits: systemd
// restarts the supervisor, which takes the descriptor back.
//
// A child that dies while serving is replaced at once. One that dies before
// it served (a broken binary or configuration after an upgrade) is replaced
// after a pause that grows with each such death in a row (up to 2 s); after
// kMaxCrashes deaths within a minute the supervisor gives up: it unmounts, so
// that readers get an error instead of waiting for ever, and exits 1.
//
// Each child started gets --generation=G (1, 2, ...; kept across SIGHUP);
// it writes CACHE_DIR/server.json (WriteServerState) once it serves, so an
// orchestrator sees a restart complete.
//
// Thread-safety: RunSupervisor runs in a single-threaded process (it forks
// and executes); it handles signals synchronously (sigwaitinfo).
#pragma once

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace hoard::fuse {

struct SupervisorOptions {
  std::string mountpoint;  // resolved path
  // The mount's options (-o), as fuse_session_new takes them.
  std::string fuse_options;
  // The binary executed for each child and for a restart in place: the path
  // hoard-fuse was started from, so that a replaced binary is the one run.
  std::string binary;
  // The command line without its program name and without the flags the
  // supervisor adds (kSupervisorFlags).
  std::vector<std::string> args;
  std::string session_dir;  // CACHE_DIR/session
  std::string state_file;   // CACHE_DIR/server.json (WriteServerState)
  // A restart in place (SIGHUP) executes the supervisor again with the
  // descriptor it holds and the last child's generation.
  int adopt_fd = -1;
  uint64_t generation = 0;
  // `adopt_fd` is also in systemd's descriptor store (a restart in place
  // keeps it there).
  bool fd_in_systemd = false;
  std::shared_ptr<spdlog::logger> logger;
};

// The flags the supervisor adds to the command lines it runs: dropped from
// `args` when it executes itself again.
inline constexpr const char* kSupervisorFlags[] = {"--serve-fd=",      "--takeover", "--generation=",
                                                   "--adopt-fd=",      "--fd-stored", "--supervisor-pid="};
inline constexpr int kMaxCrashes = 10;
// The signal a serving child gets when its supervisor dies (not SIGTERM,
// which asks it to stop gracefully).
inline constexpr int kSupervisorGone = SIGUSR1;

// The path a restart should execute for a program started as `argv0`: as
// given (absolute), or found on PATH; symlinks are kept, so that a link
// switched to a new version is followed.
std::string BinaryPath(const char* argv0);
// argv[1..] without kSupervisorFlags.
std::vector<std::string> ArgsWithoutSupervisorFlags(int argc, char** argv);

// Mounts (or adopts `adopt_fd`), runs children until told to stop; returns
// the process's exit code.
int RunSupervisor(SupervisorOptions options);

// Detaches the mount at `mountpoint` (umount2 MNT_DETACH as root, else
// fusermount3 -u -z).
Status Unmount(const std::string& mountpoint);
// Ends the FUSE connection of the mount whose device is `dev` ("major:minor",
// common/mountinfo.h) through fusectl: every request waiting and every open
// file then fails with ENOTCONN at once. Needs root.
Status AbortConnection(const std::string& dev);

// What a serving child writes to CACHE_DIR/server.json once it serves.
struct ServerState {
  int pid = 0;
  int supervisor_pid = 0;
  uint64_t generation = 0;
  bool took_over = false;  // the connection was an earlier process's
  std::string version, commit;
};
Status WriteServerState(const std::string& path, const ServerState& state);
// The generation in the server state at `path`; 0 if none can be read.
uint64_t ServingGeneration(const std::string& path);

}  // namespace hoard::fuse
