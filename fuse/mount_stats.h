// File: fuse/mount_stats.h
//
// MountStats counts what the kernel asked of the mount: requests by kind, bytes
// served, and a histogram of read request sizes (the first thing to look at
// when reads are slow: 4 KiB requests mean readahead or max_pages are off).
// The mount writes them as JSON to CACHE_DIR/stats.json every poll interval,
// where `hoard` and the benchmarks read them.
//
// It also keeps a latency histogram per FUSE operation (OpLatency), which
// the mount shows on /metrics.
//
// Thread-safety: counters are relaxed atomics, bumped from any FUSE thread;
// ToJson reads a consistent-enough snapshot (each counter is exact, the set is
// not taken at one instant).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace hoard::fuse {

// Seconds per FUSE operation, one histogram per operation name. The set is
// fixed at construction, so Find is a scan of constant strings, no lock.
class OpLatency {
 public:
  // The operations HoardFs::Ops() times (the names it logs failures under).
  static constexpr const char* kOps[] = {
      "lookup",  "getattr", "readlink", "statfs", "opendir", "readdir", "readdirplus", "releasedir",
      "open",    "read",    "release",  "create", "write",   "flush",   "fsync",       "setattr",
      "mkdir",   "rmdir",   "unlink",   "rename", "getxattr", "listxattr"};

  OpLatency() {
    for (size_t i = 0; i < std::size(kOps); ++i) {
      histograms_.push_back(std::make_unique<metrics::Histogram>(metrics::Histogram::LatencyBuckets()));
    }
  }
  // The histogram of `op`; null for a name not in kOps.
  metrics::Histogram* Find(const char* op) const {
    for (size_t i = 0; i < std::size(kOps); ++i) {
      if (std::strcmp(kOps[i], op) == 0) return histograms_[i].get();
    }
    return nullptr;
  }

 private:
  std::vector<std::unique_ptr<metrics::Histogram>> histograms_;  // as kOps
};

struct MountStats {
  // Read sizes by power of two: bucket b counts requests of up to 4 KiB << b
  // bytes; the last bucket also takes everything larger.
  static constexpr size_t kSizeBuckets = 10;  // 4 KiB .. 2 MiB

  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> getattrs{0};
  std::atomic<uint64_t> readdirs{0};
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> passthrough_opens{0};  // opens the kernel then reads without us
  // Their files' sizes: the bytes the kernel reads from this node's disk for
  // them, if each is read whole (we never see the reads).
  std::atomic<uint64_t> passthrough_bytes{0};
  std::atomic<uint64_t> flushes{0};  // close(2) of a file the kernel told us about
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> read_errors{0};
  std::array<std::atomic<uint64_t>, kSizeBuckets> read_sizes{};
  OpLatency op_latency;

  void CountRead(uint64_t size) {
    reads.fetch_add(1, std::memory_order_relaxed);
    read_bytes.fetch_add(size, std::memory_order_relaxed);
    size_t b = 0;
    while (b + 1 < kSizeBuckets && size > (uint64_t(4096) << b)) ++b;
    read_sizes[b].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace hoard::fuse
