#include "fuse/local_chunks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/page_cache.h"
#include "store/chunk_store.h"

namespace hoard::fuse {
namespace {

uint64_t NextReaderId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

LocalChunks::LocalChunks(Options options, ReadCounters* counters)
    : options_(std::move(options)), counters_(counters), id_(NextReaderId()) {
  if (!options_.read_tier_dir.empty() && options_.read_tier_bytes > 0) {
    Result<std::unique_ptr<ReadTier>> tier =
        ReadTier::Open(ReadTier::Options{.dir = options_.read_tier_dir,
                                         .capacity_bytes = options_.read_tier_bytes,
                                         .min_free_bytes = options_.read_tier_min_free,
                                         // On the node's disk, where it shares the agent's --capacity
                                         // (the agent counts the tier there: store/disk_usage.h).
                                         .node_usage_path =
                                             !options_.local_store.empty() &&
                                                     options_.read_tier_dir == DefaultReadTierDir(options_.local_store)
                                                 ? NodeUsagePath(options_.local_store)
                                                 : std::string(),
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
}

LocalChunks::~LocalChunks() {
  tier_.reset();  // its writer may call back into verified_
  if (int fd = chunks_dir_.load(); fd >= 0) ::close(fd);
}

int LocalChunks::ChunksDir() {
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

int LocalChunks::LocalFd(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
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

uint64_t LocalChunks::BadFingerprint(uint64_t fp, uint64_t ino) {
  const uint64_t f = Mix64(fp, ino);
  return f == 0 ? 1 : f;
}

bool LocalChunks::Recheck(const MountedDataset& ds, const ChunkKey& key, int fd, uint64_t offset, uint64_t len) {
  counters_->rechecked_ranges.fetch_add(1, std::memory_order_relaxed);
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

void LocalChunks::MarkBad(const MountedDataset& ds, const ChunkKey& key, int fd, const struct stat& st,
                          const Status& why) {
  counters_->corrupt_local_chunks.fetch_add(1, std::memory_order_relaxed);
  options_.logger->error("local chunk {} of {} is corrupt ({}); reading it elsewhere, never from this file again",
                         key.Name(), ds.name, why.ToString());
  // The bad bytes the check just read must not stay cached, where the next
  // check would find them "cached" and serve them.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  bad_.Insert(BadFingerprint(ChunkSet::Fingerprint(key), uint64_t(st.st_ino)));
  // Every thread drops its cached fds and reopens: the bad file is skipped.
  // The node agent finds out when the read falls back to it (it checks a
  // whole chunk it serves), quarantines the chunk and fetches it again.
  ForgetFds();
  // A bad copy in the tier is ours to drop, or good bytes could never replace it.
  if (tier_ != nullptr && in_tier_.Contains(ChunkSet::Fingerprint(key))) tier_->Discard(key);
}

int LocalChunks::OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index,
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

bool LocalChunks::HeldIn(int dir, const ChunkKey& key) {
  if (dir < 0) return false;
  char rel[ChunkStore::kRelativePathSize];
  ChunkStore::RelativeChunkPath(key, rel);
  return ::faccessat(dir, rel, F_OK, 0) == 0;
}

bool LocalChunks::Held(const ChunkKey& key) {
  return HeldIn(ChunksDir(), key) || (tier_ != nullptr && HeldIn(tier_->chunks_dir(), key));
}

void LocalChunks::KeepCopy(const MountedDataset& ds, const ChunkKey& key, const Bytes& bytes) {
  if (tier_ == nullptr || HeldIn(ChunksDir(), key)) return;
  tier_->Offer(key, ds.view->meta.uid, bytes);
}


LocalChunks::Bytes LocalChunks::ReadCopy(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  UniqueFd fd(OpenLocal(ds, entry, index, key));
  if (!fd.valid()) return nullptr;
  auto local = std::make_shared<std::string>(ChunkLength(ds.manifest().entry(entry).size,
                                                         ds.manifest().chunk_size(), index), '\0');
  struct stat st;
  Result<ChunkMeta> meta = ::fstat(fd.get(), &st) == 0 ? ReadChunkMeta(fd.get(), uint64_t(st.st_size))
                                                       : Result<ChunkMeta>(Status::FromErrno(errno, "stat"));
  if (!meta.ok() || !PreadAll(fd.get(), local->data(), local->size(), 0).ok()) return nullptr;
  // Checked in the buffer it is served from, as the agent does.
  if (Checksum64(local->data(), local->size()) != meta->checksum) {
    MarkBad(ds, key, fd.get(), st, Status::Corruption("chunk data does not match its checksum"));
    return nullptr;
  }
  counters_->local_bytes.fetch_add(local->size(), std::memory_order_relaxed);
  return local;
}

}  // namespace hoard::fuse
