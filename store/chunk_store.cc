#include "store/chunk_store.h"

#include <cstdio>

#include <sys/file.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/page_cache.h"

namespace hoard {
namespace {

// A chunk file's record, held to what the index says of it: Corruption if
// the length, checksum or dataset differ (another error if it cannot be read).
Result<ChunkMeta> MatchingRecord(int fd, uint64_t length, uint64_t checksum, uint64_t dataset_uid) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat");
  Result<ChunkMeta> t = ReadChunkMeta(fd, static_cast<uint64_t>(st.st_size));
  if (t.ok() && (t->length != length || t->checksum != checksum || t->dataset_uid != dataset_uid)) {
    return Status::Corruption("chunk record changed since it was indexed");
  }
  return t;
}

namespace fs = std::filesystem;

// A Read that keeps losing the race against Remove + Put of its chunk gives
// up rather than spin; each lost round means the chunk was replaced, which
// takes a whole Put, so reaching this limit means something is badly wrong.
constexpr int kMaxReadAttempts = 8;

// Distinguishes the .tmp files of concurrent Puts of the same chunk (there
// are none within one store, but a second store on the same directory, e.g.
// in a test, must not write into our temporary file).
std::atomic<uint64_t> g_tmp_counter{0};

constexpr std::string_view kTmpSuffix = ".tmp";
// Chunks from this size on claim their blocks before they are written.
constexpr uint64_t kFallocateMin = 1 << 20;

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool ParseHex(std::string_view s, uint64_t* out) {
  uint64_t v = 0;
  for (char c : s) {
    if (!IsLowerHex(c)) return false;
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *out = v;
  return true;
}

// Inverse of ChunkKey::Name(): "<32 hex digits of file, hi first>-<8 hex
// digits of index>". The caller also checks key.Name() == name, so a change
// of the name format makes Open skip files instead of indexing wrong keys.
std::optional<ChunkKey> ParseChunkName(std::string_view name) {
  if (name.size() != 32 + 1 + 8 || name[32] != '-') return std::nullopt;
  ChunkKey key;
  uint64_t index = 0;
  if (!ParseHex(name.substr(0, 16), &key.file.hi) || !ParseHex(name.substr(16, 16), &key.file.lo) ||
      !ParseHex(name.substr(33, 8), &index)) {
    return std::nullopt;
  }
  key.index = static_cast<uint32_t>(index);
  return key;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Reads up to `len` bytes at `offset`, stopping early only at end of file.
Result<size_t> PreadUpTo(int fd, char* buf, size_t len, uint64_t offset) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "pread");
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

ChunkStore::ChunkStore(Options options)
    : options_(std::move(options)), quarantine_(JoinPath(options_.dir, "quarantine")) {}

Result<std::unique_ptr<ChunkStore>> ChunkStore::Open(Options options) {
  if (!options.logger) return Status::InvalidArgument("chunk store: Options.logger is required");
  if (options.dir.empty()) return Status::InvalidArgument("chunk store: Options.dir is empty");
  std::unique_ptr<ChunkStore> store(new ChunkStore(std::move(options)));
  HOARD_RETURN_IF_ERROR(store->Load().Annotate("open chunk store " + store->dir()));
  return store;
}

std::string ChunkStore::ChunkPath(std::string_view dir, const ChunkKey& key) {
  char rel[kRelativePathSize];
  RelativeChunkPath(key, rel);
  return JoinPath(JoinPath(dir, "chunks"), rel);
}

void ChunkStore::RelativeChunkPath(const ChunkKey& key, char (&out)[kRelativePathSize]) {
  // Same spelling as ChunkKey::Name(), prefixed by its first two digits.
  std::snprintf(out, kRelativePathSize, "%02x/%016llx%016llx-%08x", static_cast<unsigned>(key.file.hi >> 56),
                static_cast<unsigned long long>(key.file.hi), static_cast<unsigned long long>(key.file.lo),
                static_cast<unsigned>(key.index));
}

Status ChunkStore::Load() {
  // No other thread can see the store yet: mu_ is never contended here, and
  // holding it through the scan's I/O lets the compiler check the index's rule.
  MutexLock lock(&mu_);
  spdlog::logger& log = *options_.logger;
  const std::string chunks_dir = JoinPath(options_.dir, "chunks");
  HOARD_RETURN_IF_ERROR(MakeDirs(chunks_dir));
  // One store per directory: a second agent on the same disk would double
  // count usage and race on every chunk. The lock dies with the process.
  HOARD_ASSIGN_OR_RETURN(lock_fd_, LockFile(JoinPath(options_.dir, "LOCK"), "the chunk store " + options_.dir));
  HOARD_ASSIGN_OR_RETURN(layout_, ProbeChunkLayout(options_.dir));
  if (layout_ == ChunkLayout::kTrailer) {
    log.warn("chunk store {}: the filesystem takes no user xattrs; chunk files keep their record in a trailer, "
             "and the mount reads them without kernel passthrough",
             options_.dir);
  }
  uint64_t converted = 0;

  std::error_code ec;
  std::vector<std::string> subdirs;
  for (fs::directory_iterator it(chunks_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.size() == 2 && IsLowerHex(name[0]) && IsLowerHex(name[1]) && it->is_directory(type_ec)) {
      subdirs.push_back(std::move(name));
    } else {
      log.warn("chunk store {}: ignoring {}, which is not a chunk directory", options_.dir, it->path().string());
    }
  }
  if (ec) return Status::FromErrno(ec.value(), "list " + chunks_dir);

  for (const std::string& hh : subdirs) {
    const std::string sub = JoinPath(chunks_dir, hh);
    for (fs::directory_iterator it(sub, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const std::string path = it->path().string();
      if (EndsWith(name, kTmpSuffix)) {
        // A Put that was cut short (crash, kill): its chunk was never stored.
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          log.warn("chunk store {}: cannot remove leftover {}: {}", options_.dir, path,
                   Status::FromErrno(errno, "unlink").message());
        } else {
          log.warn("chunk store {}: removed leftover temporary file {}", options_.dir, path);
        }
        continue;
      }
      std::optional<ChunkKey> key = ParseChunkName(name);
      if (!key || key->Name() != name || name.compare(0, 2, hh) != 0) {
        // Not something this store wrote; leave it for a human to look at.
        log.warn("chunk store {}: ignoring {}, which is not named like a chunk", options_.dir, path);
        continue;
      }
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      struct stat st;
      if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        log.warn("chunk store {}: ignoring {}: {}", options_.dir, path,
                 Status::FromErrno(errno, "open").message());
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        log.warn("chunk store {}: ignoring {}, which is not a regular file", options_.dir, path);
        continue;
      }
      Result<ChunkMeta> meta = ReadChunkMeta(fd.get(), static_cast<uint64_t>(st.st_size));
      if (!meta.ok()) {
        if (meta.status().code() != Code::kCorruption) {
          // An I/O error says nothing about the file's content: keep it on
          // disk (unindexed) rather than delete a possibly good chunk.
          log.warn("chunk store {}: ignoring {}: {}", options_.dir, path, meta.status().ToString());
          continue;
        }
        fd.Reset();
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          log.warn("chunk store {}: {} has a bad record ({}) and cannot be removed: {}", options_.dir, path,
                   meta.status().message(), Status::FromErrno(errno, "unlink").message());
        } else {
          log.warn("chunk store {}: removed {}: {}", options_.dir, path, meta.status().message());
        }
        continue;
      }
      if (meta->layout == ChunkLayout::kTrailer && layout_ == ChunkLayout::kXattr) {
        // A file of the first format (or a conversion cut short): move its
        // record to the xattr, so the mount may hand the file to the kernel.
        // One that cannot be converted is still good as it is.
        if (Status c = MoveTrailerToXattr(fd.get(), path, *meta); c.ok()) {
          meta->layout = ChunkLayout::kXattr;
          ++converted;
        } else {
          log.warn("chunk store {}: keeping the trailer of {}: {}", options_.dir, path, c.ToString());
        }
      }
      const Entry e = MakeEntry(*meta, next_generation_++);
      index_[*key] = e;
      used_bytes_ += e.file_bytes();
    }
    if (ec) return Status::FromErrno(ec.value(), "list " + sub);
  }

