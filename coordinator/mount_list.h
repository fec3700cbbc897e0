// File: coordinator/mount_list.h
//
// MountList is the coordinator's record of the live mounts and their builds.
// Every mount names itself (node, mountpoint, build) in the map polls it
// sends about every second, busy or idle (proto::Ping::mount, sent by
// cluster/cluster_view.h's ClusterWatcher::Poll), and `hoard status` lists
// the mounts heard from within `forget_after`, so a rolling upgrade shows
// which mounts still run the old build. A mount is one entry per (node,
// mountpoint): a restarted or upgraded mount replaces its own entry, and one
// silent for `forget_after` (stopped, unmounted, cut off) is forgotten.
//
// Not durable: after a coordinator restart the list fills again within one
// poll interval of each mount.
//
// Invariants: at most kMaxMounts entries (the most one array of a status
// reply may hold); a new mount beyond that is not recorded until a silent
// one is forgotten. Strings are cut to their wire limits, so a peer cannot
// grow an entry.
//
// Thread-safety: every method may be called from any thread. One mutex of
// its own, never held while calling out, so the polls of a thousand mounts do
// not queue behind the coordinator's mutex.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "proto/messages.h"

namespace hoard {

class MountList {
 public:
  struct Options {
    // A mount not heard from for this long is forgotten. Mounts poll every
    // second (hoard-fuse's poll interval), so this is many missed polls.
    std::chrono::milliseconds forget_after{std::chrono::seconds(60)};
    Clock* clock = Clock::Real();
  };

  static constexpr size_t kMaxMounts = proto::kMaxArrayEntries;

  explicit MountList(Options options) : options_(options) {}

  // Records that `mount` polled now. A poll naming no mountpoint (a node
  // agent's, the CLI's, a mount from before mounts named themselves) is
  // ignored.
  void Heard(const proto::MountInfo& mount) EXCLUDES(mu_);

  // The mounts heard from within forget_after, by (node, mountpoint), with
  // last_seen_unix set; the others are forgotten.
  std::vector<proto::MountInfo> Live() EXCLUDES(mu_);

 private:
  struct Entry {
    proto::MountInfo info;  // last_seen_unix kept current
    std::chrono::steady_clock::time_point last;
  };
  void ForgetSilentLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);

  const Options options_;
  Mutex mu_;
  std::map<std::pair<std::string, std::string>, Entry> mounts_ GUARDED_BY(mu_);  // by (node, mountpoint)
};

}  // namespace hoard
