// File: coordinator/coordinator.h
//
// The coordinator is the cluster's single source of truth for membership and
// datasets. It knows:
//   - the nodes: registered members, their endpoints and weights, and whether
//     each is up (heard from within `down_after`) or down;
//   - the datasets: name, source, manifest version, replicas, warm flag;
//   - what each node reports it holds, to answer "how much is cached".
// It never moves data itself, and never computes anyone's placement: nodes and
// mounts fetch the cluster map and the manifests and compute the stripe
// assignment themselves (striping/assignment.h), and each node reports which
// of its owned chunks it holds, by ordinal; the coordinator only adds those up
// into progress, so its work grows with chunks held, not members x chunks.
//
// Epochs: `epoch` bumps on every change of the cluster map (so fetching the
// map is needed only when a heartbeat reply shows a newer one);
// `placement_epoch` bumps only when the member list or weights change, which
// is when chunk owners change.
//
// Durability: a change is acknowledged only after StateStore has saved it.
//
// Dataset versions: AddDataset records version 1; RefreshDataset walks the
// source again and records version + 1 (same uid, so unchanged files keep
// their keys, chunks and owners), or nothing when the origin is unchanged.
// Only the current version exists here: its manifest is the only one served,
// and nodes report on it (reports on another version are ignored).
//
// Checkpoints (issue 6): the namespace, drain scheduling and retention are in
// a CkptTable (checkpoint/ckpt_table.h) kept in DATA/ckpt/, mirrored onto the
// checkpoint origin by a Publisher thread (checkpoint/publisher.h). The
// coordinator only adds what the table must not reach for itself: which
// nodes are up (CkptWork), and the flags mounts learn from the cluster map.
//
// Parts: the coordinator is the façade over four units that keep no lock of
// their own: Membership (coordinator/membership.h: nodes, weights, up/down,
// last heard), Catalogue (coordinator/catalogue.h: datasets, versions,
// manifests, walk reservations), Progress (coordinator/progress.h: the
// nodes' reports, fill rates, settled datasets, warm-up status) and the
// LeaseTable (coordinator/leases.h: job leases on datasets, journaled with
// the rest but not part of the cluster map, so a lease changes no epoch). The
// coordinator validates requests, journals every change (StateStore) and
// undoes it in the parts when that fails.
//
// Thread-safety: all public methods may be called concurrently (RpcServer
// workers). One mutex guards the epochs and all three parts (the checkpoint
// table has its own; mu_ is never held while calling it); the slow part of
// AddDataset and RefreshDataset (walking the origin) runs outside it, with
// the name reserved so two adds or refreshes of the same name cannot race,
// and so does combining reports into status (Progress::Compute).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "checkpoint/ckpt_sessions.h"
#include "checkpoint/ckpt_table.h"
#include "checkpoint/publisher.h"
#include "common/clock.h"
#include "common/journal.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/result.h"
#include "coordinator/catalogue.h"
#include "coordinator/eviction.h"
#include "coordinator/leases.h"
#include "coordinator/manifest_store.h"
#include "coordinator/membership.h"
#include "coordinator/mount_list.h"
#include "coordinator/progress.h"
#include "coordinator/state_store.h"
#include "origin/ckpt_origin.h"
#include "origin/origin.h"
#include "proto/messages.h"
#include "striping/manifest.h"

