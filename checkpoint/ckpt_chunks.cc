#include "checkpoint/ckpt_chunks.h"

#include <algorithm>
#include <cstring>

#include "store/replica_store.h"
#include "common/hash.h"

namespace hoard::fuse {

CkptChunks::CkptChunks(Options options, proto::ClientPool* pool,
                       std::function<std::shared_ptr<const ClusterView>()> view)
    : options_(std::move(options)), pool_(pool), view_(std::move(view)) {
  if (options_.threads <= 0) return;
  ahead_ = std::make_unique<WorkQueue<Ahead>>(
      WorkQueue<Ahead>::Options{.name = "ckpt-ahead", .threads = static_cast<size_t>(options_.threads),
                                .max_items = kMaxAhead, .drop_oldest = true},
      [this](Ahead& a) {
        // Failures are silent here: the reader's own request tries again and reports.
        (void)Get(*a.entry, a.index);
      });
}

CkptChunks::~CkptChunks() {
  if (ahead_) ahead_->Stop();
}

Result<size_t> CkptChunks::Read(const proto::CkptEntry& e, uint64_t off, size_t len, char* out) {
  Result<std::vector<Piece>> pieces = ReadPieces(e, off, len);
  if (!pieces.ok()) return pieces.status();
  size_t n = 0;
  for (const Piece& p : *pieces) {
    std::memcpy(out + n, p.data, p.size);
    n += p.size;
  }
  return n;
}

Result<std::vector<CkptChunks::Piece>> CkptChunks::ReadPieces(const proto::CkptEntry& e, uint64_t off, size_t len) {
  std::vector<Piece> out;
  if (off >= e.size || len == 0) return out;
  if (std::optional<uint64_t> n = proto::CkptChunkCount(e.size, e.chunk_size); !n || e.checksums.size() != *n) {
    return Status::Corruption("checkpoint file " + e.path + ": its entry's chunk list does not match its size");
  }
  const uint64_t end = std::min<uint64_t>(e.size, off + len);
  // Sequential restores: the chunks after this read's are fetched meanwhile.
  const uint32_t last = static_cast<uint32_t>((end - 1) / e.chunk_size);
  if (options_.ahead > 0 && ahead_) {
    auto shared = std::make_shared<const proto::CkptEntry>(e);
    std::vector<uint32_t> missing;
    {
      MutexLock lock(&mu_);
      const uint32_t chunks = static_cast<uint32_t>(e.checksums.size());
      for (uint32_t i = last + 1; i <= last + options_.ahead && i < chunks; ++i) {
        if (index_.count(Key{e.id, e.gen, i}) == 0) missing.push_back(i);
      }
    }
    for (uint32_t i : missing) (void)ahead_->Push(Ahead{shared, i});
  }
  uint64_t pos = off;
  while (pos < end) {
    const auto index = static_cast<uint32_t>(pos / e.chunk_size);
    Result<Bytes> b = Get(e, index);
    if (!b.ok()) return b.status();
    const uint64_t in = pos - uint64_t(index) * e.chunk_size;
    const uint64_t n = std::min<uint64_t>(end - pos, (*b)->size() - in);
    out.push_back(Piece{.chunk = *b, .data = (*b)->data() + in, .size = size_t(n)});
    pos += n;
  }
  return out;
}

CkptChunks::Bytes CkptChunks::Cached(const Key& k) {
  MutexLock lock(&mu_);
  auto it = index_.find(k);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void CkptChunks::Keep(const Key& k, Bytes b) {
  MutexLock lock(&mu_);
  if (index_.count(k)) return;
  cached_bytes_ += b->size();
  lru_.emplace_front(k, std::move(b));
  index_[k] = lru_.begin();
  while (cached_bytes_ > options_.cache_bytes && lru_.size() > 1) {
    cached_bytes_ -= lru_.back().second->size();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

Result<CkptChunks::Bytes> CkptChunks::Get(const proto::CkptEntry& e, uint32_t index) {
  const Key k{e.id, e.gen, index};
  if (Bytes b = Cached(k)) return b;
  return flights_.Do(k, [&]() -> Result<Bytes> {
    if (Bytes b = Cached(k)) return b;
    Result<Bytes> r = Fetch(e, index);
    if (r.ok()) Keep(k, *r);
    return r;
  });
}

Result<CkptChunks::Bytes> CkptChunks::Fetch(const proto::CkptEntry& e, uint32_t index) {
  const uint64_t len = std::min<uint64_t>(e.chunk_size, e.size - uint64_t(index) * e.chunk_size);
  std::vector<std::string> holders = proto::CkptChunkHolders(e, index);
  // This node first (no network), then the others rotated by chunk index so
  // that a sequential restore spreads over every holder.
  if (!holders.empty()) std::rotate(holders.begin(), holders.begin() + index % holders.size(), holders.end());
  auto self = std::find(holders.begin(), holders.end(), options_.node_name);
  if (self != holders.end()) std::rotate(holders.begin(), self, self + 1);

  std::shared_ptr<const ClusterView> view = view_();
  Status last = Status::NotFound("checkpoint file " + e.path + " chunk " + std::to_string(index) +
                                 ": no node holds it");
  // The generation whose copies hold the chunk: a commit that left it
  // unchanged reuses an older one's (CkptEntry::chunk_gens).
  const uint64_t gen = proto::CkptChunkGen(e, index);
  proto::GetCkptChunk req{.id = e.id, .gen = gen, .index = index, .checksum = e.checksums[index],
                          .chunk_size = e.chunk_size, .chunk_length = len};
  for (const std::string& name : holders) {
    if (name == options_.node_name && !options_.local_ckpt_dir.empty()) {
      // Verified against the entry's checksum by ReadCopy. Not found here
      // (evicted, rewritten) means our agent has nothing either.
      Result<std::string> local =
          ReplicaStore::ReadCopy(options_.local_ckpt_dir, e.id, gen, index, e.checksums[index], e.chunk_size, len);
      if (local.ok()) {
        local_bytes_ += len;
        return Bytes(std::make_shared<const std::string>(std::move(*local)));
      }
      last = local.status();
      continue;
    }
    const proto::NodeInfo* node = nullptr;
    if (view != nullptr) {
      for (const proto::NodeInfo& n : view->map().nodes) {
        if (n.name == name) node = &n;
      }
    }
    if (node == nullptr || !node->up) continue;
    zmq::message_t payload;
    auto lease = pool_->Acquire(node->endpoint);
    Result<proto::CkptChunkData> r = lease->Call(req, options_.peer_timeout, &payload);
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    // The holder checked its copy; check what arrived too.
    if (payload.size() != len || Checksum64(payload.data(), len) != e.checksums[index]) {
      last = Status::Corruption("checkpoint chunk from " + name + " does not match its checksum");
      options_.logger->warn("{} chunk {}: {}", e.path, index, last.ToString());
      continue;
    }
    peer_bytes_ += len;
    return Bytes(std::make_shared<const std::string>(static_cast<const char*>(payload.data()), len));
  }
  if (e.level == static_cast<uint8_t>(proto::CkptLevel::kP)) return FromOrigin(e, index);
  return last;
}

Result<CkptChunks::Bytes> CkptChunks::FromOrigin(const proto::CkptEntry& e, uint32_t index) {
  if (!options_.open_origin) return Status::NotFound("checkpoint file " + e.path + ": no copy and no origin");
  CkptOrigin* origin = nullptr;
  {
    MutexLock lock(&origin_mu_);
    if (origin_ == nullptr) {
      Result<std::unique_ptr<CkptOrigin>> o = options_.open_origin();
      if (!o.ok()) return o.status();
      origin_ = std::move(*o);
    }
    origin = origin_.get();
  }
  Result<std::unique_ptr<OriginFile>> f = origin->Open(e.path);
  if (!f.ok()) return f.status();
  const uint64_t len = std::min<uint64_t>(e.chunk_size, e.size - uint64_t(index) * e.chunk_size);
  auto buf = std::make_shared<std::string>(len, '\0');
  Result<size_t> n = (*f)->ReadAt(uint64_t(index) * e.chunk_size, len, buf->data());
  if (!n.ok()) return n.status();
  // The origin's file may have been replaced since (another drain, a user):
  // only the bytes of this generation are served.
  if (*n != len || Checksum64(buf->data(), len) != e.checksums[index]) {
    return Status::Stale("checkpoint file " + e.path + " on the origin is not the generation the namespace has");
  }
  origin_bytes_ += len;
  return Bytes(std::move(buf));
}

}  // namespace hoard::fuse
