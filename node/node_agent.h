// File: node/node_agent.h
//
// NodeAgent is the daemon on each GPU node (hoard-node). It
//   - keeps the node's chunk store (its NVMe cache directory);
//   - registers with the coordinator, heartbeats, and follows the cluster map
//     (ClusterWatcher), computing which chunks of each dataset it owns;
//   - warms the datasets marked warm: fetches its owned chunks from the origin
//     (Warmer), resuming where it stopped after a restart;
//   - serves chunks to mounts and peers over ZeroMQ (ChunkService), reading
//     through from the origin on a miss;
//   - reports, per dataset, which of its owned chunks are cached, so the
//     coordinator can show exact progress;
//   - removes the chunks of datasets that were removed, and the copies it
//     holds but no longer owns once the coordinator says every chunk of the
//     dataset is on its owners (after a join, a drain, or a node's return);
//   - follows new versions of a dataset (`hoard dataset refresh`): owns and
//     warms the new version's chunks (unchanged files keep their keys, so
//     their chunks are already here and are not fetched again) and, once it
//     has adopted the version, deletes the chunks of files the version no
//     longer has (changed or removed at the origin);
//   - registers with a placement weight from its capacity (--capacity, or
//     the size of the store's disk when unlimited), which bounds everything
//     on its disk: dataset chunks, checkpoint copies and the mount's read
//     tier (store/disk_usage.h). Each heartbeat it measures the three kinds,
//     reports them, counts the other two in the chunk store's admission and
//     publishes them for the mount (STORE/store/node-usage);
//   - scrubs: re-reads every chunk file it keeps from the disk on a schedule
//     and quarantines and fetches again what rotted (node/scrubber.h);
//   - checkpoints (issue 6): stores and serves replicas (PutCkptChunk,
//     GetCkptChunk: checkpoint/ckpt_chunk_service.h) in STORE/ckpt
//     (store/replica_store.h), drains them to the checkpoint origin,
//     rebuilds lost replicas and evicts old ones (checkpoint/drainer.h).
//
// Threads: the RpcServer's I/O and worker threads, the Warmer's workers, the
// Drainer's thread, and one control thread that heartbeats and syncs the map. Everything shared
// between them is either immutable (ClusterView snapshots, owned-chunk lists)
// or guarded by mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "checkpoint/drainer.h"
#include "store/replica_store.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/disk_stats.h"
#include "common/metrics.h"
#include "cluster/cluster_view.h"
#include "node/chunk_service.h"
#include "node/peer_source.h"
#include "store/chunk_store.h"
#include "store/disk_usage.h"
#include "node/scrubber.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_filler.h"
#include "origin/origin_gate.h"
#include "prefetch/warmer.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"
#include "proto/rpc_server.h"

namespace hoard {

class NodeAgent {
 public:
  struct Options {
    std::string name;         // unique node name
    std::string listen;       // peer service endpoint, e.g. tcp://127.0.0.1:7101
    std::string advertise;    // endpoint peers should dial; default: the bound one
    // The data channel's port (proto/data_channel.h: sealed chunk traffic
    // beside CURVE) on --listen's address: 0 any free port, -1 none. Only
    // with CURVE keys. Peers dial it on the host of the endpoint they dialed.
    int data_port = 0;
    std::string coordinator;  // coordinator endpoint, or several separated by commas (HA)
    std::string store_dir;    // the chunk store (stands for the NVMe disk)
    uint64_t capacity_bytes = 0;  // 0 = unlimited (up to the disk's size)
    int fetch_threads = 16;   // warm-up workers
    // Origin reads in flight from this node at most (its NFS connections);
    // the cluster's --origin-max-connections may give it fewer.
    int origin_connections = 16;
    int serve_threads = 8;    // GetChunk workers (each may wait on the origin)
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds coordinator_timeout{3000};
    std::chrono::milliseconds warm_retry_after{30000};
    OriginOptions origin;
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    // Opens origins; tests substitute an in-memory origin.
    OriginPool::Opener open_origin;
    // The checkpoint origin this node drains to (--ckpt-origin: an NFS URL or
    // a local directory); "": checkpoint drain tasks fail with that reason.
    std::string ckpt_origin;
    // Opens it (the daemon: OpenCkptOrigin; tests: an in-memory one).
    Drainer::Opener open_ckpt_origin;
    // How often the drainer asks the coordinator for checkpoint work.
    std::chrono::milliseconds ckpt_poll_interval{500};
    // The scrubber (node/scrubber.h): a full pass this often (0 = only when
    // asked: `hoard scrub`), at most this many bytes a second.
    std::chrono::seconds scrub_interval{7 * 24 * 3600};
    uint64_t scrub_rate_bytes = 64u << 20;
    // Heartbeats and reports, and the warm-up and drain the agent starts.
    Clock* clock = Clock::Real();
  };