namespace hoard {

class Coordinator {
 public:
  struct Options {
    std::string data_dir;  // required
    // A node silent for this long is marked down (readers then skip it).
    std::chrono::milliseconds down_after{5000};
    // A node down for longer than this is out: its chunks get new owners.
    // Until then it keeps its placement (proto::NodeInfo::held), so a node
    // back within it (a reboot, an upgrade) finds its share where it left it
    // and nothing moves away and back; meanwhile its chunks are read from
    // their other owners or the origin. 0: out as soon as down.
    std::chrono::seconds out_after{std::chrono::minutes(5)};
    OriginOptions origin;
    std::shared_ptr<spdlog::logger> logger;  // required
    Clock* clock = Clock::Real();
    // Opens a dataset source; tests substitute an in-memory origin.
    std::function<Result<std::unique_ptr<Origin>>(const std::string& source)> open_origin;
    // Walks of dataset sources allowed at once; more get kUnavailable. Walks
    // run on RPC workers, so this keeps heartbeats and status served.
    int max_concurrent_adds = 2;
    // What the nodes together may ask of the central storage; handed to them
    // in the cluster map.
    proto::OriginLimits origin_limits;
    // Job leases: default and maximum ttl, bounds (coordinator/leases.h).
    LeaseTable::Options leases;

    // Eviction (coordinator/eviction.h): the datasets jobs hold leases on
    // (leases_) are never evicted, by admission or TTL.
    // At a tenant's quota, a warm evicts the tenant's own datasets (kEvict)
    // or fails at once (kReject): --quota-policy.
    eviction::QuotaPolicy quota_policy = eviction::QuotaPolicy::kEvict;
    // Last-read times (DatasetMeta::last_read_unix) change with every mount
    // poll; they are saved with the next change of the state, or after this
    // long at the latest, so a restart forgets at most this much of them.
    std::chrono::seconds last_read_save_interval{60};

    // High availability (coordinator/ha_coordinator.h): where the two state
    // machines keep their history. Null: files under data_dir (the
    // single-coordinator default). A journal that refuses a write because
    // this coordinator no longer leads fails the request (kNotLeader, so its
    // client asks the leader); its owner then drops this coordinator.
    std::shared_ptr<Journal> state_journal;
    std::shared_ptr<Journal> ckpt_journal;
    // Where manifests are shared with the other coordinators
    // (coordinator/manifest_store.h): nfs://host/export/path or an absolute
    // directory, opened with ckpt.open_origin; empty: nowhere.
    std::string shared_store;

    // Checkpoints (issue 6).
    struct Checkpoints {
      // The checkpoint origin: "nfs://host/export/path" or an absolute local
      // directory. Empty: DATA/ckpt-origin, a local directory for the
      // embedded single-host default (checkpoints then reach P on this
      // host's disk only).
      std::string origin;
      // Opens the checkpoint origin. Null: checkpoints are kept, replicated
      // and listed, but nothing is published (every file stays below P, and
      // a warning says so). main.cc passes OpenCkptOrigin; tests a fake.
      std::function<Result<std::unique_ptr<CkptOrigin>>(const std::string& source)> open_origin;
      // K: nodes a committed chunk must be on, counting the writer; handed
      // to mounts in the cluster map with the chunk size.
      uint32_t replicas = 2;
      uint64_t chunk_size = 4u << 20;
      // Committed generations not at P after this long count as overdue.
      std::chrono::seconds drain_deadline{600};
      // Upload bandwidth of all nodes together, bytes/s, split evenly among
      // the up nodes; 0 = unlimited. A separate budget from
      // origin_limits.max_bytes_per_s (reads): checkpoints are written to
      // the origin, datasets read from it, and the deadline needs its own.
      uint64_t drain_max_bytes_per_s = 0;
      // The drain's share of origin traffic while datasets fill, and its
      // floor (CkptTable::Options::drain_share).
      double drain_share = 0.25;
      uint64_t drain_min_bytes_per_s = 16ull << 20;
      uint32_t keep_last = 2;  // a job's checkpoints whose local copies stay after P
      std::vector<std::string> commit_markers = {".metadata", "latest", "latest_checkpointed_iteration.txt"};
      std::chrono::milliseconds drain_lease{std::chrono::seconds(120)};
      // A node silent this long is lost to the checkpoints: the chunks it
      // held of files not yet at P get new holders among the up nodes
      // (CkptTable::Rereplicate), so they are back on K nodes. Longer than
      // down_after, so that a restart or a short outage copies nothing.
      // 0 = never.
      std::chrono::milliseconds lost_after{std::chrono::seconds(120)};
      // A mount's session (checkpoint/ckpt_sessions.h) not heard from for
      // this long is over: its locks are released, its open files no longer
      // keep old generations.
      std::chrono::milliseconds session_timeout{std::chrono::seconds(10)};
      // After a start, only locks held before it are granted for this long.
      std::chrono::milliseconds lock_grace{std::chrono::seconds(6)};
      // A rewritten or removed generation is kept at least this long for
      // readers that may have it open (CkptTable::Options::retire_grace).
      std::chrono::milliseconds retire_grace{std::chrono::seconds(15)};
    } ckpt;
  };

