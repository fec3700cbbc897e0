// File: fuse/mount_stats.h
//
// MountStats counts what the kernel asked of the mount: requests by kind, bytes
// served, and a histogram of read request sizes (the first thing to look at
// when reads are slow: 4 KiB requests mean readahead or max_pages are off).
// The mount writes them as JSON to CACHE_DIR/stats.json every poll interval,
// where `hoard` and the benchmarks read them.
//
// Thread-safety: counters are relaxed atomics, bumped from any FUSE thread;
// ToJson reads a consistent-enough snapshot (each counter is exact, the set is
// not taken at one instant).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace hoard::fuse {

struct MountStats {
  // Read sizes by power of two: bucket b counts requests of up to 4 KiB << b
  // bytes; the last bucket also takes everything larger.
  static constexpr size_t kSizeBuckets = 10;  // 4 KiB .. 2 MiB

  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> getattrs{0};
  std::atomic<uint64_t> readdirs{0};
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> read_errors{0};
  std::array<std::atomic<uint64_t>, kSizeBuckets> read_sizes{};

  void CountRead(uint64_t size) {
    reads.fetch_add(1, std::memory_order_relaxed);
    read_bytes.fetch_add(size, std::memory_order_relaxed);
    size_t b = 0;
    while (b + 1 < kSizeBuckets && size > (uint64_t(4096) << b)) ++b;
    read_sizes[b].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace hoard::fuse
