#include "store/replica_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <filesystem>
#include <optional>

#include "common/file_util.h"
#include "common/hash.h"

namespace hoard {
namespace {

namespace fs = std::filesystem;

// "HCKREP01" read as a little-endian integer: marks a complete replica file.
constexpr uint64_t kTrailerMagic = 0x3130'5045'524b'4348ULL;
constexpr size_t kTrailerSize = 24;  // magic, length, checksum
constexpr std::string_view kTmpMarker = ".tmp.";

std::string EncodeTrailer(uint64_t length, uint64_t checksum) {
  std::string t(kTrailerSize, '\0');
  const uint64_t fields[3] = {kTrailerMagic, length, checksum};
  std::memcpy(t.data(), fields, kTrailerSize);  // hoard runs on little-endian hosts only
  return t;
}

std::optional<uint64_t> ParseU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Exactly ChunkName's 16 lowercase hex digits (a name is rebuilt from the
// number, so another spelling of it could never be removed).
std::optional<uint64_t> ParseHex64(std::string_view s) {
  uint64_t v = 0;
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string_view::npos) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Inverse of ChunkName: "<id>-<gen>-<index>-<checksum>". With
// `accept_legacy`, also the name from before the checksum was part of it,
// "<id>-<gen>-<index>" (Held::legacy; Open renames such files).
std::optional<ReplicaStore::Held> ParseChunkName(std::string_view name, bool accept_legacy = false) {
  std::vector<std::string_view> parts;
  for (size_t from = 0;;) {
    const size_t dash = name.find('-', from);
    parts.push_back(name.substr(from, dash == std::string_view::npos ? dash : dash - from));
    if (dash == std::string_view::npos || parts.size() > 4) break;
    from = dash + 1;
  }
  const bool legacy = parts.size() == 3;
  if (parts.size() != 4 && !(accept_legacy && legacy)) return std::nullopt;
  auto id = ParseU64(parts[0]);
  auto gen = ParseU64(parts[1]);
  auto index = ParseU64(parts[2]);
  std::optional<uint64_t> checksum = legacy ? std::optional<uint64_t>(0) : ParseHex64(parts[3]);
  if (!id || !gen || !index || *index > UINT32_MAX || !checksum) return std::nullopt;
  return ReplicaStore::Held{
      .id = *id, .gen = *gen, .index = static_cast<uint32_t>(*index), .checksum = *checksum, .legacy = legacy};
}

// The checksum is part of the name so that two Puts of one chunk with other
// bytes (a write-behind Put the writer gave up on, arriving after the
// commit's Put of the chunk's new bytes) never replace each other's file: a
// replica a commit counted stays what it counted.
std::string ChunkName(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum) {
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(checksum));
  return std::to_string(id) + "-" + std::to_string(gen) + "-" + std::to_string(index) + "-" + sum;
}

// Whether the file was modified at or after `cutoff` (then eviction spares it).
bool ModifiedSince(const struct stat& st, std::chrono::system_clock::time_point cutoff) {
  const auto mtime = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  return mtime >= cutoff;
}

}  // namespace

ReplicaStore::ReplicaStore(Options options) : options_(std::move(options)) {}

std::string ReplicaStore::chunks_dir() const { return JoinPath(options_.dir, "chunks"); }
std::string ReplicaStore::files_dir() const { return JoinPath(options_.dir, "files"); }

std::string ReplicaStore::WholeFilePath(std::string_view store_dir, uint64_t id) {
  return JoinPath(JoinPath(JoinPath(store_dir, "ckpt"), "files"), std::to_string(id));
}

std::string ReplicaStore::ChunkPath(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum) const {
  return JoinPath(chunks_dir(), ChunkName(id, gen, index, checksum));
}

