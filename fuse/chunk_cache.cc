#include "fuse/chunk_cache.h"

#include <iterator>
#include <utility>

namespace hoard::fuse {

ChunkCache::ChunkCache(Options options, ReadCounters* counters) : options_(options), counters_(counters) {}

ChunkCache::Bytes ChunkCache::Use(const ChunkKey& key) {
  MutexLock lock(&mu_);
  auto hit = index_.find(key);
  if (hit == index_.end()) return nullptr;
  Cached& c = *hit->second;
  CacheList& from = c.ahead ? ahead_ : lru_;
  if (c.ahead) {
    // The first read of a chunk read ahead: from now on an ordinary entry.
    c.ahead = false;
    ahead_bytes_ -= c.bytes->size();
    lru_bytes_ += c.bytes->size();
    counters_->readahead_used.fetch_add(1, std::memory_order_relaxed);
  }
  lru_.splice(lru_.begin(), from, hit->second);
  return c.bytes;
}

ChunkCache::Bytes ChunkCache::Peek(const ChunkKey& key) {
  MutexLock lock(&mu_);
  auto hit = index_.find(key);
  return hit == index_.end() ? nullptr : hit->second->bytes;
}

void ChunkCache::Remember(const ChunkKey& key, Bytes bytes, bool ahead) {
  MutexLock lock(&mu_);
  if (index_.count(key) || bytes->size() > options_.capacity_bytes) return;
  const auto now = options_.clock->Now();
  const size_t size = bytes->size();
  if (ahead) {
    ahead_bytes_ += size;
    ahead_.push_back(Cached{key, std::move(bytes), true, now});
    index_[key] = std::prev(ahead_.end());
  } else {
    lru_bytes_ += size;
    lru_.push_front(Cached{key, std::move(bytes), false, now});
    index_[key] = lru_.begin();
  }
  ExpireAheadLocked(now);
  EvictLocked();
}

void ChunkCache::EvictLocked() {
  // Ordinary entries go first; chunks read ahead only when nothing else is
  // left (they are at most ahead_max_bytes, half the cache at most).
  while (lru_bytes_ + ahead_bytes_ > options_.capacity_bytes) {
    if (!lru_.empty()) {
      lru_bytes_ -= lru_.back().bytes->size();
      index_.erase(lru_.back().key);
      lru_.pop_back();
    } else if (!ahead_.empty()) {
      ahead_bytes_ -= ahead_.front().bytes->size();
      index_.erase(ahead_.front().key);
      ahead_.pop_front();
      counters_->readahead_unused.fetch_add(1, std::memory_order_relaxed);
    } else {
      break;
    }
  }
}

void ChunkCache::AgeLocked(CacheList::iterator it) {
  it->ahead = false;
  ahead_bytes_ -= it->bytes->size();
  lru_bytes_ += it->bytes->size();
  counters_->readahead_unused.fetch_add(1, std::memory_order_relaxed);
  lru_.splice(lru_.end(), ahead_, it);  // the next to be evicted
}

void ChunkCache::ExpireAheadLocked(std::chrono::steady_clock::time_point now) {
  while (!ahead_.empty() && now - ahead_.front().fetched > options_.ahead_ttl) AgeLocked(ahead_.begin());
}

ChunkCache::Reservation ChunkCache::ReserveAhead(const ChunkKey& key, uint64_t len) {
  MutexLock lock(&mu_);
  if (index_.count(key) || ahead_pending_.count(key)) return Reservation::kSkip;
  if (ahead_bytes_ + ahead_pending_bytes_ + len > options_.ahead_max_bytes) {
    ExpireAheadLocked(options_.clock->Now());
    if (ahead_bytes_ + ahead_pending_bytes_ + len > options_.ahead_max_bytes) return Reservation::kFull;
  }
  ahead_pending_.insert(key);
  ahead_pending_bytes_ += len;
  return Reservation::kReserved;
}

void ChunkCache::ReleaseAhead(const ChunkKey& key, uint64_t len) {
  MutexLock lock(&mu_);
  ahead_pending_.erase(key);
  ahead_pending_bytes_ -= len;
}

void ChunkCache::AgeAhead(const FileKey& file) {
  MutexLock lock(&mu_);
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    auto next = std::next(it);
    if (it->key.file == file) AgeLocked(it);
    it = next;
  }
}

size_t ChunkCache::ahead_pending() const {
  MutexLock lock(&mu_);
  return ahead_pending_.size();
}

}  // namespace hoard::fuse
