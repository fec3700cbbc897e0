#include "store/chunk_file.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/direct_io.h"
#include "common/file_util.h"
#include "common/hash.h"

namespace hoard {
namespace {

// The trailer is little-endian on every host, so a store written on one
// machine can be read on another; byte-wise coding avoids relying on the
// host's endianness.
void PutU64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

// Verification streams the chunk through a bounded buffer: chunks can be tens
// of MiB and several may be verified at once.
constexpr size_t kVerifyBufferSize = 1 << 20;

// Checks data fed in order from offset `from` against block sums, block by
// block (a block's sum is known once its last byte is fed).
class BlockChecker {
 public:
  BlockChecker(const std::vector<uint64_t>* sums, uint64_t length, uint64_t from)
      : sums_(sums), length_(length), at_(from) {}
  void Feed(const char* p, size_t n) {
    if (sums_ == nullptr) return;
    while (n > 0 && at_ < length_) {
      const uint64_t block_end = std::min(length_, (at_ / kSumBlockBytes + 1) * kSumBlockBytes);
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, block_end - at_));
      sum_->Update(p, take);
      p += take;
      n -= take;
      at_ += take;
      if (at_ == block_end) {
        if (sum_->Digest() != (*sums_)[(at_ - 1) / kSumBlockBytes]) bad_ = true;
        sum_ = std::make_unique<StreamingChecksum>();  // it has no reset
      }
    }
  }
  bool bad() const { return bad_; }

 private:
  const std::vector<uint64_t>* sums_;
  uint64_t length_;
  uint64_t at_;
  std::unique_ptr<StreamingChecksum> sum_ = std::make_unique<StreamingChecksum>();
  bool bad_ = false;
};

}  // namespace

std::string EncodeBlockSums(std::string_view data) {
  if (data.size() <= kSumBlockBytes) return "";
  std::string out;
  for (uint64_t off = 0; off < data.size(); off += kSumBlockBytes) {
    char b[8];
    PutU64(b, Checksum64(data.data() + off, static_cast<size_t>(std::min<uint64_t>(kSumBlockBytes, data.size() - off))));
    out.append(b, 8);
  }
  return out;
}

Status WriteBlockSums(int fd, std::string_view data) {
  const std::string sums = EncodeBlockSums(data);
  if (sums.empty()) return Status::Ok();
  if (::fsetxattr(fd, kChunkSumsXattr, sums.data(), sums.size(), 0) != 0) {
    return Status::FromErrno(errno, "set chunk block sums xattr");
  }
  return Status::Ok();
}

Result<std::optional<std::vector<uint64_t>>> ReadBlockSums(int fd, uint64_t length) {
  const uint64_t blocks = (length + kSumBlockBytes - 1) / kSumBlockBytes;
  if (blocks <= 1) return std::optional<std::vector<uint64_t>>();
  std::string buf(blocks * 8 + 1, '\0');  // one more: a longer value is not ours
  const ssize_t n = ::fgetxattr(fd, kChunkSumsXattr, buf.data(), buf.size());
  if (n < 0) {
    if (errno == ENODATA || errno == ENOTSUP || errno == ERANGE) {
      if (errno == ERANGE) return Status::Corruption("chunk block sums xattr is too long");
      return std::optional<std::vector<uint64_t>>();
    }
    return Status::FromErrno(errno, "read chunk block sums xattr");
  }
  if (uint64_t(n) != blocks * 8) return Status::Corruption("chunk block sums xattr does not fit the chunk's length");
  std::vector<uint64_t> sums(blocks);
  for (uint64_t i = 0; i < blocks; ++i) sums[i] = GetU64(buf.data() + 8 * i);
  return std::optional<std::vector<uint64_t>>(std::move(sums));
}

Status VerifyChunkRange(int fd, const ChunkMeta& m, uint64_t offset, uint64_t len, char* scratch,
                        size_t scratch_size) {
  Result<std::optional<std::vector<uint64_t>>> sums = ReadBlockSums(fd, m.length);
  if (!sums.ok()) return sums.status();
  offset = std::min(offset, m.length);
  const uint64_t end = std::min(m.length, offset + std::min(len, m.length - offset));
  // Whole blocks around the range, or the whole chunk without block sums.
  const uint64_t from = sums->has_value() ? offset / kSumBlockBytes * kSumBlockBytes : 0;
  const uint64_t to = sums->has_value() ? std::min(m.length, (end + kSumBlockBytes - 1) / kSumBlockBytes * kSumBlockBytes)
                                        : m.length;
  BlockChecker blocks(sums->has_value() ? &**sums : nullptr, m.length, from);
  StreamingChecksum whole;
  for (uint64_t off = from; off < to;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch_size, to - off));
    const ssize_t n = ::pread(fd, scratch, want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk data");
    }
    if (n == 0) return Status::Corruption("chunk file ends before its record says");
    if (sums->has_value()) blocks.Feed(scratch, static_cast<size_t>(n));
    else whole.Update(scratch, static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  if (sums->has_value() ? blocks.bad() : whole.Digest() != m.checksum) {
    return Status::Corruption("chunk data does not match its checksum");
  }
  return Status::Ok();
}

