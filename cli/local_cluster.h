// File: cli/local_cluster.h
//
// A whole hoard cluster on this machine, under one directory, on loopback
// ports: what `hoard local up|down`, the demo and the end-to-end tests use.
//
//   DIR/cluster.json       endpoints, pids and paths of what runs (written
//                          last by `up`, removed last by `down`)
//   DIR/coordinator/       the coordinator's data directory
//   DIR/nodeN/             node N's directory; its chunk store is DIR/nodeN/store
//   DIR/mount-cache/       the mount's manifests and last cluster map
//   DIR/mnt/               the mount (node1's view)
//   DIR/logs/*.log         one log per process
//
// Processes are started in their own sessions, so they outlive the CLI, and
// are stopped by PID; a PID is signalled only after checking that it still
// runs one of our binaries (PIDs are reused).
//
// Thread-safety: single-threaded CLI code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/result.h"

namespace hoard::cli {

struct LocalUpOptions {
  std::string dir;
  int nodes = 3;
  uint64_t capacity_bytes = 0;  // per node; 0 = unlimited
  bool mount = true;
  int down_after_ms = 5000;
  std::string log_level = "info";
  std::string bin_dir;  // where hoard-coordinator, hoard-node, hoard-fuse are
};

// Starts everything and waits until it is ready: the coordinator answers, all
// nodes are registered and up, the mount is mounted. On failure, stops what it
// started and returns the reason with the tail of the failing process's log.
// Returns the contents of cluster.json.
Result<nlohmann::json> LocalUp(const LocalUpOptions& options, zmq::context_t& zmq);

// Unmounts and stops everything `up` started in `dir`. With `purge`, also
// deletes the directory (the cached chunks included). Idempotent.
Result<nlohmann::json> LocalDown(const std::string& dir, bool purge);

}  // namespace hoard::cli