  // A dataset may have at most this many chunks: progress and placement work
  // is proportional to it. A larger dataset needs a larger --chunk-size.
  static constexpr uint64_t kMaxDatasetChunks = 64ull << 20;

  static Result<std::unique_ptr<Coordinator>> Open(Options options);

  Result<proto::RegisterNodeReply> RegisterNode(const proto::RegisterNode& req);
  Result<proto::HeartbeatReply> Heartbeat(const proto::Heartbeat& req);
  proto::ClusterMap GetClusterMap() const;
  // Fills `payload` with the requested slice of a manifest.
  Result<proto::ManifestPart> GetManifest(const proto::GetManifest& req, std::string* payload) const;

  // Walks the source once and records the dataset. kAlreadyExists if the name
  // is taken, kInvalidArgument for a bad name/chunk size/replica count,
  // kNotFound / kUnavailable if the source cannot be read.
  Result<proto::DatasetAddReply> AddDataset(const proto::DatasetAdd& req);
  // Walks the dataset's source again. If anything changed (DiffManifests),
  // records the result as the next version, durably, keeping the dataset's
  // uid, replicas, chunk size and warm flag; otherwise changes nothing. The
  // reply says which files were added, changed and removed and how many bytes
  // must be fetched again. kNotFound for an unknown dataset (or one removed
  // during the walk), kUnavailable if a walk of it is already running, and the
  // walk's error if the source cannot be read: the current version then stays.
  Result<proto::DatasetRefreshReply> RefreshDataset(const std::string& name);
  proto::DatasetListReply ListDatasets() const;
  Status RemoveDataset(const std::string& name);
  // Asks every owner to hold all its chunks of the dataset, making it
  // resident again if it was evicted. Admission first (coordinator/eviction.h):
  // evicts what must go to make room (listed in the reply), or fails at once
  // with kNoSpace saying what is missing where and what holds the space.
  // Idempotent: a warm, resident dataset evicts nothing.
  Result<proto::WarmReply> Warm(const std::string& name);
  // Changes a dataset's eviction settings (priority, pin, TTL, tenant).
  // kInvalidArgument for a bad value, kNotFound for an unknown dataset.
  // Idempotent.
  Result<proto::DatasetSetReply> SetDataset(const proto::DatasetSet& req);
  // Sets a tenant's quota (0: none). It applies at the next admission: a
  // lower quota evicts nothing by itself. Idempotent.
  Result<proto::QuotaSetReply> SetQuota(const std::string& tenant, uint64_t bytes);
  proto::QuotaListReply ListQuotas() const;
  // A mount's poll listed the datasets it served reads of (Ping::read_datasets):
  // their last-read time becomes now.
  void DatasetsRead(const std::vector<uint64_t>& uids);
  // Drains a node (placement weight 0: its chunks get new owners, which copy
  // them from it while it keeps serving) or takes it back. kNotFound for an
  // unknown node; kInvalidArgument for a drain of the last node that owns
  // chunks while datasets exist (their chunks would have no owner, and a
  // drain --wait would never end). Idempotent.
  Result<proto::NodeDrainReply> SetDraining(const std::string& name, bool drain);
  // Forgets a node. kInvalidArgument, whatever `force`, for a node that is
  // up (its agent would register again at once: stop it first) or the last
  // node that owns chunks while datasets exist; without `force`, for a node
  // that still owns chunks (down but held: they would move now). kNotFound
  // for an unknown node.
  Result<proto::NodeRemoveReply> RemoveNode(const std::string& name, bool force);
  // Takes or renews a job's lease on a dataset (coordinator/leases.h),
  // journaled before the answer. kNotFound for a dataset that does not
  // exist; the table's errors (bad job id or ttl, too many leases).
  // `key_class` names the key the request came with ("client", ...).
  Result<proto::LeaseTakeReply> TakeLease(const proto::LeaseTake& req, const std::string& key_class);
  // Releases the job's lease on req.dataset, or all its leases (dataset
  // empty). Releasing what is not held succeeds with released 0.
  Result<proto::LeaseReleaseReply> ReleaseLease(const proto::LeaseRelease& req);
  proto::LeaseListReply ListLeases() const;
  // The datasets a job holds an unexpired lease on, now: the eviction
  // planner's "never evict" set. Takes the coordinator's mutex; code already
  // under it calls leases().HeldDatasets(now) itself.
  std::set<std::string> LeasedDatasets() const;
  // Drops expired leases, durably (CheckLiveness calls it each round).
  void ExpireLeases();