  if (options_.capacity_bytes > 0 && used_bytes_ > options_.capacity_bytes) {
    log.warn("chunk store {} holds {} bytes, more than its capacity of {}; Puts fail until chunks are removed",
             options_.dir, used_bytes_, options_.capacity_bytes);
  }
  if (converted > 0) log.info("chunk store {}: moved the trailers of {} chunk files to xattrs", options_.dir, converted);
  log.info("chunk store {} opened: {} chunks, {} bytes", options_.dir, index_.size(), used_bytes_);
  return Status::Ok();
}

ChunkStore::Entry ChunkStore::MakeEntry(const ChunkMeta& m, uint64_t generation) {
  Entry e;
  e.dataset_uid = m.dataset_uid;
  e.length = m.length;
  e.checksum = m.checksum;
  e.trailer = m.layout == ChunkLayout::kTrailer;
  e.verified = false;
  e.generation = generation;
  return e;
}

Status ChunkStore::StoreError(const Status& s) const {
  if (s.code() == Code::kNoSpace) return Status::NoSpace("chunk store " + options_.dir + " is full: " + s.message());
  return s.Annotate("chunk store " + options_.dir);
}

Status ChunkStore::Put(const ChunkKey& key, uint64_t dataset_uid, std::string_view data) {
  const uint64_t need = data.size() + (layout_ == ChunkLayout::kTrailer ? kChunkMetaSize : 0);
  {
    MutexLock lock(&mu_);
    // A Put or Remove of this key is touching its file: wait, so that OK
    // always means "stored" and two writers never race on one path.
    while (busy_.contains(key)) busy_cv_.Wait(&mu_);
    if (index_.contains(key)) return Status::Ok();
    const uint64_t cap = options_.capacity_bytes;
    // Reserving before any byte is written is what keeps concurrent Puts from
    // all seeing room for themselves and overshooting together.
    if (cap > 0 && (need > cap || used_bytes_ + reserved_bytes_ + other_bytes_ > cap - need)) {
      return Status::NoSpace("chunk store " + options_.dir + " is at its capacity limit: chunk " + key.Name() +
                             " needs " + std::to_string(need) + " bytes, " + std::to_string(used_bytes_) +
                             " used, " + std::to_string(reserved_bytes_) + " reserved and " +
                             std::to_string(other_bytes_) + " held by checkpoints and the read tier of " +
                             std::to_string(cap));
    }
    reserved_bytes_ += need;
    busy_.insert(key);
  }

  ChunkMeta meta;
  meta.length = data.size();
  meta.checksum = Checksum64(data.data(), data.size());
  meta.dataset_uid = dataset_uid;
  meta.layout = layout_;
  Status s = WriteChunkFile(key, meta, data);

  MutexLock lock(&mu_);
  reserved_bytes_ -= need;
  busy_.erase(key);
  if (s.ok()) {
    // Read back before the rename; the disk itself may still hand back other
    // bytes later, so the first Read checks again (MakeEntry: not verified).
    index_[key] = MakeEntry(meta, next_generation_++);
    used_bytes_ += need;
  }
  busy_cv_.NotifyAll();
  return s;
}

