#include "fuse/chunk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/hash.h"
#include "common/page_cache.h"
#include "fuse/local_fds.h"
#include "store/chunk_file.h"
#include "store/chunk_store.h"

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
      id_(NextReaderId()),
      streams_(kStreamSlots),
      hedger_(Hedger::Options{
          .latency = options_.hedge,
          .health = {.suspect_for = options_.suspect_for, .slow_after = options_.slow_after},
          // Requests waiting out a stopped peer keep their threads (up to
          // peer_timeout), so new ones must not queue behind them.
          .pool = {.max_threads = 256, .keep_idle = 32},
          .on_slow_suspect = [logger = options_.logger, suspect_for = options_.suspect_for,
                              slow_after = options_.slow_after](const std::string& peer) {
            logger->warn("peer {} left {} chunk requests in a row unanswered past their hedge delay; skipping it "
                         "for {} ms",
                         peer, slow_after, suspect_for.count());
          }}) {
  // Read-ahead must leave room in the memory cache for what readers use.
  options_.readahead_max_bytes = std::min(options_.readahead_max_bytes, options_.memory_cache_bytes / 2);
  if (!options_.read_tier_dir.empty() && options_.read_tier_bytes > 0) {
    Result<std::unique_ptr<ReadTier>> tier =
        ReadTier::Open(ReadTier::Options{.dir = options_.read_tier_dir,
                                         .capacity_bytes = options_.read_tier_bytes,
                                         .min_free_bytes = options_.read_tier_min_free,
                                         .logger = options_.logger,
                                         .on_stored = [this](const ChunkKey& key) {
                                           const uint64_t fp = ChunkSet::Fingerprint(key);
                                           verified_.Insert(fp);
                                           in_tier_.Insert(fp);
                                         }});
    if (tier.ok()) {
      tier_ = std::move(*tier);
    } else {
      options_.logger->warn("no read tier: {}", tier.status().ToString());
    }
  }
  if (options_.readahead_chunks != 0) {
    for (int i = 0; i < options_.readahead_threads; ++i) ahead_threads_.emplace_back([this] { AheadLoop(); });
  }
}

ChunkReader::~ChunkReader() {
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyAll();
  for (std::thread& t : ahead_threads_) t.join();
  tier_.reset();  // its writer may call back into verified_
  if (int fd = chunks_dir_.load(); fd >= 0) ::close(fd);
}

uint32_t ChunkReader::ReadaheadChunks(uint64_t chunk_size) const {
  if (options_.readahead_chunks == 0 || ahead_threads_.empty() || chunk_size == 0) return 0;
  if (options_.readahead_chunks > 0) return static_cast<uint32_t>(options_.readahead_chunks);
  constexpr uint64_t kAutoBytes = 16u << 20;
  constexpr uint64_t kAutoMaxChunks = 64;  // small chunks: 16 MiB would be hundreds of requests
  return static_cast<uint32_t>(std::clamp<uint64_t>(kAutoBytes / chunk_size, 4, kAutoMaxChunks));
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
  if (options_.local_store.empty() && tier_ == nullptr) return -1;
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  LocalFds& fds = LocalFds::ForThisThread();
  const uint64_t generation = generation_.load(std::memory_order_relaxed);
  int fd = fds.Find(id_, generation, key, deferred);
  if (fd < 0) {
    fd = OpenLocal(ds, entry, index, key);
    if (fd < 0) return -1;
    fds.Put(id_, key, fd, deferred);
  }
  const uint64_t want = ChunkLength(ds.manifest().entry(entry).size, ds.manifest().chunk_size(), index);
  if (offset >= want) return fd;
  // Bytes checked once stay right only while they stay in the page cache;
  // a page that left it comes from the disk again, which may have rotted
  // since (common/page_cache.h). The whole chunk, not just this range: a
  // read of the range brings neighbouring pages in by read-ahead, unchecked,
  // so "this range is cached" does not mean "these bytes were checked".
  // Checking the whole chunk whenever any page of it is missing leaves every
  // page in the cache a checked one (the check's reads are what cached
  // them), until one is dropped again.
  // Cached pages count only while no check of this chunk is reading them
  // in (it may yet find them bad; its stripe is raised until it decided and,
  // if bad, dropped them) and no file was marked bad since this call began
  // (generation_). Checked in that order: a check that starts after this
  // test brings nothing in that the test saw.
  Result<bool> cached = FullyCached(fd, 0, want);
  if (cached.ok() && *cached && checking_[CheckStripe(key)].load() == 0 && generation_.load() == generation) {
    return fd;
  }
  return Recheck(ds, key, fd, 0, want) ? fd : -1;
}

