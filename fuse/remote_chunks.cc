#include "fuse/remote_chunks.h"

#include <utility>

#include "striping/chunking.h"

namespace hoard::fuse {
namespace {

// What makes an answer good: the whole chunk, no more, no less. (Replies are
// authenticated per message and matched to their request by id; the manifest
// records no checksum per chunk to check the bytes against.)
std::function<Status(const RemoteChunks::Bytes&)> ChunkLengthIs(uint64_t chunk_len) {
  return [chunk_len](const RemoteChunks::Bytes& b) -> Status {
    if (b != nullptr && b->size() == chunk_len) return Status::Ok();
    return Status::Corruption("got " + std::to_string(b == nullptr ? 0 : b->size()) + " bytes of a " +
                              std::to_string(chunk_len) + "-byte chunk");
  };
}

uint64_t ChunkLen(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  return ChunkLength(ds.manifest().entry(entry).size, ds.manifest().chunk_size(), index);
}

}  // namespace

RemoteChunks::RemoteChunks(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view,
                           ReadCounters* counters)
    : options_(std::move(options)),
      current_view_(std::move(current_view)),
      counters_(counters),
      peers_(*options_.context, 16, options_.peer_connect_timeout),
      transport_(&peers_),
      client_(PeerChunkClient::Options{.timeout = options_.peer_timeout,
                                       .health = {.suspect_for = options_.suspect_for,
                                                  .slow_after = options_.slow_after},
                                       .clock = options_.clock,
                                       .logger = options_.logger,
                                       .on_newer_placement = options_.on_newer_placement},
              &transport_),
      origins_(options_.origin, options_.open_origin),
      origin_reader_(nullptr, &origins_, options_.logger),
      hedger_(Hedger::Options{
          .latency = options_.hedge,
          // Requests waiting out a stopped peer keep their threads (up to
          // peer_timeout), so new ones must not queue behind them.
          .pool = {.max_threads = 256, .keep_idle = 32},
          .clock = options_.clock,
          .shared_health = &client_.health(),
          .on_slow_suspect = [logger = options_.logger, suspect_for = options_.suspect_for,
                              slow_after = options_.slow_after](const std::string& peer) {
            logger->warn("peer {} left {} chunk requests in a row unanswered past their hedge delay; skipping it "
                         "for {} ms",
                         peer, slow_after, suspect_for.count());
          }}) {}

std::vector<uint32_t> RemoteChunks::Owners(const MountedDataset& ds, const ClusterView& view,
                                           const ChunkKey& key) const {
  std::vector<uint32_t> owners;
  // A removed dataset (read through a file opened before) is gone from its
  // owners too: go straight to the origin.
  if (!ds.retired.load(std::memory_order_acquire)) {
    view.placement().Owners(key.PlacementHash(), static_cast<int>(ds.view->meta.replicas), &owners);
  }
  return owners;
}

Result<RemoteChunks::Bytes> RemoteChunks::Fetch(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const Manifest& m = ds.manifest();
  const uint64_t chunk_len = ChunkLen(ds, entry, index);
  std::shared_ptr<const ClusterView> view = current_view_();
  const ChunkKey key = m.chunk_key(entry, index);
  // Up owners first, in rank order; down ones are not tried at all, suspect
  // ones are skipped by the Hedger. Then the origin, read by ourselves: a
  // file that changed at the origin fails there too (kStale), so nothing
  // mixes versions.
  std::vector<Hedger::Source<Bytes>> sources;
  for (uint32_t o : Owners(ds, *view, key)) {
    if (view->node(o).up) sources.push_back(PeerRequest(ds, view, o, entry, index, chunk_len, true, true));
  }
  const size_t origin = sources.size();
  const ChunkRef ref{entry, index, m.entry(entry).first_chunk() + index, chunk_len};
  // Beside an owner that is busy rather than stuck, the origin is not asked
  // (the owner is most likely reading the chunk from it already): see
  // common/hedger.h.
  sources.push_back({.fetch = [this, &ds, ref]() -> Result<Bytes> {
                       Result<ChunkFiller::FillResult> f = origin_reader_.Fill(*ds.view, ref, /*cache=*/false);
                       if (!f.ok()) return f.status();
                       return f->bytes;
                     },
                     .only_past_stalled_peers = true});
  Hedger::Outcome<Bytes> got = hedger_.Run(std::move(sources), ChunkLengthIs(chunk_len), {});
  if (got.value.ok()) {
    CountFetched(chunk_len, got.winner == static_cast<int>(origin));
    if (got.hedged) {
      options_.logger->debug("chunk {} of {}: a hedged request won ({})", key.Name(), ds.name,
                             got.winner == static_cast<int>(origin) ? "the origin" : "an owner");
    }
  }
  return std::move(got.value);
}

Result<RemoteChunks::Bytes> RemoteChunks::FetchRange(const MountedDataset& ds, uint32_t entry, uint32_t index,
                                                     uint64_t offset, uint64_t length) {
  const Manifest& m = ds.manifest();
  const uint64_t chunk_len = ChunkLen(ds, entry, index);
  if (offset > chunk_len || length > chunk_len - offset) {
    return Status::InvalidArgument("range past the end of the chunk");
  }
  std::shared_ptr<const ClusterView> view = current_view_();
  const ChunkKey key = m.chunk_key(entry, index);
  // The same sources in the same order as Fetch: owners that hold the chunk
  // send the range from their disk, one that misses reads just the range
  // from the origin (range_only) and stores nothing.
  std::vector<Hedger::Source<Bytes>> sources;
  const ChunkRange range{offset, length};
  for (uint32_t o : Owners(ds, *view, key)) {
    if (view->node(o).up) sources.push_back(PeerRequest(ds, view, o, entry, index, chunk_len, true, true, range));
  }
  const size_t origin = sources.size();
  const ChunkRef ref{entry, index, m.entry(entry).first_chunk() + index, chunk_len};
  sources.push_back({.fetch = [this, &ds, ref, offset, length]() -> Result<Bytes> {
                       return origin_reader_.ReadRange(*ds.view, ref, offset, length);
                     },
                     .only_past_stalled_peers = true});
  Hedger::Outcome<Bytes> got = hedger_.Run(std::move(sources), ChunkLengthIs(length), {});
  if (got.value.ok()) {
    CountFetched(length, got.winner == static_cast<int>(origin));
    counters_->range_fetches.fetch_add(1, std::memory_order_relaxed);
  }
  return std::move(got.value);
}

Result<RemoteChunks::Bytes> RemoteChunks::FetchAhead(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const uint64_t chunk_len = ChunkLen(ds, entry, index);
  std::shared_ptr<const ClusterView> view = current_view_();
  // First every up owner that already holds the chunk: after a membership
  // change the first owner in rank order may be a new one that does not hold
  // it yet, and asking it to fill would read the origin (or a peer) for a
  // chunk a surviving replica can send at once. Read-ahead gives up once the
  // owners it asked are all overdue: they are skipped from then on, and the
  // demand read that follows goes to the next source at once.
  std::vector<Hedger::Source<Bytes>> holders;
  std::vector<uint32_t> asked;
  for (uint32_t o : Owners(ds, *view, ds.manifest().chunk_key(entry, index))) {
    if (!view->node(o).up) continue;
    holders.push_back(PeerRequest(ds, view, o, entry, index, chunk_len, /*fill=*/false, /*demand=*/false));
    asked.push_back(o);
  }
  if (holders.empty()) return Status::Unavailable("read-ahead: no owner of the chunk is up");
  Hedger::Outcome<Bytes> got =
      hedger_.Run(std::move(holders), ChunkLengthIs(chunk_len), {.give_up_when_overdue = true});
  if (got.value.ok()) {
    CountFetched(chunk_len, /*origin=*/false);
    return std::move(got.value);
  }
  // Nobody holds it yet (a first pass): the first owner that said so reads
  // it through and keeps it, as for a demand read. The origin itself is left
  // to the demand read, which reports what failed.
  for (size_t i = 0; i < asked.size(); ++i) {
    if (got.failures[i].code() != Code::kNotFound) continue;
    std::vector<Hedger::Source<Bytes>> filler;
    filler.push_back(PeerRequest(ds, view, asked[i], entry, index, chunk_len, /*fill=*/true, /*demand=*/false));
    got = hedger_.Run(std::move(filler), ChunkLengthIs(chunk_len), {.give_up_when_overdue = true});
    if (got.value.ok()) CountFetched(chunk_len, /*origin=*/false);
    break;
  }
  return std::move(got.value);
}

Hedger::Source<RemoteChunks::Bytes> RemoteChunks::PeerRequest(const MountedDataset& ds,
                                                              std::shared_ptr<const ClusterView> view,
                                                              uint32_t node, uint32_t entry, uint32_t index,
                                                              uint64_t chunk_len, bool fill, bool demand,
                                                              ChunkRange range) {
  const proto::NodeInfo& n = view->node(node);
  Hedger::Source<Bytes> source{.peer = n.endpoint, .map_epoch = view->epoch()};
  source.fetch = [this, &ds, view = std::move(view), node, entry, index, chunk_len, fill, demand,
                  range]() -> Result<Bytes> {
    const proto::NodeInfo& n = view->node(node);
    const ChunkKey key = ds.manifest().chunk_key(entry, index);
    proto::GetChunk req =
        PeerChunkClient::Request(ds.name, ds.view->meta, entry, key, fill, view->map().placement_epoch);
    if (range.length != 0) {
      req.offset = range.offset;
      req.length = range.length;
      req.range_only = true;
    }
    Result<Bytes> r = client_.FetchFrom({.name = n.name, .endpoint = n.endpoint, .map_epoch = view->epoch()}, req,
                                        chunk_len);
    if (!r.ok() && demand) {
      counters_->peer_failures.fetch_add(1);
      options_.logger->warn("chunk {} of {} from {}: {}", key.Name(), ds.name, n.name, r.status().ToString());
    }
    return r;
  };
  return source;
}

void RemoteChunks::CountFetched(uint64_t chunk_len, bool origin) {
  (origin ? counters_->origin_bytes : counters_->peer_bytes).fetch_add(chunk_len);
  counters_->remote_fetches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace hoard::fuse