Status ChunkStore::WriteChunkFile(const ChunkKey& key, const ChunkMeta& meta, std::string_view data) {
  const std::string path = ChunkPath(options_.dir, key);
  // The .tmp lives next to its final name so the rename cannot cross a
  // filesystem, and a reader never sees the chunk before it is complete.
  const std::string tmp = path + "." + std::to_string(::getpid()) + "." +
                          std::to_string(g_tmp_counter.fetch_add(1, std::memory_order_relaxed)) +
                          std::string(kTmpSuffix);
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;  // read back before the rename
  // Direct I/O (common/direct_io.h): a fill is read by the mount later, if at
  // all, and a page cache copy of it would cost a CPU copy per byte and the
  // readers' memory; the read-back then checks what the disk holds.
  UniqueFd fd = direct_io_.Open(tmp, flags, 0644);
  if (!fd.valid() && errno == ENOENT) {
    // <hh> directories are made on first use rather than all 256 at Open.
    HOARD_RETURN_IF_ERROR(StoreError(MakeDirs(DirName(path))));
    fd = direct_io_.Open(tmp, flags, 0644);
  }
  if (!fd.valid()) return StoreError(Status::FromErrno(errno, "create " + tmp));

  const uint64_t total = meta.file_size();
  Status s = [&]() -> Status {
    // Claiming the blocks first makes a full disk fail here, before a large
    // chunk is copied in only to be thrown away. Filesystems without
    // fallocate fall through to the writes, which report ENOSPC themselves.
    // A small chunk is not worth the extra call: its write fails as fast.
    int rc = 0;
    while (total >= kFallocateMin && (rc = ::fallocate(fd.get(), 0, 0, static_cast<off_t>(total))) != 0 &&
           errno == EINTR) {
    }
    if (rc != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
      return Status::FromErrno(errno, "allocate " + std::to_string(total) + " bytes for " + tmp);
    }
    if (meta.layout == ChunkLayout::kXattr) {
      HOARD_RETURN_IF_ERROR(direct_io_.WriteWhole(fd.get(), {data}).Annotate(tmp));
      HOARD_RETURN_IF_ERROR(WriteChunkMetaXattr(fd.get(), meta).Annotate(tmp));
      HOARD_RETURN_IF_ERROR(WriteBlockSums(fd.get(), data).Annotate(tmp));
    } else {
      char buf[kChunkMetaSize];
      EncodeChunkMeta(meta, buf);
      HOARD_RETURN_IF_ERROR(direct_io_.WriteWhole(fd.get(), {data, std::string_view(buf, sizeof(buf))}).Annotate(tmp));
    }
    // Read the bytes back before the chunk can be counted as cached: a chunk
    // is reported (and a warm-up called complete) only once the store has
    // checked what it holds against the checksum of what it was given.
    if (options_.verify_puts) {
      if (Status v = VerifyChunkFile(fd.get(), meta); !v.ok()) return v.Annotate("read back " + tmp);
    }
    // Some filesystems (NFS) report a failed delayed write only at close.
    if (::close(fd.Release()) != 0) return Status::FromErrno(errno, "close " + tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp);
    return Status::Ok();
  }();
  if (!s.ok()) {
    fd.Reset();
    ::unlink(tmp.c_str());
    return StoreError(s);
  }
  return Status::Ok();
}

