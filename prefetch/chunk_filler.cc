#include "prefetch/chunk_filler.h"

namespace hoard {
namespace {

// With a byte rate to keep, origin reads are paced in pieces of this size, so
// a 64 MiB chunk does not take a whole second's budget in one go.
constexpr size_t kPacedRead = 1u << 20;

}  // namespace

ChunkFiller::ChunkFiller(ChunkStore* store, OriginPool* origins, std::shared_ptr<spdlog::logger> logger,
                         ChunkSource* peers, OriginGate* gate)
    : store_(store), origins_(origins), logger_(std::move(logger)), peers_(peers), gate_(gate) {}

Result<ChunkFiller::FillResult> ChunkFiller::Fill(const DatasetView& dataset, const ChunkRef& chunk, bool cache,
                                                  OriginGate::Priority priority) {
  const ChunkKey key = dataset.manifest.chunk_key(chunk.entry, chunk.index);
  const bool demand = priority == OriginGate::Priority::kDemand && gate_ != nullptr;
  if (demand) {
    MutexLock lock(&urgent_mu_);
    ++demand_callers_[key];
    // A warm-up reading this chunk from the origin now has a reader waiting.
    if (auto it = warm_reads_.find(key); it != warm_reads_.end() && !it->second->exchange(true)) gate_->Wake();
  }
  bool leader = false;
  Result<FillResult> r =
      flights_.Do(key, [&] { return FetchAndStore(dataset, chunk, cache, priority); }, &leader);
  if (demand) {
    MutexLock lock(&urgent_mu_);
    if (auto it = demand_callers_.find(key); --it->second == 0) demand_callers_.erase(it);
  }
  // The leader may not have been asked to cache; do it for this caller.
  if (!leader && r.ok() && cache && store_ != nullptr && !store_->Contains(key)) {
    r->cache_status = store_->Put(key, dataset.meta.uid, *r->bytes);
  }
  return r;
}

Result<ChunkFiller::FillResult> ChunkFiller::FetchAndStore(const DatasetView& dataset, const ChunkRef& chunk,
                                                           bool cache, OriginGate::Priority priority) {
  Bytes bytes;
  if (peers_ != nullptr) {
    Result<Bytes> from_peer = peers_->Fetch(dataset, chunk);
    if (from_peer.ok() && (*from_peer)->size() == chunk.length) {
      bytes = std::move(*from_peer);
      peer_bytes_.fetch_add(chunk.length);
    }
  }
  if (bytes == nullptr) {
    HOARD_ASSIGN_OR_RETURN(bytes, ReadOrigin(dataset, chunk, priority));
  }
  FillResult out{bytes, Status::Ok()};
  if (cache && store_ != nullptr) {
    out.cache_status = store_->Put(dataset.manifest.chunk_key(chunk.entry, chunk.index), dataset.meta.uid, *bytes);
  }
  return out;
}

Result<ChunkFiller::Bytes> ChunkFiller::ReadOrigin(const DatasetView& dataset, const ChunkRef& chunk,
                                                   OriginGate::Priority priority) {
  // A warm-up read registers a flag a demand caller can raise (see Fill).
  const ChunkKey key = dataset.manifest.chunk_key(chunk.entry, chunk.index);
  std::shared_ptr<std::atomic<bool>> urgent;
  if (gate_ != nullptr && priority == OriginGate::Priority::kWarm) {
    MutexLock lock(&urgent_mu_);
    urgent = std::make_shared<std::atomic<bool>>(demand_callers_.contains(key));
    warm_reads_[key] = urgent;
  }
  struct Unregister {
    ChunkFiller* self;
    const ChunkKey& key;
    bool active;
    ~Unregister() {
      if (!active) return;
      MutexLock lock(&self->urgent_mu_);
      self->warm_reads_.erase(key);
    }
  } unregister{this, key, urgent != nullptr};
  OriginGate::Slot slot;
  if (gate_ != nullptr) slot = gate_->Acquire(priority, urgent.get());
  auto buf = std::make_shared<std::string>(chunk.length, '\0');
  HOARD_RETURN_IF_ERROR(ReadOriginRange(dataset, chunk, 0, chunk.length, buf->data(), priority, urgent.get()));
  origin_reads_.fetch_add(1);
  origin_bytes_.fetch_add(chunk.length);
  return Bytes(std::move(buf));
}

Result<ChunkFiller::Bytes> ChunkFiller::ReadRange(const DatasetView& dataset, const ChunkRef& chunk, uint64_t offset,
                                                  uint64_t length) {
  if (offset > chunk.length || length > chunk.length - offset) {
    return Status::InvalidArgument("range past the end of the chunk");
  }
  // A reader waits: a demand slot, and no single flight (ranges of one chunk
  // rarely repeat, and a repeat is the kernel's page cache's to serve).
  OriginGate::Slot slot;
  if (gate_ != nullptr) slot = gate_->Acquire(OriginGate::Priority::kDemand, nullptr);
  auto buf = std::make_shared<std::string>(length, '\0');
  HOARD_RETURN_IF_ERROR(
      ReadOriginRange(dataset, chunk, offset, length, buf->data(), OriginGate::Priority::kDemand, nullptr));
  range_reads_.fetch_add(1);
  origin_bytes_.fetch_add(length);
  return Bytes(std::move(buf));
}

Status ChunkFiller::ReadOriginRange(const DatasetView& dataset, const ChunkRef& chunk, uint64_t offset,
                                    uint64_t length, char* out, OriginGate::Priority priority,
                                    std::atomic<bool>* urgent) {
  const EntryRecord& rec = dataset.manifest.entry(chunk.entry);
  const std::string path = dataset.manifest.Path(chunk.entry);
  const std::string what = dataset.meta.name + "/" + path;
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<Origin> origin, origins_->Get(dataset.meta.source));
  Result<std::unique_ptr<OriginFile>> file = origin->Open(path);
  if (!file.ok()) return file.status().Annotate("read " + what + " from the origin");
  auto changed = [&](const OriginEntry& now, const char* when) {
    logger_->error("{} changed at the origin since the dataset was added ({}: size {} -> {}, mtime {} -> {} ns); "
                   "refusing to mix versions; `hoard dataset refresh {}` adopts the new version",
                   what, when, rec.size, now.size, rec.mtime_ns, now.mtime_ns, dataset.meta.name);
    return Status::Stale(what + " changed at the origin since the dataset was added");
  };
  if (const OriginEntry& now = (*file)->attributes(); now.size != rec.size || now.mtime_ns != rec.mtime_ns) {
    return changed(now, "at open");
  }
  const uint64_t start = uint64_t(chunk.index) * dataset.manifest.chunk_size() + offset;
  const bool paced = gate_ != nullptr && gate_->limits().bytes_per_s > 0;
  size_t done = 0;
  while (done < length) {
    const size_t want = paced ? std::min<size_t>(kPacedRead, length - done) : length - done;
    if (paced) gate_->Pace(priority, want, urgent);
    Result<size_t> n = [&] {
      metrics::ScopedTimer timer(&origin_read_latency_);
      return (*file)->ReadAt(start + done, want, out + done);
    }();
    if (!n.ok()) return n.status().Annotate("read " + what + " from the origin");
    if (*n == 0) return Status::Stale(what + " is shorter at the origin than when the dataset was added");
    done += *n;
  }
  // A file rewritten in place while we read would give a mix of its two
  // versions; its attributes after the last read tell (one GETATTR).
  Result<OriginEntry> after = (*file)->Restat();
  if (!after.ok()) return after.status().Annotate("read " + what + " from the origin");
  if (after->size != rec.size || after->mtime_ns != rec.mtime_ns) return changed(*after, "while reading");
  return Status::Ok();
}

}  // namespace hoard
