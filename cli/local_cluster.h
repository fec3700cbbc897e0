// File: cli/local_cluster.h
//
// A whole hoard cluster on this machine, under one directory, on loopback
// ports: what `hoard local up|down`, the demo and the end-to-end tests use.
//
//   DIR/cluster.json       endpoints (also each daemon's /metrics HOST:PORT),
//                          PIDs (with each process's start time) and paths
//                          of what runs; see "Records" below
//   DIR/local.lock         flock'ed by a running `up` or `down`
//   DIR/keys/              the cluster's CURVE keys (hoard keys gen), made by
//                          the first `up` and kept; the CLI finds them
//                          through cluster.json ("keys")
//   DIR/coordinator/       the coordinator's data directory
//   DIR/nodeN/             node N's directory; its chunk store is DIR/nodeN/store
//   DIR/mount-cache/       the mount's manifests and last cluster map
//   DIR/mnt/               the mount (node1's view)
//   DIR/logs/*.log         one log per process
//
// DIR is resolved (symlinks, "..") once it exists, and every path recorded or
// compared with /proc/self/mountinfo is the resolved one.
//
// Resuming. `up` on a cluster recorded "up" of which some daemons died (the
// coordinator, a node, the mount) keeps what runs and restarts only the dead
// ones, each with the command line it was recorded with (its ports, its
// directories, its keys). A node the coordinator no longer lists (`hoard node
// remove`) is left out and marked "removed" in the record, never brought
// back. Where that cannot be done (a recorded port now taken by another
// program, a record without command lines from an older hoard, an option
// given that differs from the record) it refuses and names `hoard local down`
// (after which `up` starts afresh, on new ports). A failed resume stops what
// it restarted and leaves the rest as it was.
//
// Records. `up` writes cluster.json as it goes: every process is recorded
// before it is allowed to exec (the child waits on a pipe for that), with
// "state": "starting" until everything is ready, then "up". So whatever
// happens to the CLI (a failure, ^C, SIGKILL), the file names every daemon that
// may run, and `down` or the next `up` stops them; there is never a second set
// of processes on one store. "failed" means a failed `up` could not stop
// everything; `down` retries.
//
// Processes are started in their own sessions, so they outlive the CLI, and
// are stopped by PID. A PID is signalled only if its start time (field 22 of
// /proc/PID/stat) is the recorded one: PIDs are reused, start times with them
// are not. A recorded process whose PID now names another process is gone.
//
// Concurrency: `up` and `down` hold an exclusive flock on DIR/local.lock for
// their whole run; a second one on the same directory fails at once. `up`
// holds SIGINT, SIGTERM and SIGHUP blocked while it runs and checks for them
// while it waits: one of them stops what was started and fails the `up`.
//
// Thread-safety: single-threaded CLI code.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hoard::cli {

struct LocalUpOptions {
  std::string dir;
  int nodes = 3;
  uint64_t capacity_bytes = 0;  // per node; 0 = the size of the store's disk
  bool mount = true;
  int down_after_ms = 5000;
  std::string log_level = "info";
  std::string bin_dir;  // where hoard-coordinator, hoard-node, hoard-fuse are
  bool insecure = false;  // daemons without keys (--insecure): to measure what CURVE costs
  // The options given on the command line ("--nodes", "--capacity",
  // "--no-mount", "--down-after-ms", "--log-level", "--insecure"): a resume
  // refuses any of them that differs from what the cluster was started with.
  std::set<std::string> given;
};

// Starts everything and waits until it is ready: the coordinator answers, all
// nodes are registered and up, the mount is mounted. On any failure, or a
// signal, stops what it started and returns the reason (with the tail of the
// failing process's log). A cluster whose daemons all run is an AlreadyExists
// error; one of which some died is resumed (see "Resuming"); the leftovers of
// an `up` that died midway are stopped first.
// Returns the contents of cluster.json, plus "resumed" (bool), "kept" and
// "restarted" (daemon names) and "left_out" ([{"name", "reason"}]).
Result<nlohmann::json> LocalUp(const LocalUpOptions& options);

// Unmounts and stops everything `up` recorded in `dir`. With `purge`, also
// deletes the directory, cached chunks included (when `dir` is a symlink, its
// target is emptied and both are kept). Idempotent.
//
// Returns {"dir", "stopped": [names], "not_stopped": [{"name", "pid",
// "reason"}], "purged"}. A process that is still there after SIGKILL and a
// deadline (e.g. stuck in the kernel, state D) is listed in not_stopped; then
// cluster.json is kept, so that a later `down` tries again, and nothing is
// purged.
Result<nlohmann::json> LocalDown(const std::string& dir, bool purge);

// `path` as one shell word (quoted if it needs to be), for the commands that
// messages suggest.
std::string ShellWord(const std::string& path);

}  // namespace hoard::cli