bool ChunkStore::SameEntry(const ChunkKey& key, uint64_t generation) const {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  return it != index_.end() && it->second.generation == generation;
}

Result<size_t> ChunkStore::Read(const ChunkKey& key, uint64_t offset, size_t len, char* buf) {
  const std::string path = ChunkPath(options_.dir, key);
  for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
    Entry e;
    {
      MutexLock lock(&mu_);
      auto it = index_.find(key);
      if (it == index_.end()) {
        return Status::NotFound("chunk " + key.Name() + " is not in chunk store " + options_.dir);
      }
      e = it->second;
    }
    if (offset > e.length) {
      return Status::InvalidArgument("read at offset " + std::to_string(offset) + " of chunk " + key.Name() +
                                     ", which has " + std::to_string(e.length) + " bytes");
    }

    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      const int err = errno;
      // Removed (and perhaps put again) since the lookup: look again.
      if (!SameEntry(key, e.generation)) continue;
      if (err == ENOENT) {
        // Deleted behind the store's back; forget it so usage stays true.
        options_.logger->warn("chunk store {}: chunk file {} disappeared; dropping it", options_.dir, path);
        // The file is already gone, so the unlink inside cannot fail usefully.
        (void)RemoveEntry(key, e.generation);
        return Status::NotFound("chunk " + key.Name() + " is not in chunk store " + options_.dir);
      }
      return StoreError(Status::FromErrno(err, "open " + path));
    }
    // Entries enter the index only after their file is in place and leave it
    // before the file is unlinked, so if the entry is unchanged now, the file
    // we opened is its file (not one Put after a Remove that raced us).
    if (!SameEntry(key, e.generation)) continue;

    Status fault;  // set when the file does not hold what the entry says
    if (!e.verified) {
      // Readers that race on an unverified chunk may each check it; that
      // costs a little I/O once, and keeps the common path free of waiting.
      Result<ChunkMeta> t = MatchingRecord(fd.get(), e.length, e.checksum, e.dataset_uid);
      if (!t.ok()) fault = t.status();
    }
    // A whole chunk is checked in the buffer it is returned in (hashing is
    // far cheaper than the read). A part of one is served from the page
    // cache only while the whole chunk is cached since a check; otherwise the
    // whole chunk is read and checked again first (common/page_cache.h).
    // Whole, not the range's blocks: reading a range brings its neighbours
    // in by read-ahead, unchecked, and they would then count as "cached".
    const bool whole = offset == 0 && len >= e.length;
    // Raised while this read checks the chunk and until a bad one was
    // quarantined and its pages dropped: meanwhile no other reader takes
    // the pages the check reads in for checked ones.
    std::optional<StripeHold> checking;
    bool trusted_cache = false;
    if (fault.ok() && !whole) {
      // (Pages some other reader cached are not taken on trust before this
      // store checked the chunk once.)
      std::atomic<uint32_t>& stripe = checking_[CheckStripe(key)];
      Result<bool> cached = e.verified ? FullyCached(fd.get(), 0, e.length) : Result<bool>(false);
      trusted_cache = cached.ok() && *cached && stripe.load() == 0;
      if (!trusted_cache) {
        checking.emplace(stripe);
        constexpr size_t kScratch = 256 << 10;
        thread_local std::unique_ptr<char[]> scratch(new char[kScratch]);
        Result<ChunkMeta> t = ReadChunkMeta(fd.get(), e.file_bytes());
        fault = t.ok() ? VerifyChunkRange(fd.get(), *t, 0, e.length, scratch.get(), kScratch) : t.status();
      }
    }

    size_t n = 0;
    if (fault.ok()) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(len, e.length - offset));
      Result<size_t> got = PreadUpTo(fd.get(), buf, want, offset);
      if (!got.ok()) return StoreError(got.status().Annotate(path));
      n = *got;
      // The file is never modified in place, so a short read means it was
      // truncated by someone else.
      if (n != want) fault = Status::Corruption("chunk file is shorter than its record says");
      if (fault.ok() && whole && Checksum64(buf, n) != e.checksum) {
        fault = Status::Corruption("chunk data does not match its checksum");
      }
      // A check that began after ours found the cache trustworthy may have
      // quarantined the chunk since: then these bytes are not served.
      if (fault.ok() && trusted_cache && !SameEntry(key, e.generation)) continue;
    }
    if (fault.ok()) {
      if (!e.verified) {
        MutexLock lock(&mu_);
        auto it = index_.find(key);
        if (it != index_.end() && it->second.generation == e.generation) it->second.verified = true;
      }
      return n;
    }
    if (fault.code() != Code::kCorruption) return StoreError(fault.Annotate(path));
    // The bad bytes just read must not stay cached for a reader that still
    // has the file open (the mount) to find "cached" and serve.
    (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    ReportCorrupt(key, e, fault, /*by_read=*/true);
    return Status::Corruption("chunk " + key.Name() + " in chunk store " + options_.dir + ": " + fault.message() +
                              "; the chunk was quarantined");
  }
  return Status::Unavailable("chunk " + key.Name() + " in chunk store " + options_.dir +
                             " kept being replaced while it was read");
}

