// File: node/peer_source.h
//
// PeerSource finds a chunk on the peers that hold it, so a chunk whose owner
// changed (a node joined, or took over from a drained or dead node) moves node
// to node over ZeroMQ instead of being read again from the central storage.
//
// Candidates, in order: the chunk's other owners in the current map (replicas)
// and the member ranked right after them (the owner a joining node displaced),
// then its owners in the last map with a different placement this process saw
// (the nodes it is moving away from). Never this node, never a node the current map says is
// down. Each is asked with fill=false: a peer that does not hold the chunk
// says so at once instead of reading the origin for us. The asking is
// cluster/peer_chunk_client.h's, the mount's too: a peer that answers "busy"
// (its request queue is full) is asked again a few times, and one that
// cannot be reached is skipped for 5 s or until a newer map (a dead node
// costs one connect timeout, not one per chunk, until the coordinator marks
// it down).
//
// Barren peers: in a first warm-up nobody holds anything yet, and asking the
// next-ranked member about every chunk would cost one wasted round trip per
// chunk (for a tree of small files, per file). A peer that answers "not here"
// for kBarrenAfter chunks of a dataset in a row, with no hit between, is not
// asked about that dataset again for kBarrenFor, or until the placement
// changes (when chunks really move). A peer that holds a dataset's chunks
// (the old owner after a join) answers hits and is never skipped.
//
// Time (suspicions, barren peers, busy waits) is the injected Clock's.
//
// Thread-safety: OnView from the map watcher's thread, Fetch from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "cluster/peer_chunk_client.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "prefetch/chunk_source.h"
#include "proto/rpc_client.h"

namespace hoard {

class PeerSource : public ChunkSource {
 public:
  // `peers` (the node agent's pool of peer clients) and `clock` outlive the
  // source.
  PeerSource(proto::ClientPool* peers, std::string self, std::chrono::milliseconds timeout,
             std::shared_ptr<spdlog::logger> logger, const Clock* clock = Clock::Real());

  // Follows the cluster map; keeps the last one with another placement.
  void OnView(const std::shared_ptr<const ClusterView>& view);

  Result<Bytes> Fetch(const DatasetView& dataset, const ChunkRef& chunk) override;
  // Seconds per GetChunk asked of a peer (with its busy retries).
  const metrics::Histogram& latency() const { return client_.latency(); }

 private:
  static constexpr std::chrono::seconds kSuspectFor{5};
  static constexpr int kBarrenAfter = 32;
  static constexpr std::chrono::seconds kBarrenFor{10};
  struct Misses {
    int in_a_row = 0;
    std::chrono::steady_clock::time_point skip_until;
  };
  // True if `peer` is to be skipped for dataset `uid`; records an answer.
  bool Barren(const std::string& peer, uint64_t uid);
  void Answered(const std::string& peer, uint64_t uid, bool hit);
  const std::string self_;
  const Clock* clock_;
  PooledChunkTransport transport_;
  PeerChunkClient client_;
  Mutex mu_;
  std::shared_ptr<const ClusterView> current_ GUARDED_BY(mu_);
  std::shared_ptr<const ClusterView> previous_ GUARDED_BY(mu_);  // an older placement
  std::map<std::pair<std::string, uint64_t>, Misses> misses_ GUARDED_BY(mu_);  // by (peer, dataset uid)
};

}  // namespace hoard