void EncodeChunkMeta(const ChunkMeta& m, char out[kChunkMetaSize]) {
  PutU64(out, kChunkMetaMagic);
  PutU64(out + 8, m.length);
  PutU64(out + 16, m.checksum);
  PutU64(out + 24, m.dataset_uid);
}

Result<ChunkMeta> DecodeChunkMeta(std::string_view bytes, uint64_t file_size, ChunkLayout layout) {
  if (bytes.size() != kChunkMetaSize) {
    return Status::Corruption("chunk record has " + std::to_string(bytes.size()) + " bytes, want " +
                              std::to_string(kChunkMetaSize));
  }
  if (GetU64(bytes.data()) != kChunkMetaMagic) return Status::Corruption("chunk record has a bad magic");
  ChunkMeta m;
  m.length = GetU64(bytes.data() + 8);
  m.checksum = GetU64(bytes.data() + 16);
  m.dataset_uid = GetU64(bytes.data() + 24);
  m.layout = layout;
  // Compare as file_size - overhead so a garbage length near 2^64 cannot wrap.
  const uint64_t overhead = layout == ChunkLayout::kTrailer ? kChunkMetaSize : 0;
  if (file_size < overhead || m.length != file_size - overhead) {
    return Status::Corruption("chunk record says " + std::to_string(m.length) + " data bytes but the file has " +
                              std::to_string(file_size) + " bytes");
  }
  return m;
}

namespace {

// The xattr's record: kNotFound when the file has none (or its filesystem
// has no user xattrs). Its layout says where the file's bytes end: kXattr when
// the record's length is the file's size, kTrailer when it leaves exactly a
// trailer's room (a conversion cut short); else kCorruption.
Result<ChunkMeta> ReadXattrRecord(int fd, uint64_t file_size) {
  char buf[kChunkMetaSize + 1];  // one more: a longer value is not a record
  const ssize_t n = ::fgetxattr(fd, kChunkMetaXattr, buf, sizeof(buf));
  if (n < 0) {
    if (errno == ENODATA || errno == ENOTSUP) return Status::NotFound("no chunk xattr");
    return Status::FromErrno(errno, "read chunk xattr");
  }
  const std::string_view record(buf, static_cast<size_t>(n));
  Result<ChunkMeta> m = DecodeChunkMeta(record, file_size, ChunkLayout::kXattr);
  if (m.ok()) return m;
  Result<ChunkMeta> t = DecodeChunkMeta(record, file_size, ChunkLayout::kTrailer);
  return t.ok() ? t : m;
}

Result<ChunkMeta> ReadTrailer(int fd, uint64_t file_size) {
  if (file_size < kChunkMetaSize) {
    return Status::Corruption("chunk file has " + std::to_string(file_size) + " bytes, too short for a trailer");
  }
  char buf[kChunkMetaSize];
  size_t done = 0;
  const off_t base = static_cast<off_t>(file_size - kChunkMetaSize);
  while (done < kChunkMetaSize) {
    ssize_t n = ::pread(fd, buf + done, kChunkMetaSize - done, base + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk trailer");
    }
    // The file shrank under us: the trailer we were promised is not there.
    if (n == 0) return Status::Corruption("chunk file is shorter than its size said");
    done += static_cast<size_t>(n);
  }
  return DecodeChunkMeta(std::string_view(buf, kChunkMetaSize), file_size, ChunkLayout::kTrailer);
}

// A trailer found where the xattr said it would be (a conversion cut short)
// must be the xattr's record.
Result<ChunkMeta> MatchXattr(Result<ChunkMeta> trailer, const Result<ChunkMeta>& xattr) {
  if (trailer.ok() && xattr.ok() &&
      (trailer->length != xattr->length || trailer->checksum != xattr->checksum ||
       trailer->dataset_uid != xattr->dataset_uid)) {
    return Status::Corruption("chunk xattr and trailer disagree");
  }
  return trailer;
}

}  // namespace

Result<ChunkMeta> ReadChunkMeta(int fd, uint64_t file_size) {
  Result<ChunkMeta> x = ReadXattrRecord(fd, file_size);
  if (x.ok() && x->layout == ChunkLayout::kXattr) return x;
  // A bad xattr is a bad file; no xattr, or one that leaves room for a
  // trailer (a conversion cut short), sends us to the trailer.
  if (!x.ok() && x.status().code() != Code::kNotFound) return x.status();
  return MatchXattr(ReadTrailer(fd, file_size), x);
}

Result<ChunkLayout> ProbeChunkLayout(const std::string& dir) {
  const std::string probe = dir + "/.xattr-probe." + std::to_string(::getpid());
  UniqueFd fd(::open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "create " + probe);
  char buf[kChunkMetaSize];
  EncodeChunkMeta(ChunkMeta{}, buf);
  const int rc = ::fsetxattr(fd.get(), kChunkMetaXattr, buf, sizeof(buf), 0);
  const int err = errno;
  fd.Reset();
  (void)::unlink(probe.c_str());
  if (rc == 0) return ChunkLayout::kXattr;
  if (err == ENOTSUP || err == EPERM) return ChunkLayout::kTrailer;
  return Status::FromErrno(err, "set an xattr on " + probe);
}