bool ChunkStore::Contains(const ChunkKey& key) const {
  MutexLock lock(&mu_);
  return index_.contains(key);
}

Result<uint64_t> ChunkStore::Length(const ChunkKey& key) const {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return Status::NotFound("chunk " + key.Name() + " is not in chunk store " + options_.dir);
  return it->second.length;
}

Result<ChunkStore::ScrubResult> ChunkStore::Scrub(const ChunkKey& key) {
  const std::string path = ChunkPath(options_.dir, key);
  for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
    Entry e;
    {
      MutexLock lock(&mu_);
      auto it = index_.find(key);
      if (it == index_.end()) return ScrubResult{.gone = true};
      e = it->second;
    }
    // From the disk, not from a page-cache copy (O_DIRECT where the
    // filesystem has it: tmpfs has no disk to check anyway).
    UniqueFd fd = direct_io_.Open(path, O_RDONLY | O_CLOEXEC, 0);
    if (!fd.valid()) {
      const int err = errno;
      if (!SameEntry(key, e.generation)) continue;
      if (err == ENOENT) {
        (void)RemoveEntry(key, e.generation);
        return ScrubResult{.gone = true};
      }
      return StoreError(Status::FromErrno(err, "open " + path));
    }
    if (!SameEntry(key, e.generation)) continue;
    Result<ChunkMeta> t = MatchingRecord(fd.get(), e.length, e.checksum, e.dataset_uid);
    const Status fault = t.ok() ? VerifyChunkFile(fd.get(), *t) : t.status();
    if (fault.ok()) return ScrubResult{.bytes = e.length};
    if (fault.code() != Code::kCorruption) return StoreError(fault.Annotate(path));
    ReportCorrupt(key, e, fault, /*by_read=*/false);
    return ScrubResult{.bytes = e.length, .corrupt = true};
  }
  return Status::Unavailable("chunk " + key.Name() + " kept being replaced while it was scrubbed");
}

