// File: fuse/hoard_fs.h
//
// HoardFs is the FUSE file system (libfuse3 low-level API) that shows one
// POSIX namespace on each node:
//
//   MOUNT/datasets/NAME/...   every registered dataset, read-only, with the
//                             origin's names, sizes, modes, owners and mtimes:
//                             the dataset tree, DatasetFs (fuse/dataset_fs.h)
//   MOUNT/checkpoints/JOB/... the writable checkpoint namespace: the
//                             checkpoint tree, CkptFs (checkpoint/ckpt_fs.h)
//
// Routing: each request goes to one tree, chosen once by its inode number
// (Route: the checkpoint tree's range, IsCkptIno, else the dataset tree; the
// map is fuse/inode.h). The two trees have the same operations, so each op
// names its work once; what a tree refuses (a change of a dataset: EROFS) is
// that tree's method. A rename between the trees is EXDEV (Rename, here).
//
// Metadata never leaves the process: lookups, getattr and readdir are
// answered from the dataset's manifest (an immutable, validated index shared
// with the node agent), so a stat storm costs no network round trip. Data
// comes from ChunkReader (local chunk file, then owners, then the origin).
//
// Caching policy: a dataset version is immutable, so entries and attributes
// inside a dataset get long timeouts and file pages are kept in the kernel's
// page cache across opens (keep_cache). /datasets itself changes when
// datasets are added or removed: short timeouts there, and the kernel is told
// to drop a name when its dataset goes away or changes version.
//
// State: no per-inode and no per-open-file state for datasets (fuse/inode.h):
// a read finds its dataset and file from the inode number alone, and each
// worker thread keeps the chunk files it read last open (fuse/local_fds.h).
//
// Failures: every operation is wrapped so that an exception (bad_alloc, a
// library error) becomes EIO for that request and a log line, never the end
// of the mount (which would leave every reader with ENOTCONN).
//
// Thread-safety: the ops run on libfuse's worker threads concurrently; the
// map watcher runs on its own thread. Shared state is Namespace (lock-free
// reads), ChunkReader (thread-safe) and ClusterWatcher (snapshots).
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "cluster/cluster_view.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "checkpoint/ckpt_fs.h"
#include "fuse/chunk_reader.h"
#include "fuse/dataset_fs.h"
#include "fuse/mount_stats.h"
#include "fuse/namespace.h"
#include "fuse/passthrough.h"
#include "fuse/session_io.h"

namespace hoard::fuse {

class HoardFs {
 public:
  struct Options {
    std::string coordinator;
    std::string local_store;  // this node's chunk store directory; empty = none
    std::string cache_dir;    // where the mount keeps manifests and the last map
    double dataset_timeout = 3600;  // seconds; entries/attributes inside a dataset
    double top_timeout = 1;         // seconds; the root and /datasets
    std::chrono::milliseconds poll_interval{1000};
    // Times the map polls, the chunk reader and the checkpoint session
    // (tests pass a FakeClock).
    Clock* clock = Clock::Real();
    std::chrono::milliseconds peer_timeout{10000};
    std::chrono::milliseconds peer_connect_timeout{500};
    // Where the mount is: used to find its kernel read-ahead setting.
    std::string mountpoint;
    // The kernel's read-ahead window for the mount; 0 leaves the kernel's
    // default (128 KiB, which makes a 256 MiB file 2,048 round trips).
    uint32_t read_ahead_kb = 4096;
    // Kernel passthrough (fuse/passthrough.h) for dataset files whose bytes
    // are all in one chunk file on this node's disk. The same INIT patch lets
    // checkpoint files open for writing skip the mount's page cache
    // (CkptFs::Options::uncached_writes): off, they are cached as well.
    bool passthrough = true;
    // The mount's own read-ahead of chunks for sequential readers
    // (fuse/chunk_reader.h): chunks ahead (ChunkReader::kAutoReadahead:
    // 16 MiB worth, at least 4; 0 = none) and threads fetching them.
    int readahead_chunks = ChunkReader::kAutoReadahead;
    int readahead_threads = 8;
    // The in-memory cache of chunks fetched from peers or the origin
    // (ChunkReader::Options::memory_cache_bytes; read-ahead gets up to half).
    size_t memory_cache_bytes = 256u << 20;
    // The read tier (fuse/read_tier.h): copies of chunks read from peers, on
    // this node's disk. "" or 0 bytes = none.
    std::string read_tier_dir;
    uint64_t read_tier_bytes = 0;
    uint64_t read_tier_min_free = 0;
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    OriginPool::Opener open_origin;  // tests substitute an in-memory origin
    // Checkpoints (checkpoint/ckpt_fs.h): this node's name in the cluster map, the
    // level fsync/close wait for, and the checkpoint origin for files only
    // there. Without a local_store, checkpoints are read-only here.
    std::string node_name;
    proto::CkptLevel ckpt_sync_level = proto::CkptLevel::kR;
    int ckpt_write_behind_threads = 2;  // CkptFs::Options::write_behind_threads
    std::function<Result<std::unique_ptr<CkptOrigin>>()> open_ckpt_origin;
    // What a successor process needs to take over this mount's FUSE
    // connection (fuse/supervisor.h): the INIT request, dataset slots, open
    // passthrough inodes and checkpoint handles. "" = nothing kept.
    std::string session_dir;
    // This process takes over a connection an earlier one served: its INIT
    // is replayed from session_dir, not read from the kernel.
    bool takeover = false;
  };

