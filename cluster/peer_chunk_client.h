// File: cluster/peer_chunk_client.h
//
// PeerChunkClient asks peers (node agents) for one whole chunk with GetChunk.
// It is the one peer client of the read path: the mount (fuse/remote_chunks.h,
// which hedges its requests through common/hedger.h) and the node agent's
// warm-up (node/peer_source.h, which asks its candidates one after another)
// both fetch through it, so both follow one busy-retry policy and one
// suspicion rule.
//
// Busy-retry. A peer whose request queue is full answers "busy" at once (an
// error reply with id 0 and kUnavailable: proto/rpc_client.h). It is alive
// and most likely holds the chunk, so it is asked again, up to
// `busy_retries` times, `busy_backoff` doubling in between (10, 20, 40, 80,
// 160 ms): waiting a moment costs far less than reading the origin instead
// (which, under load, is what refilled a dead node's replicas from NFS rather
// than from the surviving copy). A peer that answered kUnavailable itself
// (its own read of the origin failed) is not asked again: that would read the
// origin again. The waits go through the injected Clock.
//
// Suspicion: PeerHealth's rules (common/peer_health.h), kept in health():
// a peer that did not answer at all is skipped for `health.suspect_for`, and
// a caller that hedges (the mount) adds the rules on overdue requests to the
// same state by giving health() to its Hedger. The node agent used to have a
// rule of its own (5 s per endpoint on the real clock, whatever the map
// said); PeerHealth's is the better one and is now the only one: it ends a
// suspicion at once when a newer cluster map still lists the peer up (a node
// that restarted and registered again is asked again, not bypassed for the
// rest of the 5 s), it runs on the injected Clock (tests step it), and it
// also catches a peer that is stopped but keeps its connections (SIGSTOP),
// which a connection-based rule never sees.
//
// Errors (FetchFrom, and the per-peer failures of Fetch):
//   kUnavailable  the peer did not answer at all (unreachable, timed out, the
//                 connection dropped): the only error that makes it suspect,
//                 and the one common/hedger.h takes for "no answer";
//   kIoError      it answered kUnavailable itself, or busy past its retries;
//   kCorruption   it sent a reply whose length is not the chunk's;
//   anything else as the peer answered (kNotFound: it does not hold the
//                 chunk and was asked not to fill it).
//
// The wire is behind ChunkTransport: PooledChunkTransport sends over a
// proto::ClientPool; tests give an in-memory twin.
//
// Thread-safety: every method may be called from any thread at once; the
// transport must allow that too. Invariant: health() is told of every request
// Fetch sends (Asked, then Finished); FetchFrom tells it nothing (its caller
// does, as the Hedger does).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/peer_health.h"
#include "common/result.h"
#include "proto/messages.h"
#include "proto/rpc_client.h"
#include "striping/chunk_key.h"

namespace hoard {

// One GetChunk exchange with one peer: the wire under PeerChunkClient.
class ChunkTransport {
 public:
  struct Exchange {
    Result<proto::ChunkData> reply = Status::Unavailable("not sent");
    zmq::message_t payload;  // the chunk's bytes, when `reply` is OK
    bool answered = false;   // the peer replied, possibly with an error
    bool busy = false;       // the reply was "busy": its request queue was full
  };
  virtual ~ChunkTransport() = default;
  virtual Exchange GetChunk(const std::string& endpoint, const proto::GetChunk& req,
                            std::chrono::milliseconds timeout) = 0;
};

// ChunkTransport over a pool of RpcClients (`pool` outlives it).
class PooledChunkTransport : public ChunkTransport {
 public:
  explicit PooledChunkTransport(proto::ClientPool* pool) : pool_(pool) {}
  Exchange GetChunk(const std::string& endpoint, const proto::GetChunk& req,
                    std::chrono::milliseconds timeout) override;

 private:
  proto::ClientPool* pool_;
};

class PeerChunkClient {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  struct Options {
    // How long one GetChunk may take: a peer may be reading the chunk
    // through from the origin.
    std::chrono::milliseconds timeout{10000};
    // Asks of a peer that answered busy, and the first wait (doubling).
    int busy_retries = 5;
    std::chrono::milliseconds busy_backoff{10};
    PeerHealth::Options health;
    // How long without an answer makes a peer stalled (PeerHealth::Check's
    // `quiet`), for Fetch; a Hedger uses its longest hedge delay.
    std::chrono::milliseconds stalled_after{1000};
    const Clock* clock = Clock::Real();  // outlives the client
    std::shared_ptr<spdlog::logger> logger;
    // Called (on a fetching thread; keep it cheap) when a reply carries a
    // placement epoch newer than the request's. May be empty.
    std::function<void()> on_newer_placement;
  };

  // A peer to ask.
  struct Peer {
    std::string name;        // for logs
    std::string endpoint;    // where it listens; PeerHealth's key
    uint64_t map_epoch = 0;  // of the map it was picked from
  };

  struct Outcome {
    Result<Bytes> value = Status::NotFound("no peer to ask");
    int winner = -1;  // index of the peer whose answer won
    // Per peer: its failure; OK for the winner and for peers skipped (suspect)
    // or not asked.
    std::vector<Status> failures;
  };

  // `transport` outlives the client.
  PeerChunkClient(Options options, ChunkTransport* transport);

  // The GetChunk of chunk `key` (entry `entry`) of dataset version `meta`,
  // named `dataset`. `fill`: a peer that misses reads it through (an owner);
  // else it answers kNotFound at once.
  static proto::GetChunk Request(const std::string& dataset, const proto::DatasetMeta& meta, uint32_t entry,
                                 const ChunkKey& key, bool fill, uint64_t placement_epoch);

  // Asks `peer` alone, with busy retries (above), for the `chunk_len`-byte
  // chunk `req` names: its bytes [req.offset, req.offset + req.length) (to
  // the chunk's end for length 0), the whole chunk for a Request() as made.
  // Tells health() nothing.
  Result<Bytes> FetchFrom(const Peer& peer, const proto::GetChunk& req, uint64_t chunk_len);

  // Asks `peers` in order until one sends the chunk. A suspect peer is
  // skipped; one suspect only for slowness (PeerHealth::Standing::kSlow) is
  // skipped only when a later peer is in good standing. With no peer asked,
  // or none that sent it, the value is the last failure (kNotFound if none).
  Outcome Fetch(const std::vector<Peer>& peers, const proto::GetChunk& req, uint64_t chunk_len);

  // The suspicion state (give it to a Hedger that asks these peers too).
  PeerHealth& health() { return health_; }
  // Seconds per GetChunk asked of a peer (with its busy retries).
  const metrics::Histogram& latency() const { return latency_; }

 private:
  const Options options_;
  ChunkTransport* transport_;
  PeerHealth health_;
  metrics::Histogram latency_{metrics::Histogram::LatencyBuckets()};
};

}  // namespace hoard
