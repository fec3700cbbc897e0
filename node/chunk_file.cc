#include "node/chunk_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>

#include "common/direct_io.h"
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

}  // namespace

void EncodeChunkTrailer(const ChunkTrailer& t, char out[kChunkTrailerSize]) {
  PutU64(out, kChunkTrailerMagic);
  PutU64(out + 8, t.length);
  PutU64(out + 16, t.checksum);
  PutU64(out + 24, t.dataset_uid);
}

Result<ChunkTrailer> DecodeChunkTrailer(std::string_view bytes, uint64_t file_size) {
  if (bytes.size() != kChunkTrailerSize) {
    return Status::Corruption("chunk trailer has " + std::to_string(bytes.size()) + " bytes, want " +
                              std::to_string(kChunkTrailerSize));
  }
  if (GetU64(bytes.data()) != kChunkTrailerMagic) return Status::Corruption("chunk trailer has a bad magic");
  ChunkTrailer t;
  t.length = GetU64(bytes.data() + 8);
  t.checksum = GetU64(bytes.data() + 16);
  t.dataset_uid = GetU64(bytes.data() + 24);
  // Compare as file_size - trailer so a garbage length near 2^64 cannot wrap.
  if (file_size < kChunkTrailerSize || t.length != file_size - kChunkTrailerSize) {
    return Status::Corruption("chunk trailer says " + std::to_string(t.length) + " data bytes but the file has " +
                              std::to_string(file_size) + " bytes");
  }
  return t;
}

Result<ChunkTrailer> ReadChunkTrailer(int fd, uint64_t file_size) {
  if (file_size < kChunkTrailerSize) {
    return Status::Corruption("chunk file has " + std::to_string(file_size) + " bytes, too short for a trailer");
  }
  char buf[kChunkTrailerSize];
  size_t done = 0;
  const off_t base = static_cast<off_t>(file_size - kChunkTrailerSize);
  while (done < kChunkTrailerSize) {
    ssize_t n = ::pread(fd, buf + done, kChunkTrailerSize - done, base + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk trailer");
    }
    // The file shrank under us: the trailer we were promised is not there.
    if (n == 0) return Status::Corruption("chunk file is shorter than its size said");
    done += static_cast<size_t>(n);
  }
  return DecodeChunkTrailer(std::string_view(buf, kChunkTrailerSize), file_size);
}

Status VerifyChunkFile(int fd, const ChunkTrailer& trailer) {
  // Aligned buffer, offsets and read sizes: `fd` may have been opened with
  // O_DIRECT (the store reads a fill back from the disk, not a page cache
  // copy of it). A read may run into the trailer; only data is summed.
  AlignedBuffer buf = AllocateAligned(kVerifyBufferSize);
  if (buf == nullptr) return Status::NoSpace("out of memory to verify a chunk");
  StreamingChecksum sum;
  uint64_t off = 0;
  while (off < trailer.length) {
    const uint64_t left = trailer.length - off;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kVerifyBufferSize, DirectIo::RoundUp(left)));
    ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read chunk data");
    }
    if (n == 0) {
      return Status::Corruption("chunk file ends at " + std::to_string(off) + " bytes, trailer says " +
                                std::to_string(trailer.length));
    }
    const auto got = std::min<uint64_t>(static_cast<uint64_t>(n), left);
    sum.Update(buf.get(), static_cast<size_t>(got));
    off += got;
  }
  if (sum.Digest() != trailer.checksum) return Status::Corruption("chunk data does not match its checksum");
  return Status::Ok();
}

Result<ChunkTrailer> ReadAndVerifyChunkFile(int fd, uint64_t file_size, char* scratch, size_t scratch_size) {
  if (file_size < kChunkTrailerSize) {
    return Status::Corruption("chunk file has " + std::to_string(file_size) + " bytes, too short for a trailer");
  }
  const uint64_t data_len = file_size - kChunkTrailerSize;
  char trailer[kChunkTrailerSize];
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
    if (off < data_len) sum.Update(scratch, static_cast<size_t>(std::min(end, data_len) - off));
    for (uint64_t p = std::max(off, data_len); p < end; ++p) trailer[p - data_len] = scratch[p - off];
    off = end;
  }
  Result<ChunkTrailer> t = DecodeChunkTrailer(std::string_view(trailer, kChunkTrailerSize), file_size);
  if (!t.ok()) return t.status();
  if (sum.Digest() != t->checksum) return Status::Corruption("chunk data does not match its checksum");
  return t;
}

}  // namespace hoard