uint64_t ChunkReader::BadFingerprint(uint64_t fp, uint64_t ino) {
  const uint64_t f = Mix64(fp, ino);
  return f == 0 ? 1 : f;
}

bool ChunkReader::Recheck(const MountedDataset& ds, const ChunkKey& key, int fd, uint64_t offset, uint64_t len) {
  counters_.rechecked_ranges.fetch_add(1, std::memory_order_relaxed);
  // Raised while this check reads the chunk in and until a bad file was
  // marked and its pages dropped (LocalFd trusts no cached page meanwhile).
  std::atomic<uint32_t>& stripe = checking_[CheckStripe(key)];
  stripe.fetch_add(1);
  struct Lower {
    std::atomic<uint32_t>& s;
    ~Lower() { s.fetch_sub(1); }
  } lower{stripe};
  constexpr size_t kScratch = 256 << 10;
  thread_local std::unique_ptr<char[]> scratch(new char[kScratch]);
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  Result<ChunkMeta> m = ReadChunkMeta(fd, uint64_t(st.st_size));
  const Status v = m.ok() ? VerifyChunkRange(fd, *m, offset, len, scratch.get(), kScratch) : m.status();
  if (v.ok()) return true;
  if (v.code() != Code::kCorruption) {
    options_.logger->warn("local chunk {} of {} cannot be checked ({}); reading it elsewhere", key.Name(), ds.name,
                          v.ToString());
    return false;
  }
  MarkBad(ds, key, fd, st, v);
  return false;
}

void ChunkReader::MarkBad(const MountedDataset& ds, const ChunkKey& key, int fd, const struct stat& st,
                          const Status& why) {
  counters_.corrupt_local_chunks.fetch_add(1, std::memory_order_relaxed);
  options_.logger->error("local chunk {} of {} is corrupt ({}); reading it elsewhere, never from this file again",
                         key.Name(), ds.name, why.ToString());
  // The bad bytes the check just read must not stay cached, where the next
  // check would find them "cached" and serve them.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  bad_.Insert(BadFingerprint(ChunkSet::Fingerprint(key), uint64_t(st.st_ino)));
  // Every thread drops its cached fds and reopens: the bad file is skipped.
  // The node agent finds out when the read falls back to it (it checks a
  // whole chunk it serves), quarantines the chunk and fetches it again.
  ForgetLocalFds();
  // A bad copy in the tier is ours to drop, or good bytes could never replace it.
  if (tier_ != nullptr && in_tier_.Contains(ChunkSet::Fingerprint(key))) tier_->Discard(key);
}

