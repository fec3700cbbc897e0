// File: fuse/chunk_cache.h
//
// ChunkCache: the mount's in-memory cache of chunks fetched over the network
// (the kernel asks for a chunk in many reads, 128 KiB to 1 MiB each), and
// the byte budget of read-ahead (fuse/readahead.h).
//
// Two lists under one index: the LRU (newest first), and the chunks read
// ahead that no read has used yet (oldest first). A chunk read ahead joins
// the LRU when a demand read uses it, or as the LRU's oldest entry when
// `ahead_ttl` passes or its file stops being read in order, so a burst of
// other reads never evicts what was just read ahead for a reader that has
// yet to get there. Eviction takes LRU entries first, chunks read ahead only
// when nothing else is left.
//
// Read-ahead reservations: before a read-ahead transfer is queued it reserves
// its chunk and bytes (ReserveAhead), released when it ends or is dropped
// (ReleaseAhead). Chunks read ahead plus reserved bytes stay within
// `ahead_max_bytes`.
//
// Invariants: lru_bytes_ and ahead_bytes_ are the sizes of the chunks on each
// list; lru_bytes_ + ahead_bytes_ <= capacity_bytes after every Remember
// (unless one list is empty of what could go); a key is on at most one list;
// ahead_pending_bytes_ is the sum of the reserved lengths.
//
// Thread-safety: every method may be called from any thread; one mutex,
// never held while calling out.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "fuse/read_counters.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

class ChunkCache {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  struct Options {
    size_t capacity_bytes = 256u << 20;
    // Chunks read ahead and not yet used, plus read-ahead reserved: at most.
    size_t ahead_max_bytes = 128u << 20;
    // How long a chunk read ahead waits for its reader before it becomes an
    // ordinary (oldest) LRU entry.
    std::chrono::milliseconds ahead_ttl{10000};
    const Clock* clock = Clock::Real();  // outlives the cache
  };

  // `counters` outlives the cache (readahead_used, readahead_unused).
  ChunkCache(Options options, ReadCounters* counters);

  // The cached chunk, or null. A chunk read ahead becomes an LRU entry (its
  // first use), else the entry becomes the newest.
  Bytes Use(const ChunkKey& key) EXCLUDES(mu_);
  // The cached chunk, or null, leaving it where it is.
  Bytes Peek(const ChunkKey& key) EXCLUDES(mu_);
  // Caches a fetched chunk: at the LRU's head, or (`ahead`) at the end of
  // the read-ahead list. A chunk cached already, or larger than the cache,
  // is not.
  void Remember(const ChunkKey& key, Bytes bytes, bool ahead) EXCLUDES(mu_);

  enum class Reservation {
    kReserved,  // queue the read-ahead
    kSkip,      // cached or reserved already: nothing to do
    kFull,      // over the read-ahead budget: stop queueing
  };
  Reservation ReserveAhead(const ChunkKey& key, uint64_t len) EXCLUDES(mu_);
  void ReleaseAhead(const ChunkKey& key, uint64_t len) EXCLUDES(mu_);
  // The file stopped being read in order: its chunks read ahead age like any
  // other (they join the LRU's tail).
  void AgeAhead(const FileKey& file) EXCLUDES(mu_);
  // Read-ahead reserved (queued or being fetched).
  size_t ahead_pending() const EXCLUDES(mu_);

 private:
  struct Cached {
    ChunkKey key;
    Bytes bytes;
    bool ahead = false;
    std::chrono::steady_clock::time_point fetched;
  };
  using CacheList = std::list<Cached>;

  // Moves read-ahead chunks older than the TTL into the LRU's tail.
  void ExpireAheadLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  void EvictLocked() REQUIRES(mu_);
  // Moves entry `it` of ahead_ to the LRU's tail (the next to be evicted).
  void AgeLocked(CacheList::iterator it) REQUIRES(mu_);

  const Options options_;
  ReadCounters* counters_;
  mutable Mutex mu_;
  CacheList lru_ GUARDED_BY(mu_);    // front = newest
  CacheList ahead_ GUARDED_BY(mu_);  // front = oldest
  // Both lists' entries by key.
  std::unordered_map<ChunkKey, CacheList::iterator, ChunkKeyHash> index_ GUARDED_BY(mu_);
  size_t lru_bytes_ GUARDED_BY(mu_) = 0;
  size_t ahead_bytes_ GUARDED_BY(mu_) = 0;
  // Read-ahead queued or being fetched, and their bytes.
  std::unordered_set<ChunkKey, ChunkKeyHash> ahead_pending_ GUARDED_BY(mu_);
  size_t ahead_pending_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace hoard::fuse