  static Result<std::unique_ptr<NodeAgent>> Start(Options options);
  ~NodeAgent();
  void Stop();

  const std::string& endpoint() const { return server_->bound_endpoint(); }
  // The data channel's bound endpoint; "" without one.
  const std::string& data_endpoint() const { return server_->data_endpoint(); }
  ChunkStore* store() { return store_.get(); }
  // Waits until the warm-up has nothing left to fetch for the datasets this
  // node owns chunks of (Warmer::WaitIdle). For tests.
  bool WaitWarmerIdle(std::chrono::milliseconds timeout) const { return warmer_->WaitIdle(timeout); }
  Scrubber* scrubber() { return scrubber_.get(); }
  ReplicaStore* replicas() { return replicas_.get(); }
  const Drainer::Counters& drain_counters() const { return drainer_->counters(); }
  std::shared_ptr<const ClusterView> view() const { return watcher_->Current(); }
  const ChunkService::Counters& counters() const { return service_->counters(); }
  // The node's metrics as sent with heartbeats (bytes from the origin, from
  // peers, requests served...).
  std::map<std::string, uint64_t> Counters() const;
  // Adds the node's metrics (node/node_metrics.cc) to `registry`, which must
  // not render after this agent is destroyed.
  void RegisterMetrics(metrics::Registry* registry);

  // Runs one heartbeat/sync round now (tests; the control thread does this
  // every heartbeat_interval).
  Status Tick();
  // What the node's disk held by kind at the last heartbeat (or registration).
  NodeUsage usage() const EXCLUDES(mu_);

 private:
  struct Owned {
    std::shared_ptr<const DatasetView> dataset;
    std::shared_ptr<const std::vector<ChunkRef>> chunks;
    uint64_t bytes = 0;
  };

  explicit NodeAgent(Options options);
  Status Init();
  void ControlLoop();
  void JanitorLoop();
  Status RegisterSelf();
  // Recomputes owned chunks, warm targets and garbage after a map change.
  void OnViewChange(const std::shared_ptr<const ClusterView>& view);
  // Deletes stored chunks of datasets the view no longer has or has evicted
  // (not resident: coordinator/eviction.h), and chunks of the view's
  // datasets whose file is not in the current version (once per dataset
  // version and process). REQUIRES: a view from the coordinator.
  void CollectGarbage(const ClusterView& view);
  // After CollectGarbage of `view` (janitor thread): hands the warmer the
  // targets OnViewChange held back for that view, now that the chunks of the
  // datasets it evicted are gone.
  void ReleaseDeferredTargets(const ClusterView& view);
  std::vector<proto::DatasetReport> BuildReports();
  // Removes stored chunks of `settled` datasets that this node does not own,
  // once per dataset and placement epoch.
  void DropUnownedCopies(const std::vector<proto::SettledDataset>& settled);
  // The capacity this node registers with (its placement weight).
  uint64_t Capacity() const;
  // Measures what the disk holds by kind (store/disk_usage.h), counts the
  // checkpoints and the read tier in the chunk store's admission, and
  // publishes the figures for the mount. Control thread (and Init, before
  // the threads start).
  NodeUsage MeasureUsage() EXCLUDES(mu_);
  // Fetches again (janitor thread) the chunks found corrupt, that this node
  // owns and no longer holds: from a peer that holds them, else the origin.
  void Refetch(const std::vector<std::pair<ChunkKey, uint64_t>>& chunks);
  // Whether someone reads the store's disk now (the scrubber yields): chunk
  // requests in flight, or the disk reading more than the scrubber does
  // (the mount reads chunk files directly).
  bool DiskBusy();
  // A peer's endpoint by name per the current map; "" if unknown or down.
  std::string PeerEndpoint(const std::string& name) const;
  // The endpoint peers dial: --advertise, else the one the server bound.
  std::string Advertised() const {
    return options_.advertise.empty() ? server_->bound_endpoint() : options_.advertise;
  }

