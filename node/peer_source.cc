#include "node/peer_source.h"

#include <algorithm>
#include <vector>

namespace hoard {

PeerSource::PeerSource(proto::ClientPool* peers, std::string self, std::chrono::milliseconds timeout,
                       std::shared_ptr<spdlog::logger> logger, const Clock* clock)
    : self_(std::move(self)),
      clock_(clock),
      transport_(peers),
      client_(PeerChunkClient::Options{.timeout = timeout,
                                       .health = {.suspect_for = kSuspectFor},
                                       .clock = clock,
                                       .logger = std::move(logger)},
              &transport_) {}

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
  return it != misses_.end() && clock_->Now() < it->second.skip_until;
}

void PeerSource::Answered(const std::string& peer, uint64_t uid, bool hit) {
  MutexLock lock(&mu_);
  Misses& m = misses_[{peer, uid}];
  if (hit) {
    m = Misses{};
  } else if (++m.in_a_row >= kBarrenAfter) {
    m.in_a_row = 0;
    m.skip_until = clock_->Now() + kBarrenFor;
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
  // Where each is now, and whether it is up, per the current map.
  std::vector<PeerChunkClient::Peer> peers;
  for (const std::string& name : names) {
    const proto::NodeInfo* node = nullptr;
    for (const auto& n : current->map().nodes) {
      if (n.name == name) node = &n;
    }
    if (node == nullptr || !node->up || Barren(name, dataset.meta.uid)) continue;
    peers.push_back({.name = name, .endpoint = node->endpoint, .map_epoch = current->epoch()});
  }
  const proto::GetChunk req = PeerChunkClient::Request(dataset.meta.name, dataset.meta, chunk.entry, key,
                                                       /*fill=*/false, current->map().placement_epoch);
  PeerChunkClient::Outcome got = client_.Fetch(peers, req, chunk.length);
  for (size_t i = 0; i < peers.size(); ++i) {
    if (got.failures[i].code() == Code::kNotFound) Answered(peers[i].name, dataset.meta.uid, /*hit=*/false);
  }
  if (!got.value.ok()) return Status::NotFound("no peer holds chunk " + key.Name());
  Answered(peers[size_t(got.winner)].name, dataset.meta.uid, /*hit=*/true);
  return std::move(got.value);
}

}  // namespace hoard