  explicit HoardFs(Options options);
  ~HoardFs();

  // Loads the saved map and starts following the coordinator. Does not fail
  // when the coordinator is down: the mount then serves what it last knew.
  Status Start();
  // `end_session` false: a successor process takes the mount over (a restart
  // in place), so the checkpoint session stays open (CkptFs::Stop).
  void Stop(bool end_session = true);
  // Lets the watcher ask the kernel to drop names of changed datasets. A
  // session given here must be mounted and not yet looping: this also puts
  // the session I/O on it (fuse/session_io.h: INIT kept or replayed, kernel
  // passthrough negotiated where Options::passthrough). Fails only if
  // libfuse refuses that I/O. Null: the session is going away.
  Status SetSession(fuse_session* session);
  const Passthrough& passthrough() const { return passthrough_; }
  Passthrough& TEST_passthrough() { return passthrough_; }

  // The low-level operations table; userdata must be this HoardFs.
  static const fuse_lowlevel_ops& Ops();

  ChunkReader& reader() { return reader_; }
  const MountStats& stats() const { return stats_; }
  // Adds the mount's metrics (fuse/mount_metrics.cc) to `registry`, which
  // must not render after this HoardFs is destroyed.
  void RegisterMetrics(metrics::Registry* registry);

  // Negotiates the session's capabilities (called through Ops()).
  void Init(fuse_conn_info* conn);
  // The checkpoint tree, for the operations that only it serves.
  CkptFs& ckpt() { return *ckpt_; }
  // An operation threw: log it (the request then gets EIO).
  void OpFailed(const char* op, const char* what) { options_.logger->error("{} failed: {}", op, what); }

 private:
  // Calls `op` with the tree that serves `ino`: CkptFs for the checkpoint
  // tree's inodes (IsCkptIno), else DatasetFs. `op` is generic (auto&): the
  // trees have the same operations.
  template <typename Op>
  void Route(fuse_ino_t ino, Op&& op) {
    if (IsCkptIno(ino)) op(*ckpt_);
    else op(datasets_);
  }
  // The one operation that names two inodes whose trees may differ.
  void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned flags);
  // The free space of the cache disk, for either tree.
  void StatFs(fuse_req_t req, fuse_ino_t ino);
  void WatchLoop() EXCLUDES(mu_);
  void OnViewChange(const std::shared_ptr<const ClusterView>& view);
  // Sets the kernel's read-ahead window for this mount (a per-mount sysfs
  // knob that only exists once the kernel has processed INIT).
  void TuneReadAhead();
  void WriteStats();

  Options options_;
  // The dataset tree's state, shared with the map watcher (which updates the
  // namespace and prunes the read tier) and the metrics.
  Namespace ns_;
  ClusterWatcher watcher_;
  ChunkReader reader_;
  std::unique_ptr<CkptFs> ckpt_;
  MountStats stats_;
  Passthrough passthrough_;
  SessionIo session_io_;
  std::atomic<fuse_session*> session_{nullptr};
  std::atomic<bool> initialized_{false};
  bool read_ahead_done_ = false;  // watch thread only
  std::string last_stats_;        // watch thread only
  const int64_t start_time_;
  // After what it borrows (ns_ ... start_time_, and ckpt_'s lock waiter).
  DatasetFs datasets_;

  std::thread watch_thread_;
  // Held while calling into the read tier (OnViewChange): taken before
  // ReadTier's lock, never while holding it.
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  // Names in /datasets the kernel must forget. Sent by the watch thread only:
  // a notification sent from inside a request handler (a lookup that caused
  // a refresh) deadlocks on the directory lock the kernel holds for it.
  std::vector<std::string> pending_inval_ GUARDED_BY(mu_);
  std::set<uint64_t> mounted_uids_ GUARDED_BY(mu_);  // the datasets of the last view
  // A peer's reply showed a newer placement than our map: poll now rather
  // than at the next interval.
  bool poll_now_ GUARDED_BY(mu_) = false;
};

}  // namespace hoard::fuse