void ChunkStore::ReportCorrupt(const ChunkKey& key, const Entry& e, const Status& fault, bool by_read) {
  options_.logger->error("chunk store {}: chunk {} (dataset uid {:x}) is corrupt ({}); quarantining it in {}",
                         options_.dir, key.Name(), e.dataset_uid, fault.message(), quarantine_.dir());
  // Only this generation: if the chunk was already replaced, the new copy is
  // not the one that failed.
  Result<bool> removed = RemoveEntry(key, e.generation, /*quarantine=*/true);
  if (!removed.ok()) {
    options_.logger->warn("chunk store {}: cannot quarantine corrupt chunk {}: {}", options_.dir, key.Name(),
                          removed.status().ToString());
  }
  // The scrubber counts its own finds (node/scrubber.h).
  if (by_read) corrupt_chunks_.fetch_add(1, std::memory_order_relaxed);
  if (removed.ok() && *removed && options_.on_corrupt) options_.on_corrupt(key, e.dataset_uid);
}

Result<bool> ChunkStore::RemoveEntry(const ChunkKey& key, std::optional<uint64_t> generation, bool quarantine) {
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    if (generation && it->second.generation != *generation) return false;
    used_bytes_ -= it->second.file_bytes();
    ++removed_chunks_;
    removed_bytes_ += it->second.length;
    index_.erase(it);
    busy_.insert(key);
  }
  HOARD_RETURN_IF_ERROR(UnlinkTaken({key}, quarantine));
  return true;
}

Status ChunkStore::UnlinkTaken(const std::vector<ChunkKey>& keys, bool quarantine) {
  // Readers that already opened a file keep reading it after the unlink; new
  // readers no longer find the entry. The busy marks keep a Put of the same
  // key from renaming a new file into place before the old one is gone.
  Status first_error;
  for (const ChunkKey& key : keys) {
    const std::string path = ChunkPath(options_.dir, key);
    if (quarantine) {
      // Moved aside for an operator to look at; unlinked if it cannot be.
      Status moved = quarantine_.Move(path, "store");
      if (moved.ok()) continue;
      options_.logger->warn("chunk store {}: {}; deleting it instead", options_.dir, moved.ToString());
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && first_error.ok()) {
      first_error = StoreError(Status::FromErrno(errno, "unlink " + path));
    }
  }
  MutexLock lock(&mu_);
  for (const ChunkKey& key : keys) busy_.erase(key);
  busy_cv_.NotifyAll();
  return first_error;
}

Status ChunkStore::Remove(const ChunkKey& key) {
  Result<bool> removed = RemoveEntry(key, std::nullopt);
  return removed.status();
}

size_t ChunkStore::RemoveDataset(uint64_t dataset_uid) {
  std::vector<ChunkKey> taken;
  {
    MutexLock lock(&mu_);
    for (auto it = index_.begin(); it != index_.end();) {
      if (it->second.dataset_uid != dataset_uid) {
        ++it;
        continue;
      }
      used_bytes_ -= it->second.file_bytes();
      ++removed_chunks_;
      removed_bytes_ += it->second.length;
      busy_.insert(it->first);
      taken.push_back(it->first);
      it = index_.erase(it);
    }
  }
  if (taken.empty()) return 0;
  Status s = UnlinkTaken(taken);
  if (!s.ok()) {
    options_.logger->warn("chunk store {}: removing dataset {}: {}", options_.dir, dataset_uid, s.ToString());
  }
  return taken.size();
}

void ChunkStore::ForEach(
    const std::function<void(const ChunkKey&, uint64_t dataset_uid, uint64_t length)>& fn) const {
  std::vector<std::pair<ChunkKey, Entry>> snapshot;
  {
    MutexLock lock(&mu_);
    snapshot.assign(index_.begin(), index_.end());
  }
  for (const auto& [key, e] : snapshot) fn(key, e.dataset_uid, e.length);
}

ChunkStore::Usage ChunkStore::usage() const {
  MutexLock lock(&mu_);
  Usage u;
  u.used_bytes = used_bytes_;
  u.capacity_bytes = options_.capacity_bytes;
  u.other_bytes = other_bytes_;
  u.chunks = index_.size();
  u.removed_chunks = removed_chunks_;
  u.removed_bytes = removed_bytes_;
  return u;
}

void ChunkStore::SetOtherBytes(uint64_t bytes) {
  MutexLock lock(&mu_);
  other_bytes_ = bytes;
}

}  // namespace hoard