int ChunkReader::OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index,
                           const ChunkKey& key) {
  char rel[ChunkStore::kRelativePathSize];
  ChunkStore::RelativeChunkPath(key, rel);
  const uint64_t fp = ChunkSet::Fingerprint(key);
  // The node agent's own chunk first, then a copy in the read tier; the
  // other way round for a chunk last found in the tier.
  int dirs[2] = {ChunksDir(), tier_ != nullptr ? tier_->chunks_dir() : -1};
  const bool tier_first = dirs[1] >= 0 && in_tier_.Contains(fp);
  if (tier_first) std::swap(dirs[0], dirs[1]);
  UniqueFd fd;
  int from = -1;
  struct stat st;
  for (int dir : dirs) {
    if (dir < 0) continue;
    fd = UniqueFd(::openat(dir, rel, O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    if (::fstat(fd.get(), &st) != 0) return -1;
    // A file this mount found corrupt is never served again (the agent
    // replaces it with a new file, which gets a new inode).
    if (bad_.Contains(BadFingerprint(fp, uint64_t(st.st_ino)))) {
      fd.Reset();
      continue;
    }
    from = dir;
    break;
  }
  if (!fd.valid()) return -1;
  if (!tier_first && tier_ != nullptr && from == tier_->chunks_dir()) in_tier_.Insert(fp);
  const uint64_t want = ChunkLength(ds.manifest().entry(entry).size, ds.manifest().chunk_size(), index);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // A chunk this mount verified before: its file is immutable once renamed
  // into place, so the size check is all that is left here; LocalFd checks
  // the bytes again if any page of them left the page cache. (No read-ahead
  // hint: pages it brought in would be taken for checked ones. The check's
  // own pass over the chunk is its read-ahead.)
  // (Either layout: the store may have moved the trailer to the xattr since.)
  if ((size == want || size == want + kChunkMetaSize) && verified_.Contains(fp)) return fd.Release();

  // First use in this mount: one pass over the file checks the record and the
  // bytes (and leaves them in the page cache for the reply). Readers of the
  // same chunk share one check. A chunk that fails is left for the node
  // agent, which verifies before serving and drops it; we read from the next
  // source.
  Result<ChunkMeta> t = verify_flights_.Do(key, [&]() -> Result<ChunkMeta> {
    if (verified_.Contains(fp)) return ReadChunkMeta(fd.get(), size);
    constexpr size_t kScratch = 256 << 10;
    thread_local std::unique_ptr<char[]> scratch(new char[kScratch]);
    return ReadAndVerifyChunkFile(fd.get(), size, scratch.get(), kScratch);
  });
  if (!t.ok() || t->length != want) {
    const Status why = t.ok() ? Status::Corruption("wrong length") : t.status();
    if (why.code() == Code::kCorruption) {
      MarkBad(ds, key, fd.get(), st, why);
      if (tier_ != nullptr && from == tier_->chunks_dir()) tier_->Discard(key);
    } else {
      options_.logger->warn("local chunk {} of {} cannot be read ({}); reading it elsewhere", key.Name(), ds.name,
                            why.ToString());
    }
    return -1;
  }
  verified_.Insert(fp);
  return fd.Release();
}

ChunkReader::Bytes ChunkReader::LookupLocked(const ChunkKey& key) {
  auto hit = lru_index_.find(key);
  if (hit == lru_index_.end()) return nullptr;
  Cached& c = *hit->second;
  CacheList& from = c.ahead ? ahead_ : lru_;
  if (c.ahead) {
    // The first read of a chunk read ahead: from now on an ordinary entry.
    c.ahead = false;
    ahead_bytes_ -= c.bytes->size();
    lru_bytes_ += c.bytes->size();
    counters_.readahead_used.fetch_add(1, std::memory_order_relaxed);
  }
  lru_.splice(lru_.begin(), from, hit->second);
  return c.bytes;
}

Result<ChunkReader::Bytes> ChunkReader::FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  {
    MutexLock lock(&cache_mu_);
    if (Bytes b = LookupLocked(key)) return b;
  }
  auto fetch = [&]() -> Fetched {
    {
      // A transfer (a read-ahead) that ended between the lookup above and
      // this flight left the chunk in the cache: no second fetch.
      MutexLock lock(&cache_mu_);
      if (Bytes b = LookupLocked(key)) return {b};
    }
    {
      // So may one that had this node's agent store the chunk (it keeps no
      // copy in memory then): read that copy, not the network.
      // (Its own fd: one from the thread's cache could evict an fd that
      // the request calling us has queued for its reply.)
      if (UniqueFd fd(OpenLocal(ds, entry, index, key)); fd.valid()) {
        auto local = std::make_shared<std::string>(ChunkLength(ds.manifest().entry(entry).size,
                                                               ds.manifest().chunk_size(), index), '\0');
        struct stat st;
        Result<ChunkMeta> meta = ::fstat(fd.get(), &st) == 0 ? ReadChunkMeta(fd.get(), uint64_t(st.st_size))
                                                             : Result<ChunkMeta>(Status::FromErrno(errno, "stat"));
        if (meta.ok() && PreadAll(fd.get(), local->data(), local->size(), 0).ok()) {
          // Checked in the buffer it is served from, as the agent does.
          if (Checksum64(local->data(), local->size()) == meta->checksum) {
            counters_.local_bytes.fetch_add(local->size(), std::memory_order_relaxed);
            return {Bytes(std::move(local))};
          }
          MarkBad(ds, key, fd.get(), st, Status::Corruption("chunk data does not match its checksum"));
        }
      }
    }
    Result<Bytes> f = FetchUncached(ds, entry, index, /*ahead=*/false);
    if (f.ok()) {
      Remember(key, *f, /*ahead=*/false);
      KeepCopy(ds, key, *f);
    }
    return {std::move(f)};
  };
  bool leader = false;
  Fetched fetched = flights_.Do(key, fetch, &leader);
  // We joined a read-ahead transfer, which gives up where a demand read goes
  // on (it never reads the origin itself): try again as our own. The retry
  // may join the next read-ahead of the same chunk, so after a few such
  // joins the demand read fetches on its own, outside the flight. A failed
  // demand transfer is the answer for everyone who joined it.
  for (int joins = 1; !fetched.bytes.ok() && fetched.ahead; ++joins) {
    if (joins == 3) return fetch().bytes;
    fetched = flights_.Do(key, fetch, &leader);
  }
  Result<Bytes> r = std::move(fetched.bytes);
  if (!leader && r.ok()) {
    // We joined another transfer, maybe a read-ahead one, which left the
    // chunk among those read ahead: it is used now.
    MutexLock lock(&cache_mu_);
    (void)LookupLocked(key);
  }
  return r;
}

namespace {

// What makes an answer good: the whole chunk, no more, no less. (Replies are
// authenticated per message and matched to their request by id; the manifest
// records no checksum per chunk to check the bytes against.)
std::function<Status(const ChunkReader::Bytes&)> ChunkLengthIs(uint64_t chunk_len) {
  return [chunk_len](const ChunkReader::Bytes& b) -> Status {
    if (b != nullptr && b->size() == chunk_len) return Status::Ok();
    return Status::Corruption("got " + std::to_string(b == nullptr ? 0 : b->size()) + " bytes of a " +
                              std::to_string(chunk_len) + "-byte chunk");
  };
}

}  // namespace

Result<ChunkReader::Bytes> ChunkReader::FetchUncached(const MountedDataset& ds, uint32_t entry, uint32_t index,
                                                      bool ahead) {
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
  if (ahead) return FetchAheadFromOwners(ds, view, owners, entry, index, chunk_len);
  // Up owners first, in rank order; down ones are not tried at all, suspect
  // ones are skipped by the Hedger. Then the origin, read by ourselves: a
  // file that changed at the origin fails there too (kStale), so nothing
  // mixes versions.
  std::vector<Hedger::Source<Bytes>> sources;
  for (uint32_t o : owners) {
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

Result<ChunkReader::Bytes> ChunkReader::FetchAheadFromOwners(const MountedDataset& ds,
                                                             const std::shared_ptr<const ClusterView>& view,
                                                             const std::vector<uint32_t>& owners, uint32_t entry,
                                                             uint32_t index, uint64_t chunk_len) {
  // First every up owner that already holds the chunk: after a membership
  // change the first owner in rank order may be a new one that does not hold
  // it yet, and asking it to fill would read the origin (or a peer) for a
  // chunk a surviving replica can send at once. Read-ahead gives up once the
  // owners it asked are all overdue: they are skipped from then on, and the
  // demand read that follows goes to the next source at once.
  std::vector<Hedger::Source<Bytes>> holders;
  std::vector<uint32_t> asked;
  for (uint32_t o : owners) {
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

Hedger::Source<ChunkReader::Bytes> ChunkReader::PeerRequest(const MountedDataset& ds,
                                                            std::shared_ptr<const ClusterView> view, uint32_t node,
                                                            uint32_t entry, uint32_t index, uint64_t chunk_len,
                                                            bool fill, bool demand) {
  const proto::NodeInfo& n = view->node(node);
  Hedger::Source<Bytes> source{.peer = n.endpoint, .map_epoch = view->epoch()};
  source.fetch = [this, &ds, view = std::move(view), node, entry, index, chunk_len, fill, demand]() -> Result<Bytes> {
    const proto::NodeInfo& n = view->node(node);
    Result<Bytes> r = FetchFromPeer(n, view->map().placement_epoch, ds, entry, index, chunk_len, fill);
    if (!r.ok() && demand) {
      counters_.peer_failures.fetch_add(1);
      options_.logger->warn("chunk {} of {} from {}: {}", ds.manifest().chunk_key(entry, index).Name(), ds.name,
                            n.name, r.status().ToString());
    }
    return r;
  };
  return source;
}

void ChunkReader::CountFetched(uint64_t chunk_len, bool origin) {
  (origin ? counters_.origin_bytes : counters_.peer_bytes).fetch_add(chunk_len);
  counters_.remote_fetches.fetch_add(1, std::memory_order_relaxed);
}

Result<ChunkReader::Bytes> ChunkReader::FetchFromPeer(const proto::NodeInfo& node, uint64_t placement_epoch,
                                                      const MountedDataset& ds, uint32_t entry, uint32_t index,
                                                      uint64_t chunk_len, bool fill) {
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
                      .fill = fill,
                      .placement_epoch = placement_epoch};
  zmq::message_t payload;
  auto lease = peers_.Acquire(node.endpoint);
  metrics::ScopedTimer timer(&peer_latency_);
  Result<proto::ChunkData> r = lease->Call(req, options_.peer_timeout, &payload);
  // An owner whose request queue is full answers busy at once: it is alive
  // and holds the chunk, so ask again shortly rather than mark it suspect and
  // read the origin instead. (Not an owner that answered Unavailable itself,
  // from its own read of the origin: asking again would read it again.)
  for (int retry = 0; retry < 5 && !r.ok() && lease->last_call_busy(); ++retry) {
    options_.clock->SleepFor(std::chrono::milliseconds(10 << retry));
    r = lease->Call(req, options_.peer_timeout, &payload);
  }
  if (!r.ok()) {
    // Only a peer that did not answer at all is suspect.
    if (!lease->last_call_answered()) return Status::Unavailable(r.status().message());
    return r.status().code() == Code::kUnavailable ? Status::IoError(r.status().message()) : r.status();
  }
  if (r->placement_epoch > placement_epoch && options_.on_newer_placement) options_.on_newer_placement();
  if (r->chunk_length != chunk_len || payload.size() != chunk_len) {
    return Status::Corruption("peer " + node.name + " sent " + std::to_string(payload.size()) + " bytes of a " +
                              std::to_string(chunk_len) + "-byte chunk");
  }
  return Bytes(std::make_shared<const std::string>(static_cast<const char*>(payload.data()), payload.size()));
}

void ChunkReader::Remember(const ChunkKey& key, Bytes bytes, bool ahead) {
  MutexLock lock(&cache_mu_);
  if (lru_index_.count(key) || bytes->size() > options_.memory_cache_bytes) return;
  const auto now = options_.clock->Now();
  const size_t size = bytes->size();
  if (ahead) {
    ahead_bytes_ += size;
    ahead_.push_back(Cached{key, std::move(bytes), true, now});
    lru_index_[key] = std::prev(ahead_.end());
  } else {
    lru_bytes_ += size;
    lru_.push_front(Cached{key, std::move(bytes), false, now});
    lru_index_[key] = lru_.begin();
  }
  ExpireAheadLocked(now);
  EvictLocked();
}

void ChunkReader::EvictLocked() {
  // Ordinary entries go first; chunks read ahead only when nothing else is
  // left (they are at most readahead_max_bytes, half the cache at most).
  while (lru_bytes_ + ahead_bytes_ > options_.memory_cache_bytes) {
    if (!lru_.empty()) {
      lru_bytes_ -= lru_.back().bytes->size();
      lru_index_.erase(lru_.back().key);
      lru_.pop_back();
    } else if (!ahead_.empty()) {
      ahead_bytes_ -= ahead_.front().bytes->size();
      lru_index_.erase(ahead_.front().key);
      ahead_.pop_front();
      counters_.readahead_unused.fetch_add(1, std::memory_order_relaxed);
    } else {
      break;
    }
  }
}

void ChunkReader::ExpireAheadLocked(std::chrono::steady_clock::time_point now) {
  while (!ahead_.empty() && now - ahead_.front().fetched > options_.readahead_ttl) {
    Cached& c = ahead_.front();
    c.ahead = false;
    ahead_bytes_ -= c.bytes->size();
    lru_bytes_ += c.bytes->size();
    counters_.readahead_unused.fetch_add(1, std::memory_order_relaxed);
    lru_.splice(lru_.end(), ahead_, ahead_.begin());  // the next to be evicted
  }
}

bool ChunkReader::HeldIn(int dir, const ChunkKey& key) {
  if (dir < 0) return false;
  char rel[ChunkStore::kRelativePathSize];
  ChunkStore::RelativeChunkPath(key, rel);
  return ::faccessat(dir, rel, F_OK, 0) == 0;
}

bool ChunkReader::HeldLocally(const ChunkKey& key) {
  return HeldIn(ChunksDir(), key) || (tier_ != nullptr && HeldIn(tier_->chunks_dir(), key));
}

void ChunkReader::KeepCopy(const MountedDataset& ds, const ChunkKey& key, const Bytes& bytes) {
  if (tier_ == nullptr || HeldIn(ChunksDir(), key)) return;
  tier_->Offer(key, ds.view->meta.uid, bytes);
}

// ---------------------------------------------------------------------------
// Read-ahead

void ChunkReader::NoteRead(const MountedDataset& ds, uint32_t entry, uint64_t offset, uint64_t end) {
  const Manifest& m = ds.manifest();
  const uint64_t chunk_size = m.chunk_size();
  const auto chunks = static_cast<uint32_t>(m.chunk_count(entry));
  const uint32_t depth = ReadaheadChunks(chunk_size);
  if (chunks <= 1 || depth == 0 || end <= offset) return;
  const uint64_t stream = StreamKey(ds, entry);
  const auto last = static_cast<uint32_t>((end - 1) / chunk_size);  // the last chunk this read touches
  const uint64_t slack = options_.sequential_slack;
  uint32_t from = 0, to = 0;
  bool turned_random = false;
  {
    MutexLock lock(&streams_mu_);
    Stream& s = streams_[Mix64(stream, 0x5eed) % kStreamSlots];
    if (s.stream != stream) {
      s = Stream{.stream = stream, .end = end, .streak = 0, .ahead_to = last + 1};
      return;
    }
    if (offset <= s.end + slack && end + slack >= s.end) {
      // Near where the reads ended: sequential, and progress if it goes
      // further (a late request of the same window, or another reader of
      // the same bytes, is neither progress nor a jump).
      if (end > s.end) {
        ++s.streak;
        s.end = end;
      }
    } else {
      turned_random = s.streak >= kSequentialReads;
      s.streak = 0;
      s.end = end;
      s.ahead_to = last + 1;
    }
    if (s.streak >= kSequentialReads) {
      from = std::max(s.ahead_to, last + 1);
      to = static_cast<uint32_t>(std::min<uint64_t>(chunks, uint64_t(last) + 1 + depth));
      if (from < to) s.ahead_to = to;
    }
  }
  if (turned_random) DropAhead(stream, m.chunk_key(entry, 0).file);
  if (from >= to) return;
  const uint32_t stopped = QueueAhead(ds, entry, stream, from, to);
  if (stopped < to) {
    // Out of budget: the next read of the file tries again from there.
    MutexLock lock(&streams_mu_);
    Stream& s = streams_[Mix64(stream, 0x5eed) % kStreamSlots];
    if (s.stream == stream) s.ahead_to = std::min(s.ahead_to, stopped);
  }
}

uint32_t ChunkReader::QueueAhead(const MountedDataset& ds, uint32_t entry, uint64_t stream, uint32_t from,
                                 uint32_t to) {
  const Manifest& m = ds.manifest();
  const uint64_t file_size = m.entry(entry).size;
  std::vector<AheadTask> tasks;
  uint32_t c = from;
  for (; c < to; ++c) {
    const ChunkKey key = m.chunk_key(entry, c);
    if (HeldLocally(key)) continue;  // read from the store directly
    const uint64_t len = ChunkLength(file_size, m.chunk_size(), c);
    MutexLock lock(&cache_mu_);
    if (lru_index_.count(key) || ahead_pending_.count(key)) continue;
    if (ahead_bytes_ + ahead_pending_bytes_ + len > options_.readahead_max_bytes) {
      ExpireAheadLocked(options_.clock->Now());
      if (ahead_bytes_ + ahead_pending_bytes_ + len > options_.readahead_max_bytes) break;
    }
    ahead_pending_.insert(key);
    ahead_pending_bytes_ += len;
    tasks.push_back(AheadTask{&ds, entry, c, stream, key, len});
  }
  if (!tasks.empty()) {
    {
      MutexLock lock(&queue_mu_);
      for (AheadTask& t : tasks) queue_.push_back(t);
    }
    queue_cv_.NotifyAll();
  }
  return c;
}

void ChunkReader::DropAhead(uint64_t stream, const FileKey& file) {
  std::vector<AheadTask> dropped;
  {
    MutexLock lock(&queue_mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->stream == stream) {
        dropped.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  MutexLock lock(&cache_mu_);
  for (const AheadTask& t : dropped) {
    ahead_pending_.erase(t.key);
    ahead_pending_bytes_ -= t.len;
  }
  counters_.readahead_unused.fetch_add(dropped.size(), std::memory_order_relaxed);
  // What was already read ahead for it ages like any other entry.
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    auto next = std::next(it);
    if (it->key.file == file) {
      it->ahead = false;
      ahead_bytes_ -= it->bytes->size();
      lru_bytes_ += it->bytes->size();
      counters_.readahead_unused.fetch_add(1, std::memory_order_relaxed);
      lru_.splice(lru_.end(), ahead_, it);
    }
    it = next;
  }
}

void ChunkReader::AheadLoop() {
  for (;;) {
    AheadTask task;
    {
      MutexLock lock(&queue_mu_);
      while (!stopping_ && queue_.empty()) queue_cv_.Wait(&queue_mu_);
      if (stopping_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    FetchAhead(task);
    MutexLock lock(&cache_mu_);
    ahead_pending_.erase(task.key);
    ahead_pending_bytes_ -= task.len;
  }
}

void ChunkReader::FetchAhead(const AheadTask& task) {
  // A demand read may have fetched it meanwhile, or the node agent stored it.
  {
    MutexLock lock(&cache_mu_);
    if (lru_index_.count(task.key)) return;
  }
  if (HeldLocally(task.key)) return;
  counters_.readahead_chunks.fetch_add(1, std::memory_order_relaxed);
  bool transferred = false;  // by this read-ahead (only a flight's leader runs `fetch`)
  auto fetch = [&]() -> Fetched {
    {
      // A demand read that ended between the check above and this flight
      // left the chunk in the cache: no second transfer.
      MutexLock lock(&cache_mu_);
      if (auto hit = lru_index_.find(task.key); hit != lru_index_.end()) return {hit->second->bytes, /*ahead=*/true};
    }
    transferred = true;
    Result<Bytes> f = FetchUncached(*task.ds, task.entry, task.index, /*ahead=*/true);
    // This node's own agent may have stored it while serving us (it owns
    // it): the demand read will open the file, so keep no second copy.
    if (f.ok() && !HeldLocally(task.key)) {
      Remember(task.key, *f, /*ahead=*/true);
      KeepCopy(*task.ds, task.key, *f);
    }
    return {std::move(f), /*ahead=*/true};
  };
  Result<Bytes> r = flights_.Do(task.key, fetch).bytes;
  // Bytes a demand read fetched, which this read-ahead merely joined or
  // found cached, are not read-ahead bytes.
  if (r.ok()) {
    if (transferred) counters_.readahead_bytes.fetch_add((*r)->size(), std::memory_order_relaxed);
  } else {
    // Silent: the demand read of the chunk tries again, and reports.
    counters_.readahead_failures.fetch_add(1, std::memory_order_relaxed);
    options_.logger->debug("read-ahead of {} of {}: {}", task.key.Name(), task.ds->name, r.status().ToString());
  }
}

}  // namespace hoard::fuse
