// File: fuse/chunk_set.h
//
// ChunkSet is a lossy, lock-free set of chunks, which the mount asks on every
// open and read of a local chunk: which chunk files it has already checked
// against their checksum (so a chunk is read twice, once to verify and once
// to serve, only the first time the mount uses it), and which it last found
// in its read tier (so that it looks there first).
//
// It is a fixed-size open-addressing table of 64-bit chunk fingerprints: a
// mutex here would be one lock per request. It is lossy by design: when the
// probe window of a fingerprint is full, a random slot in it is overwritten,
// and the chunk whose fingerprint was lost is simply verified again (or looked
// up in the other directory first) on its next open. Forgetting costs a
// re-read or a failed lookup, never a wrong answer; a false member needs a
// 64-bit fingerprint collision.
//
// Thread-safety: Contains and Insert from any thread, without locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/hash.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

class ChunkSet {
 public:
  // `capacity_log2` = 20 holds about a million chunks in 8 MiB.
  explicit ChunkSet(int capacity_log2 = 20)
      : mask_((uint64_t(1) << capacity_log2) - 1), slots_(new std::atomic<uint64_t>[mask_ + 1]) {
    for (uint64_t i = 0; i <= mask_; ++i) slots_[i].store(0, std::memory_order_relaxed);
  }

  static uint64_t Fingerprint(const ChunkKey& key) {
    const uint64_t f = Mix64(key.file.lo, Mix64(key.file.hi, key.index));
    return f == 0 ? 1 : f;  // 0 marks an empty slot
  }

  bool Contains(uint64_t fp) const {
    for (uint64_t i = 0; i < kProbe; ++i) {
      const uint64_t v = slots_[(fp + i) & mask_].load(std::memory_order_relaxed);
      if (v == fp) return true;
      if (v == 0) return false;
    }
    return false;
  }

  void Insert(uint64_t fp) {
    for (uint64_t i = 0; i < kProbe; ++i) {
      std::atomic<uint64_t>& slot = slots_[(fp + i) & mask_];
      uint64_t v = slot.load(std::memory_order_relaxed);
      if (v == fp) return;
      if (v == 0 && slot.compare_exchange_strong(v, fp, std::memory_order_relaxed)) return;
      if (v == fp) return;
    }
    // Window full: evict one (chosen by the fingerprint's high bits, which
    // spread like random) so the table keeps tracking recent chunks.
    slots_[(fp + (fp >> 58) % kProbe) & mask_].store(fp, std::memory_order_relaxed);
  }

 private:
  static constexpr uint64_t kProbe = 16;
  const uint64_t mask_;
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;
};

}  // namespace hoard::fuse