Result<std::unique_ptr<ReplicaStore>> ReplicaStore::Open(Options options) {
  if (!options.logger) return Status::InvalidArgument("replica store: Options.logger is required");
  if (options.dir.empty()) return Status::InvalidArgument("replica store: Options.dir is empty");
  std::unique_ptr<ReplicaStore> store(new ReplicaStore(std::move(options)));
  HOARD_RETURN_IF_ERROR(MakeDirs(store->chunks_dir()));
  HOARD_RETURN_IF_ERROR(MakeDirs(store->files_dir()));
  std::error_code ec;
  for (fs::directory_iterator it(store->chunks_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // A Put that a crash interrupted: never acknowledged, so nobody counts on it.
    if (name.find(kTmpMarker) != std::string::npos) {
      if (::unlink(it->path().c_str()) != 0 && errno != ENOENT) {
        store->options_.logger->warn("replica store: cannot remove leftover {}: {}", it->path().string(),
                                     std::strerror(errno));
      }
    } else if (std::optional<Held> h = ParseChunkName(name, /*accept_legacy=*/true); h && h->legacy) {
      store->RenameLegacy(it->path().string(), *h);
    }
  }
  if (ec) return Status::FromErrno(ec.value(), "list " + store->chunks_dir());
  return store;
}

void ReplicaStore::RenameLegacy(const std::string& path, const Held& h) {
  uint64_t trailer[3] = {};
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  const bool whole = fd.valid() && ::fstat(fd.get(), &st) == 0 && uint64_t(st.st_size) >= kTrailerSize &&
                     PreadAll(fd.get(), trailer, kTrailerSize, st.st_size - off_t(kTrailerSize)).ok() &&
                     trailer[0] == kTrailerMagic && trailer[1] == uint64_t(st.st_size) - kTrailerSize;
  // A torn one keeps its old name: no Read asks for it, and eviction
  // removes it with the file.
  if (!whole) return;
  const std::string to = ChunkPath(h.id, h.gen, h.index, trailer[2]);
  if (::rename(path.c_str(), to.c_str()) != 0) {
    options_.logger->warn("replica store: cannot rename {} to {}: {}", path, to, std::strerror(errno));
  }
}

Status ReplicaStore::WriteTmp(int fd, const std::string& trailer, std::string_view bytes) {
  if (options_.before_write) {
    // The injected failure comes before the data (written = 0) or between
    // the data and the trailer (written = bytes.size()), however the file is
    // written.
    HOARD_RETURN_IF_ERROR(options_.before_write(0));
    HOARD_RETURN_IF_ERROR(options_.before_write(bytes.size()));
  }
  HOARD_RETURN_IF_ERROR(direct_io_.WriteWhole(fd, {bytes, std::string_view(trailer)}));
  // With O_DIRECT too: the size change, and the disk's write cache.
  if (::fsync(fd) != 0) return Status::FromErrno(errno, "fsync");
  return Status::Ok();
}

Status ReplicaStore::Put(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum, std::string_view bytes) {
  const std::string name = ChunkName(id, gen, index, checksum);
  if (Checksum64(bytes.data(), bytes.size()) != checksum) {
    return Status::Corruption("replica " + name + ": the bytes sent do not match their checksum");
  }
  const std::string path = ChunkPath(id, gen, index, checksum);
  const std::string tmp = path + std::string(kTmpMarker) + std::to_string(tmp_counter_.fetch_add(1));
  Status s;
  {
    // Direct I/O where the filesystem has it: the replica is fsynced at once
    // anyway, so a copy into the page cache would cost CPU (the copy, and on
    // a busy holder the memory it takes from the dataset reads it serves)
    // and buy nothing.
    UniqueFd fd = direct_io_.Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp);
    s = WriteTmp(fd.get(), EncodeTrailer(bytes.size(), checksum), bytes);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::FromErrno(errno, "rename " + tmp);
  if (!s.ok()) {
    // Never leave a partial file: a full disk must not stay full of it.
    ::unlink(tmp.c_str());
    return s.Annotate("store replica " + name);
  }
  // The rename is durable only once the directory is; until then the
  // writer must not count this copy.
  return SyncDir(chunks_dir()).Annotate("store replica " + name);
}

Result<std::string> ReplicaStore::ReadReplica(const std::string& path, uint64_t checksum, uint64_t chunk_length) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  if (static_cast<uint64_t>(st.st_size) < kTrailerSize) return Status::Corruption(path + ": shorter than a trailer");
  const uint64_t length = static_cast<uint64_t>(st.st_size) - kTrailerSize;
  uint64_t trailer[3];
  HOARD_RETURN_IF_ERROR(PreadAll(fd.get(), trailer, kTrailerSize, static_cast<off_t>(length)));
  if (trailer[0] != kTrailerMagic || trailer[1] != length) return Status::Corruption(path + ": bad trailer");
  std::string bytes(length, '\0');
  HOARD_RETURN_IF_ERROR(PreadAll(fd.get(), bytes.data(), length, 0));
  if (Checksum64(bytes.data(), bytes.size()) != trailer[2]) return Status::Corruption(path + ": checksum mismatch");
  if (trailer[2] != checksum || length != chunk_length) {
    return Status::NotFound(path + " holds other bytes than the ones asked for");
  }
  return bytes;
}

