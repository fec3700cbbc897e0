// File: fuse/read_tier.h
//
// ReadTier keeps copies of the chunks this mount fetched over the network (a
// peer's chunks, or the origin's when no owner served them) on this node's
// disk, so that the next epoch reads them like the node's own chunks: from
// the disk, with no round trip and no copy through the mount's memory. Without
// it two thirds of a 3-node cluster's reads go to peers in every epoch.
//
// The copies are a cache of a cache: the owners keep the chunks the cluster
// counts on, and a copy here may vanish at any time. So copies are written in
// the background (a reader never waits for the disk write: a copy that does
// not fit in the queue is dropped and counted), never fsynced, and evicted
// oldest first when the tier reaches its capacity or when the disk's free
// space falls under `min_free_bytes` (the node agent's store shares the disk
// and comes first).
//
// On-disk layout: a ChunkStore (store/chunk_store.h) in DIR, the same format as
// the node agent's store (DIR/chunks/<hh>/<name>, bytes and an xattr), so the
// mount opens and verifies a copy exactly like a local chunk. Chunk keys name
// one version of one file, so a copy is never stale: a file changed at the
// origin has new keys. The copies of a removed dataset are deleted
// (RemoveDataset); those of a mount that stopped are found again at its next
// start (indexed in the background, after which eviction knows them).
//
// Thread-safety: every method may be called from any thread. One writer
// thread (a WorkQueue, common/work_queue.h) does all the disk work (the
// index, puts, evictions, removals) in order.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include <spdlog/spdlog.h>

#include "common/file_util.h"
#include "common/work_queue.h"
#include "store/chunk_store.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

class ReadTier {
 public:
  struct Options {
    std::string dir;              // created if missing
    uint64_t capacity_bytes = 0;  // the most the copies may use; 0 = no tier
    // Copies are evicted (and none stored) while the disk has less free.
    uint64_t min_free_bytes = 0;
    // Copies waiting to be written; past this, new ones are dropped.
    size_t max_pending_bytes = 64u << 20;
    std::shared_ptr<spdlog::logger> logger;  // required
    // Called on the writer thread once a copy is in place, written from the
    // bytes the mount served and with their checksum in its record: the
    // mount counts it as verified for as long as it runs (reading it back
    // here would only read the page cache just written); a later mount
    // verifies it at first use, like any chunk file.
    std::function<void(const ChunkKey&)> on_stored;
  };

  struct Counters {
    std::atomic<uint64_t> stored_chunks{0};
    std::atomic<uint64_t> stored_bytes{0};
    std::atomic<uint64_t> evicted_bytes{0};
    std::atomic<uint64_t> dropped_chunks{0};  // queue full, no space, or a write error
    std::atomic<uint64_t> used_bytes{0};      // on disk now (after the background index)
    std::atomic<uint64_t> chunks{0};
  };

  // "auto" capacity: half the free space of the disk under `dir` now, and a
  // floor of a tenth of that disk (or 1 GiB, if less) left free.
  static void AutoSize(const std::string& dir, uint64_t* capacity_bytes, uint64_t* min_free_bytes);

  // Creates DIR/chunks and starts the writer, which first indexes the copies
  // already there. kIoError if the directory cannot be made.
  static Result<std::unique_ptr<ReadTier>> Open(Options options);
  ~ReadTier();
  ReadTier(const ReadTier&) = delete;
  ReadTier& operator=(const ReadTier&) = delete;

  // DIR/chunks, for openat() of a copy by ChunkStore::RelativeChunkPath.
  int chunks_dir() const { return chunks_dir_.get(); }
  // Queues a copy of the chunk (no-op if one is there or queued).
  void Offer(const ChunkKey& key, uint64_t dataset_uid, std::shared_ptr<const std::string> bytes);
  // Deletes every copy of the dataset (in the background).
  void RemoveDataset(uint64_t dataset_uid);
  // Deletes the copy of one chunk: it failed its check, and the good bytes
  // fetched next must be able to take its place. Its name goes at once, its
  // place in the index in the background (before any copy offered later).
  void Discard(const ChunkKey& key);
  // Waits until nothing is queued or being written (tests).
  void Flush();

  const Counters& counters() const { return counters_; }
  uint64_t capacity_bytes() const { return options_.capacity_bytes; }

 private:
  struct Copy {
    ChunkKey key;
    uint64_t dataset_uid;
    std::shared_ptr<const std::string> bytes;
  };
  struct Removal {
    uint64_t dataset_uid;
  };
  struct Discarded {
    ChunkKey key;
  };
  // The first task: opens the store and indexes the copies already there.
  struct Index {};
  using Task = std::variant<Index, Copy, Removal, Discarded>;

  explicit ReadTier(Options options);
  void Run(Task& task);
  void OpenStore();
  void Store(const Copy& copy);
  // Evicts the oldest copy; false when there is none left.
  bool EvictOldest();
  bool DiskLow() const;
  void UpdateUsage();

  Options options_;
  UniqueFd chunks_dir_;
  Counters counters_;
  // Writer thread only: the store (null until indexed, or if it could not be
  // opened) and the copies oldest first (some may be gone: removed datasets).
  std::unique_ptr<ChunkStore> store_;
  std::deque<ChunkKey> order_;
  uint64_t written_since_check_ = UINT64_MAX;  // first copy: look at once
  bool disk_low_ = false;

  // The writer. Copies cost their bytes, counted until written (the memory
  // they hold), up to max_pending_bytes; the tasks the destructor drops
  // count as dropped. Declared last: its thread uses the members above.
  std::unique_ptr<WorkQueue<Task>> writer_;
};

}  // namespace hoard::fuse
