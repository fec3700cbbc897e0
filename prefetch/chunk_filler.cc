#include "prefetch/chunk_filler.h"

namespace hoard {

ChunkFiller::ChunkFiller(ChunkStore* store, OriginPool* origins, std::shared_ptr<spdlog::logger> logger,
                         ChunkSource* peers)
    : store_(store), origins_(origins), logger_(std::move(logger)), peers_(peers) {}

Result<ChunkFiller::FillResult> ChunkFiller::Fill(const DatasetView& dataset, const ChunkRef& chunk, bool cache) {
  const ChunkKey key = dataset.manifest.chunk_key(chunk.entry, chunk.index);
  bool leader = false;
  Result<FillResult> r = flights_.Do(key, [&] { return FetchAndStore(dataset, chunk, cache); }, &leader);
  // The leader may not have been asked to cache; do it for this caller.
  if (!leader && r.ok() && cache && store_ != nullptr && !store_->Contains(key)) {
    r->cache_status = store_->Put(key, dataset.meta.uid, *r->bytes);
  }
  return r;
}

Result<ChunkFiller::FillResult> ChunkFiller::FetchAndStore(const DatasetView& dataset, const ChunkRef& chunk,
                                                           bool cache) {
  Bytes bytes;
  if (peers_ != nullptr) {
    Result<Bytes> from_peer = peers_->Fetch(dataset, chunk);
    if (from_peer.ok() && (*from_peer)->size() == chunk.length) {
      bytes = std::move(*from_peer);
      peer_bytes_.fetch_add(chunk.length);
    }
  }
  if (bytes == nullptr) {
    HOARD_ASSIGN_OR_RETURN(bytes, ReadOrigin(dataset, chunk));
  }
  FillResult out{bytes, Status::Ok()};
  if (cache && store_ != nullptr) {
    out.cache_status = store_->Put(dataset.manifest.chunk_key(chunk.entry, chunk.index), dataset.meta.uid, *bytes);
  }
  return out;
}

Result<ChunkFiller::Bytes> ChunkFiller::ReadOrigin(const DatasetView& dataset, const ChunkRef& chunk) {
  const EntryRecord& rec = dataset.manifest.entry(chunk.entry);
  const std::string path = dataset.manifest.Path(chunk.entry);
  const std::string what = dataset.meta.name + "/" + path;
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<Origin> origin, origins_->Get(dataset.meta.source));
  Result<std::unique_ptr<OriginFile>> file = origin->Open(path);
  if (!file.ok()) return file.status().Annotate("read " + what + " from the origin");
  const OriginEntry& now = (*file)->attributes();
  if (now.size != rec.size || now.mtime_ns != rec.mtime_ns) {
    logger_->error("{} changed at the origin since the dataset was added (size {} -> {}, mtime {} -> {} ns); "
                   "refusing to mix versions",
                   what, rec.size, now.size, rec.mtime_ns, now.mtime_ns);
    return Status::Stale(what + " changed at the origin since the dataset was added");
  }
  auto buf = std::make_shared<std::string>(chunk.length, '\0');
  const uint64_t start = uint64_t(chunk.index) * dataset.manifest.chunk_size();
  size_t done = 0;
  while (done < chunk.length) {
    Result<size_t> n = (*file)->ReadAt(start + done, chunk.length - done, buf->data() + done);
    if (!n.ok()) return n.status().Annotate("read " + what + " from the origin");
    if (*n == 0) return Status::Stale(what + " is shorter at the origin than when the dataset was added");
    done += *n;
  }
  origin_reads_.fetch_add(1);
  origin_bytes_.fetch_add(chunk.length);
  return Bytes(std::move(buf));
}

}  // namespace hoard