Result<ReplicaStore::ScrubResult> ReplicaStore::Scrub(const Held& h, const QuarantineDir& quarantine) {
  const std::string path = PathOf(h);
  UniqueFd fd = direct_io_.Open(path, O_RDONLY | O_CLOEXEC, 0);
  if (!fd.valid()) {
    if (errno == ENOENT) return ScrubResult{.gone = true};
    return Status::FromErrno(errno, "open " + path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Status fault;
  // The whole file in aligned pieces (O_DIRECT), the trailer at its end.
  AlignedBuffer buf = AllocateAligned(DirectIo::kPiece);
  if (buf == nullptr) return Status::NoSpace("out of memory to scrub a replica");
  StreamingChecksum sum;
  std::string tail;  // the last kTrailerSize bytes seen
  uint64_t off = 0;
  while (off < size && fault.ok()) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(DirectIo::kPiece, DirectIo::RoundUp(size - off)));
    const ssize_t n = ::pread(fd.get(), buf.get(), want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + path);
    }
    if (n == 0) break;
    const uint64_t got = std::min<uint64_t>(uint64_t(n), size - off);
    // Data bytes are those before the trailer.
    const uint64_t data_end = size >= kTrailerSize ? size - kTrailerSize : 0;
    if (off < data_end) sum.Update(buf.get(), static_cast<size_t>(std::min(got, data_end - off)));
    if (off + got > data_end) {
      const uint64_t from = data_end > off ? data_end - off : 0;
      tail.append(buf.get() + from, static_cast<size_t>(got - from));
    }
    off += got;
  }
  uint64_t trailer[3] = {0, 0, 0};
  if (off != size || tail.size() != kTrailerSize) {
    fault = Status::Corruption(path + ": shorter than its size or than a trailer");
  } else {
    std::memcpy(trailer, tail.data(), kTrailerSize);
    if (trailer[0] != kTrailerMagic || trailer[1] != size - kTrailerSize) {
      fault = Status::Corruption(path + ": bad trailer");
    } else if (sum.Digest() != trailer[2] || (!h.legacy && trailer[2] != h.checksum)) {
      fault = Status::Corruption(path + ": checksum mismatch");
    }
  }
  if (fault.ok()) return ScrubResult{.bytes = size};
  options_.logger->error("replica store: {}; quarantining it in {}", fault.message(), quarantine.dir());
  if (Status moved = quarantine.Move(path, "replica"); !moved.ok()) {
    options_.logger->warn("replica store: {}; deleting it instead", moved.ToString());
    ::unlink(path.c_str());
  }
  return ScrubResult{.bytes = size, .corrupt = true};
}

