// File: fuse/read_counters.h
//
// ReadCounters: what the mount's read path counts, by source and by stage
// (ChunkReader::Counters; shown by fuse/mount_metrics.cc). Each unit of the
// read path (fuse/local_chunks.h, fuse/chunk_cache.h, fuse/remote_chunks.h,
// fuse/readahead.h) adds to the one instance its ChunkReader owns.
//
// Thread-safety: relaxed atomics, added to from any thread. Invariant: every
// counter only grows.
#pragma once

#include <atomic>
#include <cstdint>

namespace hoard::fuse {

struct ReadCounters {
  std::atomic<uint64_t> local_bytes{0};
  std::atomic<uint64_t> peer_bytes{0};
  std::atomic<uint64_t> origin_bytes{0};
  std::atomic<uint64_t> peer_failures{0};
  std::atomic<uint64_t> corrupt_local_chunks{0};
  std::atomic<uint64_t> rechecked_ranges{0};  // checked again: not wholly in the page cache
  std::atomic<uint64_t> remote_fetches{0};    // chunks fetched from a peer or the origin
  std::atomic<uint64_t> range_fetches{0};     // of which ranges of a chunk, for random reads
  std::atomic<uint64_t> readahead_chunks{0};  // read-ahead transfers started
  std::atomic<uint64_t> readahead_bytes{0};   // and their bytes, when they succeeded
  std::atomic<uint64_t> readahead_used{0};    // chunks read ahead that a demand read then used
  std::atomic<uint64_t> readahead_unused{0};  // dropped or expired before any read used them
  std::atomic<uint64_t> readahead_failures{0};
};

}  // namespace hoard::fuse
