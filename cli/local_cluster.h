// File: cli/local_cluster.h
//
// A whole hoard cluster on this machine, under one directory, on loopback
// ports: what `hoard local up|down`, the demo and the end-to-end tests use.
//
//   DIR/bin/               the binaries the cluster runs (hoard,
//                          hoard-coordinator, hoard-node, hoard-fuse): copied
//                          from beside the `hoard` that ran a fresh `up`, and
//                          replaced only by `hoard local upgrade`, so a rebuild
//                          never changes what a running cluster restarts with
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
// coordinator, or with --coordinators N any coordinator or etcd member, a
// node, the mount) keeps what runs and restarts only the dead ones, each with
// the command line it was recorded with (its ports, its directories, its
// keys): etcd members first, then coordinators, then nodes, then the mount. A node the coordinator no longer lists (`hoard node
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
// Restarts and upgrades. `restart` restarts running daemons in place, one at
// a time, each waited for before the next: the coordinator (stop, start: its
// write-ahead log keeps its state; the mounts serve from their last map
// meanwhile), then node by node the agent (stop, start with its recorded
// command line; the mount reads local chunks from the store directly, and the
// others from peers or the origin) and then the mount of that node, which is
// restarted in place: SIGHUP to hoard-fuse's supervisor, which keeps the mount
// and its /dev/fuse fd and starts a new serving process from the binary at
// its path (readers see a pause, open files stay open); it is back when
// CACHE_DIR/server.json shows a higher "generation". `upgrade` first copies
// new binaries into DIR/bin, each to a temporary name renamed over the old
// one, then restarts everything. The first daemon that does not come back
// stops the run: the error names it, what was restarted and what was left
// running as it was; a daemon found not running is started in its turn, so
// running the same command again finishes a half-done upgrade.
//
// Concurrency: `up`, `down`, `restart` and `upgrade` hold an exclusive flock
// on DIR/local.lock for their whole run; a second one on the same directory
// fails at once. `up`, `restart` and `upgrade` hold SIGINT, SIGTERM and
// SIGHUP blocked while they run and check for them while they wait: one of
// them stops what was started and fails the `up`, or ends a restart after the
// daemon it is waiting for (which stays recorded).
//
// Thread-safety: single-threaded CLI code.
#pragma once

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hoard::cli {

struct LocalUpOptions {
  std::string dir;
  int nodes = 3;
  // 1: one coordinator with its state in DIR/coordinator. More: that many
  // coordinators in high availability, with as many etcd members
  // (DIR/etcdN/, DIR/coordinatorN/; manifests shared in DIR/shared/,
  // checkpoints drained to DIR/ckpt-origin/). Such a cluster is not resumed,
  // restarted or upgraded by `hoard local` yet: down, then up.
  int coordinators = 1;
  uint64_t capacity_bytes = 0;  // per node; 0 = the size of the store's disk
  bool mount = true;
  int down_after_ms = 5000;
  std::string out_after = "5m";  // the coordinators' --out-after
  std::string log_level = "info";
  std::string bin_dir;  // where hoard-coordinator, hoard-node, hoard-fuse are
  bool insecure = false;  // daemons without keys (--insecure): to measure what CURVE costs
  // The options given on the command line ("--nodes", "--coordinators", "--capacity",
  // "--no-mount", "--down-after-ms", "--out-after", "--log-level", "--insecure"): a resume
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

// The binaries of a local cluster, all in DIR/bin.
inline constexpr const char* kLocalBinaries[] = {"hoard", "hoard-coordinator", "hoard-node", "hoard-fuse"};

struct LocalRestartOptions {
  std::string dir;
  // The nodes to restart (each one's agent, then its mount); with neither
  // `nodes` nor `coordinator`, every daemon.
  std::vector<std::string> nodes;
  bool coordinator = false;
  // Non-empty: an upgrade. The binaries in this directory replace DIR/bin's
  // first, then every daemon restarts.
  std::string upgrade_from;
  // How long each daemon has to come back.
  std::chrono::seconds timeout{60};
  // Called with each daemon's step (the objects of "daemons" below) as it ends.
  std::function<void(const nlohmann::json&)> on_step;
};

// What `restart` or `upgrade` did, as far as it got: `status` is OK, or the
// reason it stopped (naming the daemon that did not come back). `doc`:
// {"dir", "upgrade", "bin_dir", "installed": [binaries copied],
//  "daemons": [{"name", "binary", "how" ("stop_start" | "in_place" |
//  "started": it was not running), "pid",
//  "previous_pid", "seconds"; the mount also "node", "generation",
//  "previous_generation"}], "restarted": [names], "not_restarted": [names],
//  "failed": name or null}.
struct LocalRestartResult {
  Status status;
  nlohmann::json doc;
};
LocalRestartResult LocalRestart(const LocalRestartOptions& options);

// `path` as one shell word (quoted if it needs to be), for the commands that
// messages suggest.
std::string ShellWord(const std::string& path);

}  // namespace hoard::cli