Result<std::string> ReplicaStore::ReadFromWholeFile(const std::string& path, uint64_t index, uint64_t chunk_size,
                                                    uint64_t chunk_length, uint64_t checksum) {
  if (chunk_size == 0 || index > UINT64_MAX / chunk_size) return Status::NotFound(path + ": no such chunk");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  std::string bytes(chunk_length, '\0');
  // A short file (truncated since) is a mismatch, like other bytes.
  if (Status s = PreadAll(fd.get(), bytes.data(), chunk_length, static_cast<off_t>(index * chunk_size)); !s.ok()) {
    return Status::NotFound(path + ": " + s.message());
  }
  if (Checksum64(bytes.data(), bytes.size()) != checksum) {
    return Status::NotFound(path + " was rewritten since (its bytes do not match the checksum)");
  }
  return bytes;
}

Result<std::string> ReplicaStore::Read(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum,
                                       uint64_t chunk_size, uint64_t chunk_length) {
  const std::string path = ChunkPath(id, gen, index, checksum);
  Result<std::string> r = ReadReplica(path, checksum, chunk_length);
  if (r.ok()) return r;
  if (r.status().code() == Code::kCorruption) {
    // Torn by a crash or rotted: drop it so that it is rebuilt, never served.
    options_.logger->warn("replica store: removing {}", r.status().ToString());
    ::unlink(path.c_str());
  }
  Result<std::string> w =
      ReadFromWholeFile(JoinPath(files_dir(), std::to_string(id)), index, chunk_size, chunk_length, checksum);
  if (w.ok()) return w;
  return Status::NotFound("checkpoint chunk " + ChunkName(id, gen, index, checksum) + " is not on this node");
}

Result<std::string> ReplicaStore::ReadCopy(std::string_view ckpt_dir, uint64_t id, uint64_t gen, uint32_t index,
                                           uint64_t checksum, uint64_t chunk_size, uint64_t chunk_length) {
  const std::string chunks = JoinPath(ckpt_dir, "chunks");
  Result<std::string> r = ReadReplica(JoinPath(chunks, ChunkName(id, gen, index, checksum)), checksum, chunk_length);
  if (r.ok()) return r;
  const std::string files = JoinPath(ckpt_dir, "files");
  Result<std::string> w =
      ReadFromWholeFile(JoinPath(files, std::to_string(id)), index, chunk_size, chunk_length, checksum);
  if (w.ok()) return w;
  return Status::NotFound("checkpoint chunk " + ChunkName(id, gen, index, checksum) + " is not on this node");
}

bool ReplicaStore::HasReplica(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum) const {
  return ::access(ChunkPath(id, gen, index, checksum).c_str(), F_OK) == 0;
}

