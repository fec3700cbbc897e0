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
// says so at once instead of reading the origin for us. A peer that cannot be
// reached is skipped for 5 s (a dead node costs one connect timeout, not one
// per chunk, until the coordinator marks it down).
//
// Thread-safety: OnView from the map watcher's thread, Fetch from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "prefetch/chunk_source.h"
#include "proto/rpc_client.h"

namespace hoard {

class PeerSource : public ChunkSource {
 public:
  PeerSource(zmq::context_t& context, std::string self, std::chrono::milliseconds timeout,
             std::shared_ptr<spdlog::logger> logger);

  // Follows the cluster map; keeps the last one with another placement.
  void OnView(const std::shared_ptr<const ClusterView>& view);

  Result<Bytes> Fetch(const DatasetView& dataset, const ChunkRef& chunk) override;

 private:
  static constexpr std::chrono::seconds kSuspectFor{5};
  const std::string self_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<spdlog::logger> logger_;
  proto::ClientPool peers_;
  std::mutex mu_;
  std::shared_ptr<const ClusterView> current_;   // guarded by mu_
  std::shared_ptr<const ClusterView> previous_;  // guarded by mu_; an older placement
  std::map<std::string, std::chrono::steady_clock::time_point> suspect_until_;  // guarded by mu_
};

}  // namespace hoard
