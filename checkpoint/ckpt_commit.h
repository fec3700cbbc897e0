// File: checkpoint/ckpt_commit.h
//
// A checkpoint file open for writing on this mount (LocalFile), and the
// Committer that turns its bytes into a committed generation.
//
// LocalFile: STORE/ckpt/files/<id>, opened read-write and held with a shared
// flock for as long as any handle has it open (the node agent deletes only
// whole-file copies it can lock exclusively). All handles of one file on this
// mount share one LocalFile, so they see each other's writes.
//
// Commit (fsync, or the flush of close(2), of a file with uncommitted bytes):
//   1. fdatasync the local file, and at the first commit of an open its
//      directory (the open may have created the file): the bytes are on
//      this node's disk (L); this runs beside steps 2 and 3 (which read the
//      page cache), on the committer's task pool, and the commit waits for
//      all of them;
//   2. checksum each chunk (XXH3, chunk size from the cluster map);
//   3. unless the sync level is L, send each chunk to K-1 other up nodes,
//      chosen by rendezvous hashing of (id, index) so a file's chunks spread
//      over the cluster (restores then read from many nodes at once); they
//      fsync before answering. A node that fails is replaced by the next in
//      rank. Several chunks are in flight at once (parallel_puts: a FanOut,
//      common/fan_out.h, on the committer's task pool, which lives as long
//      as the mount, so a commit starts no thread);
//      Chunks the write-behind (checkpoint/ckpt_write_behind.h) already checksummed
//      and sent while the file was written, and that no write changed since
//      (checkpoint/ckpt_sent_chunks.h), are not read or sent again; nor are chunks
//      that are still the committed generation's (`base`): untouched since,
//      or written again with the same bytes (same checksum). Their copies are
//      reused (CkptCommit.chunk_gens), so appending 4 KiB to a large file
//      sends one chunk, and rewriting a file stores only what changed;
//   4. CkptCommit to the coordinator with gen+1, the checksums and who holds
//      what; it is journaled before the coordinator answers.
// Only then does fsync/close return 0. The level achieved is R when every
// chunk reached K nodes (K from the cluster map), else L (fewer than K nodes
// are up, or able to store a chunk: full, failing): logged, and
// visible in user.hoard.state and `hoard checkpoint ls`, rather than failing
// the training job's save.
//
// A commit that fails (coordinator unreachable, local disk error) returns the
// error to fsync/close; the bytes stay in the local file and the next fsync,
// close or release commits them again. Except after a failed fdatasync: the
// kernel reports a writeback error once, so a retry would commit bytes that
// may never have reached the disk; every later commit of that file fails
// (CkptFs keeps it across reopens) until it is written again from offset 0
// after a truncate to 0 (O_TRUNC).
//
// Thread-safety: LocalFile::mu serialises writes, truncates and commits of
// one file; Committer is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/result.h"
#include "common/task_pool.h"
#include "common/thread_annotations.h"
#include "cluster/cluster_view.h"
#include "checkpoint/ckpt_sent_chunks.h"
#include "proto/messages.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

struct LocalFile {
  uint64_t id = 0;
  std::string path;  // of the local file
  UniqueFd fd;       // read-write, flocked LOCK_SH
  Mutex mu;
  // The committed generation whose bytes the file held when opened or last
  // committed (its copies are what a commit may reuse); null: none known.
  // Set with mu held; atomic because the write-behind reads it without mu.
  std::atomic<std::shared_ptr<const proto::CkptEntry>> base;
  // Permission bits as this mount last saw them (a write by a user without
  // CAP_FSETID clears set-user-ID and set-group-ID).
  uint32_t mode GUARDED_BY(mu) = 0;
  uint64_t size GUARDED_BY(mu) = 0;
  bool dirty GUARDED_BY(mu) = false;  // bytes not committed yet
  uint64_t gen GUARDED_BY(mu) = 0;    // the committed generation the bytes derive from
  proto::CkptLevel level GUARDED_BY(mu) = proto::CkptLevel::kNone;  // of gen
  // An fdatasync of the file failed: pages the kernel could not write may be
  // lost, and a later fdatasync would not say so again (the error is
  // reported once).
  bool sync_failed GUARDED_BY(mu) = false;
  // The directory entry of the local file is on the disk (fsynced by the
  // first commit of this open).
  bool dir_synced GUARDED_BY(mu) = false;
  SentChunks sent;  // chunks of gen+1 already at their holders (write-behind)

  // Call before the bytes change (a write, a truncation): the file then no
  // longer holds the generation its stamp names (store/replica_store.h),
  // which this node's readers trust to read it directly (checkpoint/
  // ckpt_fs.h), so a clean file loses its stamp first. Marks it dirty.
  void WillChange() REQUIRES(mu);
};

