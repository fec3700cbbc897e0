// File: fuse/remote_chunks.h
//
// RemoteChunks fetches a whole chunk over the network for the mount: steps 2
// and 3 of fuse/chunk_reader.h.
//   - Demand (Fetch): the chunk's up owners in placement rank order, with
//     GetChunk fill=true (an owner that misses reads through from the origin
//     and caches), then the origin itself, read by this mount (a file that
//     changed at the origin fails there too, kStale, so nothing mixes
//     versions). A retired dataset (a file opened before its removal) goes
//     straight to the origin.
//   - A random read's range (FetchRange): the same sources in the same
//     order, each asked for just the range (GetChunk range_only: an owner
//     that misses reads only the range from the origin, storing nothing).
//   - Read-ahead (FetchAhead): first every up owner that already holds the
//     chunk (fill=false: after a membership change the first owner may be a
//     new one that does not hold it yet, while a surviving replica can send
//     it at once), then the first owner that said "not here", to fill it;
//     never the origin, and it gives up as soon as every owner it asked is
//     overdue (they are then skipped, and the demand read that follows goes
//     on at once).
// Both are hedged (common/hedger.h): a source that has not answered within
// its hedge delay is left in flight and the next is asked too (the origin
// only past an owner that has stopped answering altogether); the first
// answer of the right length wins. Each request to a peer goes through the
// PeerChunkClient (cluster/peer_chunk_client.h: busy retries, one suspicion
// rule), whose PeerHealth the Hedger shares, so a peer that could not be
// reached or keeps leaving requests overdue is skipped for `suspect_for` or
// until the map changes. Requests carry the view's placement epoch; a reply
// from a node with a newer one calls on_newer_placement.
//
// Invariant: every request the Hedger runs holds the view it was picked from
// and refers only to members of this object and to the MountedDataset,
// which outlives it; the Hedger (the last member) waits for them.
//
// Thread-safety: Fetch and FetchAhead from any thread, concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "cluster/cluster_view.h"
#include "cluster/peer_chunk_client.h"
#include "common/clock.h"
#include "common/hedger.h"
#include "common/latency_window.h"
#include "common/metrics.h"
#include "fuse/namespace.h"
#include "fuse/read_counters.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_filler.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

// A part of a chunk; length 0 = the whole chunk.
struct ChunkRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

class RemoteChunks {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  struct Options {
    std::chrono::milliseconds peer_timeout{10000};  // a peer may be reading through
    std::chrono::milliseconds peer_connect_timeout{500};
    // How long a peer that could not be reached, or was slow `slow_after`
    // times in a row, is skipped (common/peer_health.h).
    std::chrono::milliseconds suspect_for{5000};
    int slow_after = 3;
    LatencyWindow::Options hedge;  // when a request is hedged
    std::shared_ptr<spdlog::logger> logger;
    const Clock* clock = Clock::Real();  // busy waits, suspicions, hedge samples
    zmq::context_t* context = nullptr;
    OriginOptions origin;
    OriginPool::Opener open_origin;
    std::function<void()> on_newer_placement;
  };

  // `counters` outlives this object (peer_bytes, origin_bytes,
  // remote_fetches, peer_failures).
  RemoteChunks(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view,
               ReadCounters* counters);

  // The whole chunk from its owners or the origin (demand).
  Result<Bytes> Fetch(const MountedDataset& ds, uint32_t entry, uint32_t index);
  // Bytes [offset, offset + length) of the chunk (a random read), from the
  // same sources as Fetch: each owner asked with GetChunk range_only (one
  // that misses reads only the range from the origin and stores nothing),
  // then the origin.
  Result<Bytes> FetchRange(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
                           uint64_t length);
  // The whole chunk from its owners only (read-ahead); kUnavailable once
  // they are all overdue.
  Result<Bytes> FetchAhead(const MountedDataset& ds, uint32_t entry, uint32_t index);

  const metrics::Histogram& peer_latency() const { return client_.latency(); }
  const Hedger& hedger() const { return hedger_; }
  const metrics::Histogram& origin_read_latency() const { return origin_reader_.origin_read_latency(); }

 private:
  // The chunk's owners under `view` (none for a retired dataset).
  std::vector<uint32_t> Owners(const MountedDataset& ds, const ClusterView& view, const ChunkKey& key) const;
  // A GetChunk of node `node` of `view` as a source for the Hedger. `demand`:
  // a reader waits for it (its failures are counted and logged; read-ahead's
  // are expected, and silent). The request may outlive the caller's wait: it
  // holds `view`, and `ds` outlives this object.
  Hedger::Source<Bytes> PeerRequest(const MountedDataset& ds, std::shared_ptr<const ClusterView> view,
                                    uint32_t node, uint32_t entry, uint32_t index, uint64_t chunk_len, bool fill,
                                    bool demand, ChunkRange range = ChunkRange{0, 0});
  // Counts an answer the Hedger returned: from a peer, or (`origin`) the origin.
  void CountFetched(uint64_t chunk_len, bool origin);

  const Options options_;
  const std::function<std::shared_ptr<const ClusterView>()> current_view_;
  ReadCounters* counters_;
  proto::ClientPool peers_;
  PooledChunkTransport transport_;
  PeerChunkClient client_;
  OriginPool origins_;
  ChunkFiller origin_reader_;  // no store: reads through without caching
  // Last: destroyed first, it waits for the requests still in flight, which
  // use the members above.
  Hedger hedger_;
};

}  // namespace hoard::fuse
