#include "node/peer_source.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace hoard {

PeerSource::PeerSource(proto::ClientPool* peers, std::string self, std::chrono::milliseconds timeout,
                       std::shared_ptr<spdlog::logger> logger)
    : self_(std::move(self)), timeout_(timeout), logger_(std::move(logger)), peers_(peers) {}

void PeerSource::OnView(const std::shared_ptr<const ClusterView>& view) {
  MutexLock lock(&mu_);
  if (current_ != nullptr && current_->map().placement_epoch != view->map().placement_epoch) {
    previous_ = current_;
    misses_.clear();  // chunks move now: ask everyone again
  }
  current_ = view;
}

bool PeerSource::Barren(const std::string& peer, uint64_t uid) {
  MutexLock lock(&mu_);
  auto it = misses_.find({peer, uid});
  return it != misses_.end() && std::chrono::steady_clock::now() < it->second.skip_until;
}

void PeerSource::Answered(const std::string& peer, uint64_t uid, bool hit) {
  MutexLock lock(&mu_);
  Misses& m = misses_[{peer, uid}];
  if (hit) {
    m = Misses{};
  } else if (++m.in_a_row >= kBarrenAfter) {
    m.in_a_row = 0;
    m.skip_until = std::chrono::steady_clock::now() + kBarrenFor;
  }
}

Result<ChunkSource::Bytes> PeerSource::Fetch(const DatasetView& dataset, const ChunkRef& chunk) {
  std::shared_ptr<const ClusterView> current, previous;
  {
    MutexLock lock(&mu_);
    current = current_;
    previous = previous_;
  }
  if (current == nullptr) return Status::NotFound("no cluster map yet");
  const ChunkKey key = dataset.manifest.chunk_key(chunk.entry, chunk.index);
  // Names of the candidates, current owners first.
  std::vector<std::string> names;
  for (const auto& view : {current, previous}) {
    if (view == nullptr) continue;
    const DatasetView* ds = view->dataset(dataset.meta.uid, dataset.meta.version);
    if (ds == nullptr) continue;
    // One rank beyond the owners: when a node joins and takes a chunk, the
    // member it displaced is ranked right after it (rendezvous hashing), so
    // a newcomer finds the old owner without having seen the old map.
    const int extra = view == current ? 1 : 0;
    std::vector<uint32_t> owners;
    view->placement().Owners(key.PlacementHash(), static_cast<int>(ds->meta.replicas) + extra, &owners);
    for (uint32_t o : owners) {
      const std::string& name = view->node(o).name;
      if (name != self_ && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  proto::GetChunk req{.dataset = dataset.meta.name,
                      .uid = dataset.meta.uid,
                      .version = dataset.meta.version,
                      .entry = chunk.entry,
                      .index = chunk.index,
                      .key_lo = key.file.lo,
                      .key_hi = key.file.hi,
                      .offset = 0,
                      .length = 0,
                      .fill = false,
                      .placement_epoch = current->map().placement_epoch};
  for (const std::string& name : names) {
    // Where the node is now, and whether it is up, per the current map.
    const proto::NodeInfo* node = nullptr;
    for (const auto& n : current->map().nodes) {
      if (n.name == name) node = &n;
    }
    if (node == nullptr || !node->up || Barren(name, dataset.meta.uid)) continue;
    {
      MutexLock lock(&mu_);
      auto it = suspect_until_.find(node->endpoint);
      if (it != suspect_until_.end() && std::chrono::steady_clock::now() < it->second) continue;
    }
    zmq::message_t payload;
    auto lease = peers_->Acquire(node->endpoint);
    metrics::ScopedTimer timer(&latency_);  // the request with its retries; ends with this iteration
    Result<proto::ChunkData> r = lease->Call(req, timeout_, &payload);
    // A peer whose request queue is full answers busy at once. It holds the
    // chunk all the same: waiting a moment for it costs far less than reading
    // the origin instead (which, under load, is what refilled a dead node's
    // replicas from NFS rather than from the surviving copy).
    for (int retry = 0; retry < kBusyRetries && !r.ok() && lease->last_call_busy(); ++retry) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 << retry));
      r = lease->Call(req, timeout_, &payload);
    }
    if (!r.ok()) {
      if (!lease->last_call_answered()) {
        MutexLock lock(&mu_);
        suspect_until_[node->endpoint] = std::chrono::steady_clock::now() + kSuspectFor;
      }
      if (r.status().code() == Code::kNotFound) {
        Answered(name, dataset.meta.uid, /*hit=*/false);
      } else {
        logger_->debug("chunk {} from peer {}: {}", key.Name(), name, r.status().ToString());
      }
      continue;
    }
    if (payload.size() != chunk.length) {
      logger_->warn("peer {} sent {} bytes of the {}-byte chunk {}; reading it elsewhere", name, payload.size(),
                    chunk.length, key.Name());
      continue;
    }
    Answered(name, dataset.meta.uid, /*hit=*/true);
    return Bytes(std::make_shared<const std::string>(static_cast<const char*>(payload.data()), payload.size()));
  }
  return Status::NotFound("no peer holds chunk " + key.Name());
}

}  // namespace hoard