  Options options_;
  std::unique_ptr<ChunkStore> store_;
  std::unique_ptr<OriginPool> origins_;
  std::unique_ptr<OriginGate> gate_;
  // Clients to peers, shared by the peer source and the drainer. A short
  // connect timeout: a LAN peer that is alive connects in well under a
  // millisecond, and a dead one must not hold up the next candidate.
  std::unique_ptr<proto::ClientPool> peers_;
  std::unique_ptr<PeerSource> peer_source_;
  std::unique_ptr<ReplicaStore> replicas_;
  std::unique_ptr<Drainer> drainer_;
  std::unique_ptr<ChunkFiller> filler_;
  std::unique_ptr<Warmer> warmer_;
  std::unique_ptr<ClusterWatcher> watcher_;
  std::unique_ptr<ChunkService> service_;
  std::unique_ptr<Scrubber> scrubber_;
  std::optional<DiskStats> disk_stats_;  // none on a filesystem without a block device
  // DiskBusy's last sample (the scrubber's thread only).
  uint64_t disk_read_at_ = 0, scrubbed_at_ = 0;
  std::unique_ptr<proto::RpcServer> server_;
  std::unique_ptr<proto::LeaderClient> coordinator_;  // used by the control thread only
  std::string followed_;  // the coordinator that answered the last heartbeat (control thread only)

  std::thread control_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool tick_now_ GUARDED_BY(mu_) = false;  // the warmer went idle: report now
  std::map<uint64_t, Owned> owned_ GUARDED_BY(mu_);  // by dataset uid
  uint64_t placement_epoch_ GUARDED_BY(mu_) = 0;     // of owned_
  std::map<uint64_t, uint64_t> dropped_at_ GUARDED_BY(mu_);  // uid -> placement epoch of the last drop
  uint64_t capacity_ = 0;                  // set once by Init
  NodeUsage usage_ GUARDED_BY(mu_);        // MeasureUsage's last
  // The janitor thread deletes chunks: thousands of unlinks take seconds,
  // and a control thread busy with them would miss heartbeats and have the
  // node marked down. It collects against the latest view handed to it, and
  // drops the unowned copies of the datasets the coordinator called settled.
  std::thread janitor_;
  CondVar janitor_cv_;
  std::shared_ptr<const ClusterView> gc_view_ GUARDED_BY(mu_);
  std::vector<proto::SettledDataset> to_drop_ GUARDED_BY(mu_);
  std::vector<std::pair<ChunkKey, uint64_t>> refetch_ GUARDED_BY(mu_);  // corrupt chunks, by dataset uid
  // Evictions: a view that evicts a dataset (to make room for another) has
  // its warm-up targets held back until the janitor has dropped the evicted
  // chunks, so the newcomer's warm-up finds the room the coordinator planned
  // instead of a full store. `evicted_dropped_`: the evicted datasets whose
  // chunks the janitor dropped (forgotten when one is resident again).
  // targets_mu_ is taken before mu_, and held while the warmer's targets
  // are set, so a held-back view's targets never replace a newer view's.
  Mutex targets_mu_ ACQUIRED_BEFORE(mu_);
  std::set<uint64_t> evicted_dropped_ GUARDED_BY(mu_);
  const ClusterView* deferred_view_ GUARDED_BY(mu_) = nullptr;
  std::vector<Warmer::Target> deferred_targets_ GUARDED_BY(mu_);
  // Janitor thread only: by dataset uid, the version whose stale chunks
  // CollectGarbage has removed.
  std::map<uint64_t, uint32_t> collected_;

  // Control thread only.
  bool registered_ = false;
  bool usage_write_failed_ = false;  // logged once until it works again
  uint64_t last_report_chunks_ = UINT64_MAX;
  uint64_t last_report_epoch_ = UINT64_MAX;
  uint64_t last_report_failures_ = UINT64_MAX;
  std::chrono::steady_clock::time_point last_full_report_;
};

}  // namespace hoard
