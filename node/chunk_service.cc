#include "node/chunk_service.h"

#include <algorithm>

namespace hoard {

ChunkService::ChunkService(ChunkStore* store, ChunkFiller* filler,
                           std::function<std::shared_ptr<const ClusterView>()> current_view,
                           std::function<Status()> refresh_view, std::shared_ptr<spdlog::logger> logger)
    : store_(store),
      filler_(filler),
      current_view_(std::move(current_view)),
      refresh_view_(std::move(refresh_view)),
      logger_(std::move(logger)) {}

Result<proto::ChunkData> ChunkService::GetChunk(const proto::GetChunk& req, std::string* payload) {
  counters_.requests.fetch_add(1);
  // Demand reads in progress: the scrubber (node/scrubber.h) waits for them.
  counters_.in_flight.fetch_add(1, std::memory_order_relaxed);
  struct Done {
    std::atomic<uint64_t>* n;
    ~Done() { n->fetch_sub(1, std::memory_order_relaxed); }
  } done{&counters_.in_flight};
  std::shared_ptr<const ClusterView> view = current_view_();
  if (req.placement_epoch > view->map().placement_epoch) {
    (void)refresh_view_();
    view = current_view_();
  }
  const DatasetView* ds = view->dataset(req.uid, req.version);
  if (ds == nullptr) {
    (void)refresh_view_();
    view = current_view_();
    ds = view->dataset(req.uid, req.version);
    if (ds == nullptr) {
      counters_.errors.fetch_add(1);
      return Status::NotFound("dataset " + req.dataset + " version " + std::to_string(req.version) +
                              " is not known to this node");
    }
  }
  const Manifest& m = ds->manifest;
  if (req.entry >= m.entry_count() || !m.entry(req.entry).is_file() || req.index >= m.chunk_count(req.entry)) {
    counters_.errors.fetch_add(1);
    return Status::InvalidArgument("no chunk " + std::to_string(req.index) + " of entry " +
                                   std::to_string(req.entry) + " in dataset " + ds->meta.name);
  }
  const ChunkKey key = m.chunk_key(req.entry, req.index);
  if (key.file.lo != req.key_lo || key.file.hi != req.key_hi) {
    counters_.errors.fetch_add(1);
    return Status::Stale("chunk key does not match dataset " + ds->meta.name + " version " +
                         std::to_string(ds->meta.version));
  }
  const EntryRecord& rec = m.entry(req.entry);
  const uint64_t chunk_len = ChunkLength(rec.size, m.chunk_size(), req.index);
  if (req.offset > chunk_len) return Status::InvalidArgument("offset past the end of the chunk");
  const uint64_t len = std::min<uint64_t>(req.length == 0 ? chunk_len : req.length, chunk_len - req.offset);

  payload->resize(len);
  Result<size_t> n = store_->Read(key, req.offset, len, payload->data());
  if (n.ok() && *n == len) {
    counters_.cache_hits.fetch_add(1);
    counters_.cache_bytes.fetch_add(len);
    return proto::ChunkData{chunk_len, req.offset, "cache", view->map().placement_epoch};
  }
  if (!n.ok() && n.status().code() != Code::kNotFound && n.status().code() != Code::kCorruption) {
    logger_->warn("chunk store read of {}: {}", key.Name(), n.status().ToString());
  }
  if (!req.fill) {
    payload->clear();
    return Status::NotFound("chunk " + key.Name() + " is not cached here");
  }
  // Read through; keep the chunk only if it is ours to keep: owned, of a
  // dataset not evicted (an evicted one is served from the origin, not
  // stored, until it is warmed again: coordinator/eviction.h).
  const bool owner = ds->meta.resident && view->self_index() >= 0 &&
                     view->placement().IsOwner(key.PlacementHash(), static_cast<int>(ds->meta.replicas),
                                               static_cast<uint32_t>(view->self_index()));
  ChunkRef ref{req.entry, req.index, rec.first_chunk() + req.index, chunk_len};
  if (req.range_only && len < chunk_len) {
    // A random reader's range: read just that from the origin and answer at
    // once. Nothing is stored (a store holds whole chunks only), and no fill
    // of the whole chunk is queued either: `hoard warm` makes a dataset
    // local, and a random reader of a cold one would otherwise pull all of it
    // through the origin link behind its own reads.
    Result<ChunkFiller::Bytes> range = filler_->ReadRange(*ds, ref, req.offset, len);
    if (!range.ok()) {
      counters_.errors.fetch_add(1);
      payload->clear();
      return range.status();
    }
    payload->assign(**range);
    counters_.origin_bytes.fetch_add(len);
    counters_.range_reads.fetch_add(1);
    return proto::ChunkData{chunk_len, req.offset, "origin", view->map().placement_epoch};
  }
  Result<ChunkFiller::FillResult> fill = filler_->Fill(*ds, ref, owner);
  if (!fill.ok()) {
    counters_.errors.fetch_add(1);
    payload->clear();
    return fill.status();
  }
  if (!fill->cache_status.ok()) {
    logger_->warn("{}: served without caching: {}", key.Name(), fill->cache_status.ToString());
  }
  payload->assign(*fill->bytes, req.offset, len);
  counters_.origin_bytes.fetch_add(len);
  return proto::ChunkData{chunk_len, req.offset, "origin", view->map().placement_epoch};
}

}  // namespace hoard
