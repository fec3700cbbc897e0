// File: node/chunk_service.h
//
// ChunkService answers GetChunk requests from mounts and peers: from the
// chunk store when the chunk is cached, else (when the request allows it) by
// reading it through from the origin, caching it if this node owns it.
//
// A request names the chunk three ways that must agree: dataset uid+version,
// the file's entry index in that manifest, and the chunk's FileKey. A request
// for a dataset version this node does not know yet triggers one cluster map
// refresh (the dataset may have just been added); a key that does not match
// the manifest is kStale (the requester acts on another version).
//
// Placement epochs: a request carries the requester's placement epoch and the
// reply this node's. A requester that is ahead means this node's map is
// stale: it refreshes it (the same rate-limited refresh) before deciding
// whether it owns a chunk it reads through, so a new owner caches what it now
// owns. A requester that is behind is still served: the bytes of a chunk do
// not depend on the placement (its key is checked), and the reply's epoch
// tells it to catch up.
//
// Thread-safety: GetChunk may be called from any number of threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "cluster/cluster_view.h"
#include "store/chunk_store.h"
#include "prefetch/chunk_filler.h"
#include "proto/messages.h"

namespace hoard {

class ChunkService {
 public:
  struct Counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> cache_hits{0};
    std::atomic<uint64_t> cache_bytes{0};   // served from the store
    std::atomic<uint64_t> origin_bytes{0};  // served after reading through
    std::atomic<uint64_t> range_reads{0};   // misses answered with a range read from the origin (range_only)
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> in_flight{0};     // requests being served now
  };

  ChunkService(ChunkStore* store, ChunkFiller* filler,
               std::function<std::shared_ptr<const ClusterView>()> current_view,
               std::function<Status()> refresh_view, std::shared_ptr<spdlog::logger> logger);

  Result<proto::ChunkData> GetChunk(const proto::GetChunk& req, std::string* payload);

  const Counters& counters() const { return counters_; }

 private:
  ChunkStore* store_;
  ChunkFiller* filler_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  std::function<Status()> refresh_view_;
  std::shared_ptr<spdlog::logger> logger_;
  Counters counters_;
};

}  // namespace hoard
