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
// oldest first to stay within the tier's budget (store/disk_usage.h,
// ReadTierBudget): its capacity (--read-tier-size), what the node's
// --capacity leaves after its datasets (and what their warm-ups fill) and
// its checkpoint copies, and the disk's free space above `min_free_bytes`.
// The node agent's chunks and checkpoints come first: the tier gives them
// room at its next Trim (the mount calls it every map poll, once a second),
// or sooner if a copy past its reservation finds the budget shrunk.
//
// Sharing the node's capacity: the tier writes DIR/usage (disk_usage.h:
// what it holds, and a reservation a step more that the node agent counts
// against the capacity) before it writes copies past its last reservation.
// The agent reads it once a heartbeat (a second), and the tier reads the
// agent's figures as of its last heartbeat, so both may take the same free
// room in between: while the node's capacity bounds it, the tier grows its
// reservation by at most one step (a sixteenth of its budget, at least a
// copy) a second, which bounds that excess to about two steps and a chunk,
// given back at its next trim. (Without a --capacity only the disk bounds
// both, and its free space is each one's to see at once.)
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
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/work_queue.h"
#include "store/chunk_store.h"
#include "store/disk_usage.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

class ReadTier {
 public:
  struct Options {
    std::string dir;              // created if missing
    uint64_t capacity_bytes = 0;  // the most the copies may use; 0 = no tier
    // Copies are evicted (and none stored) while the disk has less free.
    uint64_t min_free_bytes = 0;
    // The node agent's STORE/store/node-usage (disk_usage.h) when the tier
    // is on its disk and shares its --capacity; "" = it does not.
    std::string node_usage_path;
    // The disk's free bytes (tests); default statvfs(dir).
    std::function<std::optional<uint64_t>()> disk_free;
    // Times the growth of the reservation (tests: a FakeClock).
    Clock* clock = Clock::Real();
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
    // The budget when last looked at (UINT64_MAX before); at most capacity_bytes.
    std::atomic<uint64_t> allowed_bytes{UINT64_MAX};
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
  // Evicts the oldest copies until the tier is within its budget, and writes
  // DIR/usage (in the background).
  void Trim();
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
  struct TrimTask {};
  using Task = std::variant<Index, Copy, Removal, Discarded, TrimTask>;

  explicit ReadTier(Options options);
  void Run(Task& task);
  void OpenStore();
  void Store(const Copy& copy);
  // Evicts the oldest copy; false when there is none left.
  bool EvictOldest();
  // The budget now (ReadTierBudget), also kept in counters_.allowed_bytes.
  uint64_t Allowed();
  // Whether the node agent's --capacity bounds the tier (its node-usage
  // file says one), and so the agent counts it.
  bool SharesCapacity() const;
  // Evicts the oldest copies until at most `allowed` bytes are used.
  void TrimTo(uint64_t allowed);
  // Sets the reservation and writes DIR/usage.
  void Publish(uint64_t reserved);
  void UpdateUsage();

  Options options_;
  UniqueFd chunks_dir_;
  Counters counters_;
  ReadTierBudget budget_;
  const std::string usage_path_;  // DIR/usage
  // Writer thread only: the store (null until indexed, or if it could not be
  // opened) and the copies oldest first (some may be gone: removed datasets).
  std::unique_ptr<ChunkStore> store_;
  std::deque<ChunkKey> order_;
  // What DIR/usage last said the tier may hold (>= what it holds): a copy
  // that fits under it is written without looking at the budget again.
  uint64_t reserved_ = 0;
  // The reservation at the start of the current second: it grows by at most
  // one step a second (see the top).
  std::chrono::steady_clock::time_point window_start_;
  uint64_t window_base_ = 0;
  bool publish_failed_ = false;  // logged once until it works again

  // The writer. Copies cost their bytes, counted until written (the memory
  // they hold), up to max_pending_bytes; the tasks the destructor drops
  // count as dropped. Declared last: its thread uses the members above.
  std::unique_ptr<WorkQueue<Task>> writer_;
};

}  // namespace hoard::fuse
