// File: prefetch/chunk_filler.h
//
// ChunkFiller fills one chunk: from the peers that hold it when a ChunkSource
// is given (a node that just joined, or took over a drained or dead node's
// chunks, copies them from their old owners instead of the central storage),
// else from its dataset's origin. However many callers
// ask for the same chunk at once, the origin is read once (single flight) and
// every caller gets the same bytes. It checks that the origin file has the
// size and mtime the manifest recorded when it opens it and again after the
// last read of the chunk: a file that changed since the dataset was added (or
// while the chunk was being read) fails with kStale, so a reader never gets a
// mix of two versions.
//
// The origin is read through an OriginGate (when given): demand fills (a
// reader waits) take a slot and pace their bytes ahead of warm-up fills. A
// demand caller that joins a warm-up's flight for the same chunk promotes it
// to demand (OriginGate's `urgent` flag), so it never waits in the warm-up's
// queue. A slot is held only while the origin is read, never while waiting on
// another caller's flight, so flights and slots cannot wait on each other.
//
// When asked to cache, the filler also puts the chunk into the chunk store; a
// full store does not fail the read (the bytes are still returned) but is
// reported in FillResult::cache_status.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <unordered_map>
#include <string>

#include <spdlog/spdlog.h>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/result.h"
#include "common/single_flight.h"
#include "cluster/cluster_view.h"
#include "store/chunk_store.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_source.h"
#include "origin/origin_gate.h"
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
  // `gate` may be null (no limits).
  ChunkFiller(ChunkStore* store, OriginPool* origins, std::shared_ptr<spdlog::logger> logger,
              ChunkSource* peers = nullptr, OriginGate* gate = nullptr);

  Result<FillResult> Fill(const DatasetView& dataset, const ChunkRef& chunk, bool cache,
                          OriginGate::Priority priority = OriginGate::Priority::kDemand);

  // Bytes [offset, offset + length) of the chunk, read from the origin alone
  // (never from peers) and cached nowhere: what a random reader asked for
  // (GetChunk range_only). The same checks as a fill (size and mtime at the
  // open and after the read: kStale), a demand slot of the gate; no single
  // flight.
  Result<Bytes> ReadRange(const DatasetView& dataset, const ChunkRef& chunk, uint64_t offset, uint64_t length);

  uint64_t origin_bytes() const { return origin_bytes_.load(); }
  // Ranges read by ReadRange (their bytes are in origin_bytes).
  uint64_t range_reads() const { return range_reads_.load(); }
  uint64_t origin_reads() const { return origin_reads_.load(); }
  uint64_t peer_bytes() const { return peer_bytes_.load(); }
  // Seconds per origin read call (one ReadAt: a chunk, or a paced piece of one).
  const metrics::Histogram& origin_read_latency() const { return origin_read_latency_; }

 private:
  Result<FillResult> FetchAndStore(const DatasetView& dataset, const ChunkRef& chunk, bool cache,
                                   OriginGate::Priority priority);
  Result<Bytes> ReadOrigin(const DatasetView& dataset, const ChunkRef& chunk, OriginGate::Priority priority);
  // Reads [offset, offset + length) of the chunk from the origin into `out`,
  // paced by the gate (the caller holds its slot), checking that the file is
  // the manifest's version.
  Status ReadOriginRange(const DatasetView& dataset, const ChunkRef& chunk, uint64_t offset, uint64_t length,
                         char* out, OriginGate::Priority priority, std::atomic<bool>* urgent);

  ChunkStore* store_;
  OriginPool* origins_;
  std::shared_ptr<spdlog::logger> logger_;
  SingleFlight<ChunkKey, Result<FillResult>, ChunkKeyHash> flights_;
  std::atomic<uint64_t> origin_bytes_{0};
  std::atomic<uint64_t> origin_reads_{0};
  std::atomic<uint64_t> range_reads_{0};
  std::atomic<uint64_t> peer_bytes_{0};
  metrics::Histogram origin_read_latency_{metrics::Histogram::LatencyBuckets()};
  ChunkSource* peers_;
  OriginGate* gate_;

  // Demand callers per chunk, and the urgent flags of warm-up reads of the
  // origin in progress, to promote one that a reader joined.
  Mutex urgent_mu_;
  std::unordered_map<ChunkKey, int, ChunkKeyHash> demand_callers_ GUARDED_BY(urgent_mu_);
  std::unordered_map<ChunkKey, std::shared_ptr<std::atomic<bool>>, ChunkKeyHash> warm_reads_
      GUARDED_BY(urgent_mu_);
};

}  // namespace hoard
