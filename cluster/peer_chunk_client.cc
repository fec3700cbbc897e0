#include "cluster/peer_chunk_client.h"

#include <algorithm>

#include <utility>

namespace hoard {

ChunkTransport::Exchange PooledChunkTransport::GetChunk(const std::string& endpoint, const proto::GetChunk& req,
                                                        std::chrono::milliseconds timeout) {
  Exchange x;
  auto lease = pool_->Acquire(endpoint);
  x.reply = lease->Call(req, timeout, &x.payload);
  x.answered = lease->last_call_answered();
  x.busy = lease->last_call_busy();
  return x;
}

PeerChunkClient::PeerChunkClient(Options options, ChunkTransport* transport)
    : options_(std::move(options)), transport_(transport), health_(options_.health, options_.clock) {}

proto::GetChunk PeerChunkClient::Request(const std::string& dataset, const proto::DatasetMeta& meta, uint32_t entry,
                                         const ChunkKey& key, bool fill, uint64_t placement_epoch) {
  return proto::GetChunk{.dataset = dataset,
                         .uid = meta.uid,
                         .version = meta.version,
                         .entry = entry,
                         .index = key.index,
                         .key_lo = key.file.lo,
                         .key_hi = key.file.hi,
                         .offset = 0,
                         .length = 0,
                         .fill = fill,
                         .placement_epoch = placement_epoch};
}

Result<PeerChunkClient::Bytes> PeerChunkClient::FetchFrom(const Peer& peer, const proto::GetChunk& req,
                                                          uint64_t chunk_len) {
  ChunkTransport::Exchange x;
  {
    metrics::ScopedTimer timer(&latency_);  // the request with its busy retries
    x = transport_->GetChunk(peer.endpoint, req, options_.timeout);
    auto wait = options_.busy_backoff;
    for (int retry = 0; retry < options_.busy_retries && !x.reply.ok() && x.busy; ++retry, wait *= 2) {
      options_.clock->SleepFor(wait);
      x = transport_->GetChunk(peer.endpoint, req, options_.timeout);
    }
  }
  if (!x.reply.ok()) {
    // Only a peer that did not answer at all is kUnavailable (suspect): one
    // that answered it, or stayed busy, is there.
    if (!x.answered) return Status::Unavailable(x.reply.status().message());
    return x.reply.status().code() == Code::kUnavailable ? Status::IoError(x.reply.status().message())
                                                         : x.reply.status();
  }
  if (x.reply->placement_epoch > req.placement_epoch && options_.on_newer_placement) options_.on_newer_placement();
  const uint64_t want = req.offset >= chunk_len ? 0
                        : req.length == 0        ? chunk_len - req.offset
                                                 : std::min(req.length, chunk_len - req.offset);
  if (x.reply->chunk_length != chunk_len || x.reply->offset != req.offset || x.payload.size() != want) {
    return Status::Corruption("peer " + peer.name + " sent " + std::to_string(x.payload.size()) + " bytes at " +
                              std::to_string(x.reply->offset) + " of a " + std::to_string(chunk_len) +
                              "-byte chunk (asked for " + std::to_string(want) + " at " +
                              std::to_string(req.offset) + ")");
  }
  return Bytes(std::make_shared<const std::string>(static_cast<const char*>(x.payload.data()), x.payload.size()));
}

PeerChunkClient::Outcome PeerChunkClient::Fetch(const std::vector<Peer>& peers, const proto::GetChunk& req,
                                                uint64_t chunk_len) {
  Outcome out;
  out.failures.assign(peers.size(), Status::Ok());
  auto standing = [&](size_t i) { return health_.Check(peers[i].endpoint, peers[i].map_epoch, options_.stalled_after); };
  const ChunkKey key{.file = {.lo = req.key_lo, .hi = req.key_hi}, .index = req.index};
  for (size_t i = 0; i < peers.size(); ++i) {
    const PeerHealth::Standing st = standing(i);
    if (st == PeerHealth::Standing::kSuspect) continue;
    if (st == PeerHealth::Standing::kSlow) {
      // Passed over only for a later peer in good standing (as the Hedger does).
      bool good_later = false;
      for (size_t j = i + 1; j < peers.size() && !good_later; ++j) {
        good_later = standing(j) == PeerHealth::Standing::kGood;
      }
      if (good_later) continue;
    }
    const Peer& peer = peers[i];
    health_.Asked(peer.endpoint);
    Result<Bytes> r = FetchFrom(peer, req, chunk_len);
    const bool answered = r.ok() || r.status().code() != Code::kUnavailable;
    health_.Finished(peer.endpoint, peer.map_epoch, answered, /*timely=*/answered, /*overdue=*/false);
    if (r.ok()) {
      out.value = std::move(r);
      out.winner = static_cast<int>(i);
      return out;
    }
    out.failures[i] = r.status();
    if (r.status().code() == Code::kCorruption) {
      options_.logger->warn("chunk {}: {}; reading it elsewhere", key.Name(), r.status().ToString());
    } else if (r.status().code() != Code::kNotFound) {
      options_.logger->debug("chunk {} from peer {}: {}", key.Name(), peer.name, r.status().ToString());
    }
    out.value = r.status();
  }
  return out;
}

}  // namespace hoard
