// File: common/daemon.h
//
// What every hoard daemon's main() shares: its logger and waiting for
// SIGINT/SIGTERM.
//
// The logger writes to stderr (systemd's journal, which rotates) or, with
// --log-file, to a file that rotates by size: FILE, FILE.1 ... FILE.N with N
// = --log-files, the oldest dropped, so a daemon started without systemd
// (start-stop-daemon, `hoard local up`) never fills the disk with its log.
//
// Thread-safety: call BlockTerminationSignals() first thing in main(), before
// any thread starts, so the signals reach only WaitForTermination().
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/result.h"

namespace hoard {

// Where and how much a daemon logs (the --log-* flags, common/daemon_flags.h).
struct LogOptions {
  std::string level = "info";  // "debug", "info", "warn", "error"
  std::string file;            // "" = stderr
  uint64_t max_bytes = 64ull << 20;  // a file rotates when its next line would pass this
  size_t keep = 4;                   // rotated files kept beside `file`
};

// A logger named `name` per `o`. Fails (InvalidArgument) when `o.file`
// cannot be opened for appending or `o.level` is not a level.
Result<std::shared_ptr<spdlog::logger>> MakeLogger(const std::string& name, const LogOptions& o);

void BlockTerminationSignals();

// Raises the soft limit on open files to the hard limit (a daemon serving many
// readers holds many chunk files and sockets) and returns the new limit.
uint64_t RaiseFileLimit();
// Has malloc keep freed chunk-sized buffers for reuse instead of returning
// them to the kernel. Daemons move chunks in buffers of a few MiB (ZeroMQ
// messages, seals, reads); glibc maps each one afresh beyond its adaptive
// threshold and unmaps it at free, so every message paid page faults and
// the zeroing of its pages (measured: `bench/RESULTS.md`, issue 6). The cost:
// each malloc arena (one per allocating thread, up to 8 per core) keeps what
// it held at its busiest, as thread arenas are trimmed only past the
// threshold and the main arena keeps up to 256 MiB free.
void KeepFreedBuffers();

// Returns the signal number once SIGINT or SIGTERM arrives.
int WaitForTermination();

}  // namespace hoard
