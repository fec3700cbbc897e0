// File: cluster/cluster_view.h
//
// ClusterView is an immutable snapshot of what a node agent or a mount knows
// about the cluster: the cluster map, the placement computed from it, and the
// manifest of every dataset version in it. Readers take a
// shared_ptr<const ClusterView> and use it without locks; ClusterWatcher
// publishes a new snapshot when the coordinator's epoch moves.
//
// While the coordinator is unreachable the last snapshot stays in use, and
// manifests are cached on disk so a restarted agent or mount can serve with
// the map it last saw.
//
// Thread-safety: ClusterView is immutable. ClusterWatcher's methods may be
// called from any thread; Sync calls are serialised internally.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/mutex.h"
#include "common/result.h"
#include "common/single_flight.h"
#include "proto/messages.h"
#include "proto/leader_client.h"
#include "striping/manifest.h"
#include "striping/placement.h"

namespace hoard {

struct DatasetView {
  proto::DatasetMeta meta;
  Manifest manifest;
};

class ClusterView {
 public:
  ClusterView(proto::ClusterMap map, std::map<std::string, std::shared_ptr<const DatasetView>> datasets,
              const std::string& self);

  const proto::ClusterMap& map() const { return map_; }
  uint64_t epoch() const { return map_.epoch; }
  const Placement& placement() const { return placement_; }
  // This process's member index in placement(), or -1 if it is not a member
  // (a mount, or a node that has not registered yet).
  int self_index() const { return self_index_; }
  const proto::NodeInfo& node(uint32_t member) const { return map_.nodes[member]; }

  // By name, or by uid and version; nullptr if absent.
  const DatasetView* dataset(std::string_view name) const;
  const DatasetView* dataset(uint64_t uid, uint32_t version) const;
  const std::map<std::string, std::shared_ptr<const DatasetView>>& datasets() const { return datasets_; }

 private:
  proto::ClusterMap map_;
  Placement placement_;
  int self_index_ = -1;
  std::map<std::string, std::shared_ptr<const DatasetView>> datasets_;
};

// Keeps a ClusterView current by polling the coordinator.
class ClusterWatcher {
 public:
  struct Options {
    std::string coordinator;  // endpoint, or several separated by commas (proto/leader_client.h)
    std::string self;         // this node's name; empty for a mount
    // A mount names itself here (node: hoard-fuse --node-name, or empty for
    // this host's name; mountpoint), and Poll then sends that with this
    // program's build (proto::Ping::mount), so the coordinator lists the
    // mount and its build in `hoard status` (coordinator/mount_list.h).
    // Empty mountpoint: a node agent, whose heartbeats say as much.
    proto::MountInfo mount;
    std::string cache_dir;    // manifests are kept in cache_dir/manifests/
    std::chrono::milliseconds timeout{5000};
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    // Called after each new snapshot is published (on the syncing thread).
    std::function<void(const std::shared_ptr<const ClusterView>&)> on_change;
  };

  explicit ClusterWatcher(Options options);

  // The current snapshot; an empty view (epoch 0) before the first sync.
  std::shared_ptr<const ClusterView> Current() const;

  // Fetches the map if `known_epoch` differs from the current view's (or
  // always, when known_epoch is 0) and publishes a new view. On failure the
  // current view stays and the error is returned.
  Status Sync(uint64_t known_epoch = 0);

  // Asks the coordinator for its epoch (a Ping, naming the mount:
  // Options::mount, and the datasets it read since its last poll: at most
  // proto::kMaxReadDatasets of `read_datasets` are sent) and syncs if it moved.
  Status Poll(std::vector<uint64_t> read_datasets = {});

  // Poll for request paths (a lookup of an unknown name, a chunk request for
  // an unknown dataset version), which must stay fast whatever the
  // coordinator does: concurrent callers share one poll, the ping waits at
  // most `ping_timeout`, and after a failure the next `backoff` of calls
  // return that failure at once instead of asking again. A sync already
  // running on another thread (the background poll fetching a new map and
  // its manifests) is waited for with kWait: a mount's lookup of a dataset
  // just added wants exactly that map. With kDontWait the call returns
  // kUnavailable at once: a node's RPC worker must not be held for a
  // manifest download.
  enum class SyncInProgress { kWait, kDontWait };
  Status RefreshForRequest(SyncInProgress in_progress,
                           std::chrono::milliseconds ping_timeout = std::chrono::milliseconds(300),
                           std::chrono::milliseconds backoff = std::chrono::milliseconds(1000));

  // The largest manifest a watcher will fetch (a bigger size in the map is
  // refused rather than allocated).
  static constexpr uint64_t kMaxManifestBytes = 8ull << 30;

  // Publishes the map saved by the last successful Sync (in cache_dir), with
  // the manifests cached beside it, so a restarted process can serve before
  // the coordinator answers. kNotFound if nothing was saved.
  Status LoadCached();

 private:
  Status SyncLocked(uint64_t known_epoch) REQUIRES(sync_mu_);
  Result<std::shared_ptr<const DatasetView>> LoadDataset(const proto::DatasetMeta& meta) REQUIRES(sync_mu_);
  Result<Manifest> FetchManifest(const proto::DatasetMeta& meta) REQUIRES(sync_mu_);
  std::string ManifestPath(const proto::DatasetMeta& meta) const;
  void Publish(std::shared_ptr<const ClusterView> view) EXCLUDES(view_mu_);
  // Deletes cached manifests no dataset of `map` uses any more.
  void PruneCache(const proto::ClusterMap& map);

  Options options_;
  const proto::Ping poll_ping_;  // what Poll sends: the mount, as Options::mount names it
  Mutex sync_mu_;  // serialises Sync; held while talking to the coordinator
  // Follows the leading coordinator; gives up looking after `timeout`.
  proto::LeaderClient client_ GUARDED_BY(sync_mu_);
  mutable Mutex view_mu_ ACQUIRED_AFTER(sync_mu_);  // guards view_ only, never held across I/O
  std::shared_ptr<const ClusterView> view_ GUARDED_BY(view_mu_);

  SingleFlight<int, Status> refresh_flight_;
  // RefreshForRequest pings on its own socket, so a background poll stuck on
  // a hung coordinator (holding sync_mu_) cannot hold up a request path.
  // Used only inside refresh_flight_, one caller at a time. It looks for a
  // leader for kRequestFailoverWait at most: a takeover must not stall a
  // lookup either (the background poll finds the new leader).
  proto::LeaderClient request_client_;
  static constexpr std::chrono::milliseconds kRequestFailoverWait{300};
  std::atomic<int64_t> refresh_failed_at_ns_{0};  // steady clock; 0 = last refresh worked
};

}  // namespace hoard