// Opens (creating if needed) the local file for `id` under `dir` and flocks it
// shared; `truncate` empties it.
Result<std::shared_ptr<LocalFile>> OpenLocalFile(const std::string& dir, uint64_t id, bool truncate);

class Committer {
 public:
  struct Options {
    std::string node_name;
    uint64_t mount = 0;  // the mount's session id (CkptCommit.mount)
    proto::CkptLevel sync_level = proto::CkptLevel::kR;
    std::chrono::milliseconds coordinator_timeout{10000};
    std::chrono::milliseconds peer_timeout{10000};
    int parallel_puts = 4;  // chunks in flight to peers per commit
    std::shared_ptr<spdlog::logger> logger;
  };
  struct Done {
    uint64_t gen = 0;
    proto::CkptLevel level = proto::CkptLevel::kNone;
    std::shared_ptr<const proto::CkptEntry> entry;  // as the coordinator committed it
  };

  // `pool`: clients of the nodes; `coordinator`: of the coordinators (both
  // outlive this committer).
  Committer(Options options, proto::ClientPool* pool, proto::LeaderPool* coordinator,
            std::function<std::shared_ptr<const ClusterView>()> current_view);

  // Commits `f`'s bytes (see the top). A failed fdatasync sets
  // f.sync_failed. `writing`: the file stays open for writing on this mount
  // (CkptCommit.writing). On success the local file is stamped with the
  // generation (ReplicaStore::StampGeneration).
  Result<Done> Commit(LocalFile& f, bool writing) REQUIRES(f.mu);

  // Tests: the next commit's fdatasync fails with `err`.
  void TEST_FailNextSync(int err) { fail_next_sync_.store(err); }

  // Sends chunk `index` of generation `gen` of file `id` to the nodes that
  // should hold it besides this one (up to K-1, the next in rank replacing
  // one that fails); returns their names. None when the sync level is L.
  std::vector<std::string> SendChunk(const ClusterView& view, uint64_t id, uint64_t gen, uint32_t index,
                                     uint64_t checksum, const std::string& bytes);
  // K (counting this node) and the chunk size are the cluster map's (the
  // coordinator's --ckpt-replicas): every mount commits with the same ones.
  // Before the first map, and for values no coordinator sends, the defaults.
  static uint32_t Replicas(const ClusterView* view);
  static uint64_t ChunkSize(const ClusterView* view);
  // K-1 copies to send of each chunk (0 at sync level L).
  size_t copies_wanted(const ClusterView* view) const {
    const uint32_t k = Replicas(view);
    return options_.sync_level != proto::CkptLevel::kL && k > 1 ? k - 1 : 0;
  }
  // The chunk size of the current cluster map.
  uint64_t chunk_size() const { return ChunkSize(current_view_().get()); }

  // Chunks of committed files: sent while being written (and unchanged
  // since), or read and sent by the commit itself.
  uint64_t chunks_sent_ahead() const { return sent_ahead_.load(); }
  uint64_t chunks_sent_at_commit() const { return sent_at_commit_.load(); }
  // Chunks a commit counted without sending them: the committed
  // generation's copies already held those bytes.
  uint64_t chunks_reused() const { return reused_chunks_.load(); }

  // The K-1 nodes (member indexes of `view`) that should hold chunk `index`
  // of file `id` besides `self`, best first, among the up nodes.
  static std::vector<uint32_t> ReplicaCandidates(const ClusterView& view, uint64_t id, uint32_t index,
                                                 const std::string& self);
  // If chunk `index` of `f` holds `checksum` over `len` bytes, as its base
  // generation's does, that generation's copies (their holders and the
  // generation in their names), counted instead of a send.
  static std::optional<SentChunks::Sent> SameAsBase(const ClusterView* view, const LocalFile& f, uint32_t index,
                                                    uint64_t checksum, uint64_t len, uint64_t chunk_size, size_t want);

 private:
  // The holders of chunk `index` of `base` that a commit may count again,
  // if there are `want` of them up (else empty).
  static std::vector<std::string> ReusableHolders(const ClusterView* view, const proto::CkptEntry& base,
                                                  uint32_t index, size_t want);
  // Sends one chunk to up to `want` nodes from `candidates`; returns their names.
  std::vector<std::string> Replicate(const ClusterView& view, const std::vector<uint32_t>& candidates, size_t want,
                                     const proto::PutCkptChunk& put, const std::string& bytes);

  Options options_;
  proto::ClientPool* pool_;
  proto::LeaderPool* coordinator_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  std::atomic<int> fail_next_sync_{0};
  std::atomic<uint64_t> sent_ahead_{0}, sent_at_commit_{0}, reused_chunks_{0};
  // Runs the commits' sends (their FanOut helpers) and local syncs, for every
  // file of the mount; keeps a commit's worth of threads idle between
  // commits. Declared last: every commit waits for what it ran here.
  TaskPool tasks_;
};

}  // namespace hoard::fuse