  // A mount's map poll named it (proto::Ping::mount): `hoard status` lists
  // it, with its build, until it is silent for a minute (coordinator/mount_list.h).
  void HeardMount(const proto::MountInfo& mount) { mounts_.Heard(mount); }
  // Nodes and datasets with cached amounts (`dataset` narrows to one), the
  // live mounts, and every party's build.
  Result<proto::ClusterStatusReply> GetStatus(const std::string& dataset) const;
  // Adds the coordinator's metrics (coordinator/coordinator_metrics.cc: members,
  // warm-up per dataset, checkpoint backlog) to `registry`, which must not
  // render after this coordinator is destroyed.
  void RegisterMetrics(metrics::Registry* registry) const;

  // Marks nodes silent for longer than down_after as down, and recomputes
  // which datasets are settled (every chunk on all its owners at the current
  // placement; heartbeat replies tell nodes, which then drop copies they no
  // longer own). The service calls
  // this periodically; tests call it after advancing a FakeClock. If this
  // check itself ran late (the coordinator was stalled: swapped out, stopped,
  // a slow disk), the silence is ours, not the nodes': they get a fresh
  // timeout instead of all being marked down at once. Then gives the
  // checkpoint chunks of nodes silent past ckpt.lost_after new holders, ends
  // the checkpoint sessions of silent mounts and down nodes, and retires
  // checkpoint generations no one reads any more. Then evicts the datasets
  // not read for their TTL, and saves last-read times when due.
  void CheckLiveness();

  // Makes walks in progress give up (kUnavailable) so a shutdown does not
  // wait for a big NFS tree to be walked.
  void Shutdown();

  uint64_t epoch() const;

  // The checkpoint namespace (mount and CLI requests go straight to it).
  CkptTable& checkpoints() { return *ckpt_table_; }
  // Mount sessions and checkpoint file locks.
  CkptSessions& ckpt_sessions() { return *ckpt_sessions_; }
  // `hoard checkpoint status|ls`: the table's answer, with the origin it
  // publishes to named in `origin.source`.
  Result<proto::CkptStatusReply> CkptStatus(const proto::CkptStatus& req) const;
  // Whether the checkpoint origin takes the drain (`hoard status`).
  proto::CkptOriginHealth CkptOriginHealth() const;
  // Drain work for `node`, given the nodes up now.
  Result<proto::CkptWorkReply> CkptWork(const std::string& node, bool rebuild = false, uint64_t rebuilt = 0,
                                        uint64_t dropped = 0);

  // Test-only: the durable state, for fault injection.
  StateStore& TEST_store() { return store_; }

 private:
  // Holds a name reserved in the catalogue while its source is walked.
  struct WalkReservation {
    Coordinator* c;
    std::string name;
    ~WalkReservation();
  };

