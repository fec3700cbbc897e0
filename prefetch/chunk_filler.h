// File: prefetch/chunk_filler.h
//
// ChunkFiller fills one chunk: from the peers that hold it when a ChunkSource
// is given (a node that just joined, or took over a drained or dead node's
// chunks, copies them from their old owners instead of the central storage),
// else from its dataset's origin. However many callers
// ask for the same chunk at once, the origin is read once (single flight) and
// every caller gets the same bytes. Before trusting the bytes it checks that
// the origin file still has the size and mtime the manifest recorded: a file
// that changed since the dataset was added fails with kStale, so a reader
// never gets a mix of two versions.
//
// When asked to cache, the filler also puts the chunk into the chunk store; a
// full store does not fail the read (the bytes are still returned) but is
// reported in FillResult::cache_status.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/result.h"
#include "common/single_flight.h"
#include "coordinator/cluster_view.h"
#include "node/chunk_store.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_source.h"
#include "striping/assignment.h"

namespace hoard {

class ChunkFiller {
 public:
  using Bytes = std::shared_ptr<const std::string>;
  struct FillResult {
    Bytes bytes;          // the whole chunk
    Status cache_status;  // OK, or why it was not cached (kNoSpace...)
  };

  // `store` may be null (a mount reading through without a store); `peers`
  // may be null (origin only).
  ChunkFiller(ChunkStore* store, OriginPool* origins, std::shared_ptr<spdlog::logger> logger,
              ChunkSource* peers = nullptr);

  Result<FillResult> Fill(const DatasetView& dataset, const ChunkRef& chunk, bool cache);

  uint64_t origin_bytes() const { return origin_bytes_.load(); }
  uint64_t origin_reads() const { return origin_reads_.load(); }
  uint64_t peer_bytes() const { return peer_bytes_.load(); }

 private:
  Result<FillResult> FetchAndStore(const DatasetView& dataset, const ChunkRef& chunk, bool cache);
  Result<Bytes> ReadOrigin(const DatasetView& dataset, const ChunkRef& chunk);

  ChunkStore* store_;
  OriginPool* origins_;
  std::shared_ptr<spdlog::logger> logger_;
  SingleFlight<ChunkKey, Result<FillResult>, ChunkKeyHash> flights_;
  std::atomic<uint64_t> origin_bytes_{0};
  std::atomic<uint64_t> origin_reads_{0};
  std::atomic<uint64_t> peer_bytes_{0};
  ChunkSource* peers_;
};

}  // namespace hoard