Status WriteChunkMetaXattr(int fd, const ChunkMeta& m) {
  char buf[kChunkMetaSize];
  EncodeChunkMeta(m, buf);
  if (::fsetxattr(fd, kChunkMetaXattr, buf, sizeof(buf), 0) != 0) return Status::FromErrno(errno, "set chunk xattr");
  return Status::Ok();
}

Status MoveTrailerToXattr(int fd, const std::string& path, const ChunkMeta& m) {
  ChunkMeta x = m;
  x.layout = ChunkLayout::kXattr;
  HOARD_RETURN_IF_ERROR(WriteChunkMetaXattr(fd, x).Annotate(path));
  // The xattr first: a file cut before it is set would have lost its record.
  if (::truncate(path.c_str(), static_cast<off_t>(m.length)) != 0) {
    return Status::FromErrno(errno, "cut the trailer off " + path);
  }
  return Status::Ok();
}
Status VerifyChunkFile(int fd, const ChunkMeta& m) {
  // Aligned buffer, offsets and read sizes: `fd` may have been opened with
  // O_DIRECT (the store reads a fill back from the disk, not a page cache
  // copy of it). A read may run into a trailer; only data is summed.
  AlignedBuffer buf = AllocateAligned(kVerifyBufferSize);
  if (buf == nullptr) return Status::NoSpace("out of memory to verify a chunk");
  Result<std::optional<std::vector<uint64_t>>> sums = ReadBlockSums(fd, m.length);
  if (!sums.ok()) return sums.status();
  BlockChecker blocks(sums->has_value() ? &**sums : nullptr, m.length, 0);
  StreamingChecksum sum;
  uint64_t off = 0;
  while (off < m.length) {
    const uint64_t left = m.length - off;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kVerifyBufferSize, DirectIo::RoundUp(left)));
    ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk data");
    }
    if (n == 0) {
      return Status::Corruption("chunk file ends at " + std::to_string(off) + " bytes, its record says " +
                                std::to_string(m.length));
    }
    const auto got = std::min<uint64_t>(static_cast<uint64_t>(n), left);
    sum.Update(buf.get(), static_cast<size_t>(got));
    blocks.Feed(buf.get(), static_cast<size_t>(got));
    off += got;
  }
  if (sum.Digest() != m.checksum) return Status::Corruption("chunk data does not match its checksum");
  if (blocks.bad()) return Status::Corruption("chunk data does not match its block sums");
  return Status::Ok();
}

Result<ChunkMeta> ReadAndVerifyChunkFile(int fd, uint64_t file_size, char* scratch, size_t scratch_size) {
  Result<ChunkMeta> x = ReadXattrRecord(fd, file_size);
  if (!x.ok() && x.status().code() != Code::kNotFound) return x.status();
  // The whole file is data, or the data and then a trailer, read in the
  // same pass.
  const bool in_xattr = x.ok() && x->layout == ChunkLayout::kXattr;
  if (!in_xattr && file_size < kChunkMetaSize) {
    return Status::Corruption("chunk file has " + std::to_string(file_size) + " bytes, too short for a trailer");
  }
  const uint64_t data_len = in_xattr ? file_size : file_size - kChunkMetaSize;
  Result<std::optional<std::vector<uint64_t>>> sums = ReadBlockSums(fd, data_len);
  if (!sums.ok()) return sums.status();
  BlockChecker blocks(sums->has_value() ? &**sums : nullptr, data_len, 0);
  char trailer[kChunkMetaSize];
  StreamingChecksum sum;
  uint64_t off = 0;
  while (off < file_size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(scratch_size, file_size - off));
    ssize_t n = ::pread(fd, scratch, want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk file");
    }
    if (n == 0) return Status::Corruption("chunk file is shorter than its size said");
    const uint64_t end = off + static_cast<uint64_t>(n);
    // The part of [off, end) that is data, then the part that is trailer.
    if (off < data_len) {
      sum.Update(scratch, static_cast<size_t>(std::min(end, data_len) - off));
      blocks.Feed(scratch, static_cast<size_t>(std::min(end, data_len) - off));
    }
    for (uint64_t p = std::max(off, data_len); p < end; ++p) trailer[p - data_len] = scratch[p - off];
    off = end;
  }
  Result<ChunkMeta> m =
      in_xattr ? x
               : MatchXattr(DecodeChunkMeta(std::string_view(trailer, kChunkMetaSize), file_size, ChunkLayout::kTrailer),
                            x);
  if (!m.ok()) return m.status();
  if (sum.Digest() != m->checksum) return Status::Corruption("chunk data does not match its checksum");
  if (blocks.bad()) return Status::Corruption("chunk data does not match its block sums");
  return m;
}

}  // namespace hoard