  explicit Coordinator(Options options);
  int64_t NowUnix() const { return options_.clock->WallSeconds(); }
  Status Load();
  // Opens the checkpoint table and, if there is an origin, the publisher.
  Status OpenCheckpoints();
  // The checkpoint half of CheckLiveness (coordinator_ckpt.cc); takes mu_
  // itself, and calls the table without it.
  void CheckCkptCopies();
  // CheckLiveness's membership half; false when the check itself ran late
  // (every node got a fresh timeout, so nobody is lost either).
  bool CheckMembers();
  // Marks silent nodes down and ends the hold of those down past out_after,
  // committing each change (CheckMembers).
  void MarkDownAndOutLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // Why removing or draining `name` would leave the datasets no owner: it is
  // the only member with a placement weight and there are datasets. Empty
  // when not.
  std::string LastOwnerLocked(const std::string& name, const std::string& what) const REQUIRES(mu_);
  // Walks meta.source into a manifest of meta's uid, version and chunk size.
  // `what` prefixes errors and log lines ("dataset add NAME").
  Result<Manifest> WalkSource(const std::string& what, const proto::DatasetMeta& meta, int64_t created_unix);
  // Persists the current state and bumps the epoch.
  Status CommitLocked(bool placement_changed) REQUIRES(mu_);
  // Persists the current state without bumping the epoch: for what is not in
  // the cluster map's meaning (quotas, last-read times, job leases).
  Status SaveLocked() REQUIRES(mu_);
  // The TTL half of CheckLiveness, and the save of last-read times.
  void CheckEvictions();
  // What the eviction planner needs: the members that own a share, every
  // dataset with what each node holds of it, the leases and quotas.
  eviction::PlanInput EvictionInputLocked() const REQUIRES(mu_);
  // Marks the datasets named evicted (resident and warm false), durably,
  // logging why; undoes it if the commit fails. Also applies `also` (the
  // admitted dataset's change) in the same commit.
  Status EvictLocked(const std::vector<std::string>& names, const std::string& why,
                     const std::function<void()>& also = {}, const std::function<void()>& undo_also = {})
      REQUIRES(mu_);
  // Tells the checkpoint table which nodes are up (after Load and each commit).
  void ShareUpNodesLocked() REQUIRES(mu_);
  CoordinatorState SnapshotLocked() const REQUIRES(mu_);

  Options options_;
  StateStore store_;
  std::unique_ptr<ManifestStore> manifests_;  // over store_'s copies; made by Load
  // One mutex for the epochs and the three parts: most requests touch two
  // of them (a heartbeat: membership and progress, its reports checked
  // against the catalogue), and a commit saves them and the epochs as one.
  mutable Mutex mu_;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  uint64_t placement_epoch_ GUARDED_BY(mu_) = 0;
  Membership members_ GUARDED_BY(mu_);
  Catalogue catalogue_ GUARDED_BY(mu_);
  Progress progress_ GUARDED_BY(mu_);
  LeaseTable leases_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_liveness_check_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> quotas_ GUARDED_BY(mu_);  // by tenant
  // A last-read time changed since the state was last saved, and when that was.
  bool last_read_dirty_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_read_saved_ GUARDED_BY(mu_);
  std::atomic<bool> shutting_down_{false};
  // The live mounts; its own lock, so mounts' polls do not wait for mu_.
  mutable MountList mounts_;
  // Checkpoints; the publisher is declared last so it stops first.
  std::unique_ptr<CkptTable> ckpt_table_;
  std::unique_ptr<CkptSessions> ckpt_sessions_;  // after the table: it calls the table
  std::unique_ptr<CkptOrigin> ckpt_origin_;
  std::unique_ptr<Publisher> publisher_;
};

// True if `name` may name a dataset or node: 1-64 characters of [A-Za-z0-9._-],
// not starting with '.' or '-'.
bool IsValidName(std::string_view name);

}  // namespace hoard
