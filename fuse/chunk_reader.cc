#include "fuse/chunk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fuse/local_fds.h"
#include "node/chunk_file.h"
#include "node/chunk_store.h"

namespace hoard::fuse {
namespace {

uint64_t NextReaderId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

ChunkReader::ChunkReader(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view)
    : options_(std::move(options)),
      current_view_(std::move(current_view)),
      peers_(*options_.context, 16, options_.peer_connect_timeout),
      origins_(options_.origin, options_.open_origin),
      origin_reader_(nullptr, &origins_, options_.logger),
      id_(NextReaderId()) {}

ChunkReader::~ChunkReader() {
  if (int fd = chunks_dir_.load(); fd >= 0) ::close(fd);
}

int ChunkReader::ChunksDir() {
  int fd = chunks_dir_.load(std::memory_order_acquire);
  if (fd >= 0 || options_.local_store.empty()) return fd;
  const std::string dir = JoinPath(options_.local_store, "chunks");
  int opened = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (opened < 0) return -1;
  int expected = -1;
  if (!chunks_dir_.compare_exchange_strong(expected, opened, std::memory_order_acq_rel)) {
    ::close(opened);  // another thread won the race
    return expected;
  }
  return opened;
}

int ChunkReader::LocalFd(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
                         LocalFds::Deferred* deferred) {
  if (options_.local_store.empty()) return -1;
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  LocalFds& fds = LocalFds::ForThisThread();
  const uint64_t generation = generation_.load(std::memory_order_relaxed);
  if (int fd = fds.Find(id_, generation, key, deferred); fd >= 0) return fd;
  const int fd = OpenLocal(ds, entry, index, offset, key);
  if (fd >= 0) fds.Put(id_, key, fd, deferred);
  return fd;
}

int ChunkReader::OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
                           const ChunkKey& key) {
  const int dir = ChunksDir();
  if (dir < 0) return -1;
  char rel[ChunkStore::kRelativePathSize];
  ChunkStore::RelativeChunkPath(key, rel);
  UniqueFd fd(::openat(dir, rel, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return -1;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return -1;
  const uint64_t want = ChunkLength(ds.manifest().entry(entry).size, ds.manifest().chunk_size(), index);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t fp = VerifiedSet::Fingerprint(key);
  // A chunk this mount verified before: its file is immutable once renamed
  // into place, so the size check is all that is left to do. Ask the kernel
  // to start reading what comes next now (one read-ahead window, not the
  // whole chunk: a random reader of 64 MiB chunks must not read 64 MiB per
  // 4 KiB): the FUSE workers of one reader each hold their own fd, so the
  // page cache's per-fd sequential detection would otherwise see scattered
  // 1 MiB reads and read ahead little.
  if (size == want + kChunkTrailerSize && verified_.Contains(fp)) {
    if (offset < want) {
      const uint64_t len = std::min<uint64_t>(want - offset, kWillNeedBytes);
      (void)::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    }
    return fd.Release();
  }

  // First use in this mount: one pass over the file checks the trailer and the
  // bytes (and leaves them in the page cache for the reply). Readers of the
  // same chunk share one check. A chunk that fails is left for the node
  // agent, which verifies before serving and drops it; we read from the next
  // source.
  Result<ChunkTrailer> t = verify_flights_.Do(key, [&]() -> Result<ChunkTrailer> {
    if (verified_.Contains(fp)) return ChunkTrailer{.length = size - kChunkTrailerSize};
    constexpr size_t kScratch = 256 << 10;
    thread_local std::unique_ptr<char[]> scratch(new char[kScratch]);
    return ReadAndVerifyChunkFile(fd.get(), size, scratch.get(), kScratch);
  });
  if (!t.ok() || t->length != want) {
    counters_.corrupt_local_chunks.fetch_add(1, std::memory_order_relaxed);
    options_.logger->error("local chunk {} of {} is unusable ({}); reading it elsewhere", key.Name(), ds.name,
                           t.ok() ? "wrong length" : t.status().ToString());
    return -1;
  }
  verified_.Insert(fp);
  return fd.Release();
}

Result<ChunkReader::Bytes> ChunkReader::FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  {
    std::lock_guard lock(cache_mu_);
    auto hit = lru_index_.find(key);
    if (hit != lru_index_.end()) {
      lru_.splice(lru_.begin(), lru_, hit->second);
      return hit->second->second;
    }
  }
  return flights_.Do(key, [&]() -> Result<Bytes> {
    Result<Bytes> r = FetchUncached(ds, entry, index);
    if (r.ok()) Remember(key, *r);
    return r;
  });
}

Result<ChunkReader::Bytes> ChunkReader::FetchUncached(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const Manifest& m = ds.manifest();
  const uint64_t chunk_len = ChunkLength(m.entry(entry).size, m.chunk_size(), index);
  std::shared_ptr<const ClusterView> view = current_view_();
  const ChunkKey key = m.chunk_key(entry, index);
  std::vector<uint32_t> owners;
  // A removed dataset (read through a file opened before) is gone from its
  // owners too: go straight to the origin.
  if (!ds.retired.load(std::memory_order_acquire)) {
    view->placement().Owners(key.PlacementHash(), static_cast<int>(ds.view->meta.replicas), &owners);
  }
  // Up owners first, in rank order; down ones are not tried at all.
  for (uint32_t o : owners) {
    const proto::NodeInfo& node = view->node(o);
    if (!node.up || Suspect(node.endpoint, view->epoch())) continue;
    Result<Bytes> r = FetchFromPeer(node, view->map().placement_epoch, ds, entry, index, chunk_len);
    if (r.ok()) {
      counters_.peer_bytes.fetch_add(chunk_len);
      return r;
    }
    counters_.peer_failures.fetch_add(1);
    if (r.status().code() == Code::kUnavailable) MarkSuspect(node.endpoint, view->epoch());
    options_.logger->warn("chunk {} of {} from {}: {}; trying the next source", key.Name(), ds.name, node.name,
                          r.status().ToString());
  }
  // Every owner failed or is down: read the origin ourselves. A file that
  // changed at the origin fails here too (kStale), so nothing mixes versions.
  ChunkRef ref{entry, index, m.entry(entry).first_chunk() + index, chunk_len};
  Result<ChunkFiller::FillResult> f = origin_reader_.Fill(*ds.view, ref, /*cache=*/false);
  if (!f.ok()) return f.status();
  counters_.origin_bytes.fetch_add(chunk_len);
  return f->bytes;
}

Result<ChunkReader::Bytes> ChunkReader::FetchFromPeer(const proto::NodeInfo& node, uint64_t placement_epoch,
                                                      const MountedDataset& ds, uint32_t entry, uint32_t index,
                                                      uint64_t chunk_len) {
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  proto::GetChunk req{.dataset = ds.name,
                      .uid = ds.view->meta.uid,
                      .version = ds.view->meta.version,
                      .entry = entry,
                      .index = index,
                      .key_lo = key.file.lo,
                      .key_hi = key.file.hi,
                      .offset = 0,
                      .length = 0,
                      .fill = true,
                      .placement_epoch = placement_epoch};
  zmq::message_t payload;
  auto lease = peers_.Acquire(node.endpoint);
  Result<proto::ChunkData> r = lease->Call(req, options_.peer_timeout, &payload);
  if (!r.ok()) return r.status();
  if (r->placement_epoch > placement_epoch && options_.on_newer_placement) options_.on_newer_placement();
  if (r->chunk_length != chunk_len || payload.size() != chunk_len) {
    return Status::Corruption("peer " + node.name + " sent " + std::to_string(payload.size()) + " bytes of a " +
                              std::to_string(chunk_len) + "-byte chunk");
  }
  return Bytes(std::make_shared<const std::string>(static_cast<const char*>(payload.data()), payload.size()));
}

bool ChunkReader::Suspect(const std::string& endpoint, uint64_t map_epoch) {
  std::lock_guard lock(suspect_mu_);
  auto it = suspects_.find(endpoint);
  if (it == suspects_.end()) return false;
  // A newer map that still lists the node up (it re-registered after a
  // restart) is worth one more try: otherwise a node that comes back would be
  // bypassed for the rest of the suspicion, and its chunks read from the origin.
  if (std::chrono::steady_clock::now() < it->second.until && map_epoch == it->second.map_epoch) return true;
  suspects_.erase(it);
  return false;
}

void ChunkReader::MarkSuspect(const std::string& endpoint, uint64_t map_epoch) {
  std::lock_guard lock(suspect_mu_);
  suspects_[endpoint] = {std::chrono::steady_clock::now() + options_.suspect_for, map_epoch};
}

void ChunkReader::Remember(const ChunkKey& key, Bytes bytes) {
  std::lock_guard lock(cache_mu_);
  if (lru_index_.count(key) || bytes->size() > options_.memory_cache_bytes) return;
  lru_bytes_ += bytes->size();
  lru_.emplace_front(key, std::move(bytes));
  lru_index_[key] = lru_.begin();
  while (lru_bytes_ > options_.memory_cache_bytes && !lru_.empty()) {
    lru_bytes_ -= lru_.back().second->size();
    lru_index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace hoard::fuse