ReplicaStore::Listing ReplicaStore::List() const {
  Listing out;
  std::error_code ec;
  for (fs::directory_iterator it(chunks_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    std::optional<Held> h = ParseChunkName(it->path().filename().string(), /*accept_legacy=*/true);
    struct stat st;
    if (!h || ::stat(it->path().c_str(), &st) != 0 || uint64_t(st.st_size) < kTrailerSize) continue;
    h->length = uint64_t(st.st_size) - kTrailerSize;
    out.chunks.push_back(*h);
  }
  for (fs::directory_iterator it(files_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    if (auto id = ParseU64(it->path().filename().string())) out.files.push_back(*id);
  }
  std::sort(out.chunks.begin(), out.chunks.end(), [](const Held& a, const Held& b) {
    return std::tie(a.id, a.gen, a.index, a.checksum) < std::tie(b.id, b.gen, b.index, b.checksum);
  });
  std::sort(out.files.begin(), out.files.end());
  return out;
}

ReplicaStore::Usage ReplicaStore::usage() const {
  Usage u;
  std::error_code ec;
  struct stat st;
  for (fs::directory_iterator it(chunks_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    if (::stat(it->path().c_str(), &st) != 0) continue;
    u.chunk_bytes += uint64_t(st.st_size);
    ++u.chunks;
  }
  for (fs::directory_iterator it(files_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    if (::stat(it->path().c_str(), &st) != 0) continue;
    u.file_bytes += uint64_t(st.st_size);
    ++u.files;
  }
  return u;
}

size_t ReplicaStore::DropFilesExcept(const std::set<uint64_t>& keep, std::chrono::system_clock::time_point asked_at,
                                     uint64_t keep_from_id) {
  auto kept = [&](uint64_t id) { return keep.count(id) > 0 || (keep_from_id > 0 && id >= keep_from_id); };
  const auto cutoff = asked_at - kEvictionGrace;
  size_t dropped = 0;
  struct stat st;
  for (const Held& h : List().chunks) {
    const std::string path = PathOf(h);
    if (kept(h.id) || ::stat(path.c_str(), &st) != 0 || ModifiedSince(st, cutoff)) continue;
    if (::unlink(path.c_str()) == 0) ++dropped;
  }
  std::error_code ec;
  for (fs::directory_iterator it(files_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    std::optional<uint64_t> id = ParseU64(it->path().filename().string());
    if (!id || kept(*id)) continue;
    UniqueFd fd(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    // The mount holds LOCK_SH while the file may hold uncommitted bytes.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (::fstat(fd.get(), &st) != 0 || ModifiedSince(st, cutoff)) continue;
    if (::unlink(it->path().c_str()) == 0) ++dropped;
  }
  if (dropped > 0) options_.logger->info("replica store: evicted {} checkpoint files and replicas", dropped);
  return dropped;
}

size_t ReplicaStore::DropReplicas(const std::vector<Ref>& refs) {
  size_t dropped = 0;
  for (const Ref& r : refs) {
    if (::unlink(ChunkPath(r.id, r.gen, r.index, r.checksum).c_str()) == 0) ++dropped;
  }
  if (dropped > 0) options_.logger->debug("replica store: deleted {} replicas no generation uses", dropped);
  return dropped;
}

size_t ReplicaStore::DropWholeFiles(const std::vector<std::pair<uint64_t, uint64_t>>& id_gens) {
  size_t dropped = 0;
  for (const auto& [id, gen] : id_gens) {
    const std::string path = JoinPath(files_dir(), std::to_string(id));
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    // The mount holds LOCK_SH while it writes or commits the file.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    const std::optional<uint64_t> stamped = StampedGeneration(fd.get());
    if (!stamped || *stamped > gen) continue;
    if (::unlink(path.c_str()) == 0) ++dropped;
  }
  if (dropped > 0) options_.logger->info("replica store: deleted {} whole-file copies of old generations", dropped);
  return dropped;
}

void ReplicaStore::StampGeneration(int fd, uint64_t gen) {
  const std::string v = std::to_string(gen);
  (void)::fsetxattr(fd, kGenXattr, v.data(), v.size(), 0);
}

void ReplicaStore::ClearGeneration(int fd) {
  // Once per rewrite (a file without a stamp has nothing to remove).
  if (::fremovexattr(fd, kGenXattr) == 0) (void)::fsync(fd);
}

std::optional<uint64_t> ReplicaStore::StampedGeneration(int fd) {
  char buf[32];
  const ssize_t n = ::fgetxattr(fd, kGenXattr, buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return ParseU64(std::string_view(buf, size_t(n)));
}

std::string ReplicaStore::PathOf(const Held& h) const {
  // A legacy name Open could not rename (torn) has no checksum part.
  return !h.legacy ? ChunkPath(h.id, h.gen, h.index, h.checksum)
                         : JoinPath(chunks_dir(), std::to_string(h.id) + "-" + std::to_string(h.gen) + "-" +
                                                      std::to_string(h.index));
}

}  // namespace hoard
