// Fuzz target: chunk files as the node agent (at start, and on every read)
// and the mount (reading local chunks directly) read them back: the bytes
// and their record (store/chunk_file.h).
//
// Input: a chunk file with a trailer. Its record's checksum is rewritten to
// match the bytes when the input's first byte is odd, so both the accepting
// and the refusing paths are fuzzed; when its second bit is set, the record
// goes to the file's xattr instead (the other layout). The three readers must
// agree: the record decoded from memory, from the file, and by the one-pass
// verifying read.
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "common/hash.h"
#include "fuzz/fuzz_util.h"
#include "store/chunk_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size >= hoard::kChunkMetaSize && (data[0] & 1)) {
    const size_t len = size - hoard::kChunkMetaSize;
    const uint64_t sum = hoard::Checksum64(bytes.data(), len);
    for (int i = 0; i < 8; ++i) bytes[len + 16 + i] = static_cast<char>(sum >> (8 * i));
  }
  const bool in_xattr = size >= hoard::kChunkMetaSize && (data[0] & 2);
  const std::string record = bytes.substr(bytes.size() - std::min(bytes.size(), hoard::kChunkMetaSize));
  if (in_xattr) bytes.resize(bytes.size() - hoard::kChunkMetaSize);
  const std::string path = hoard::fuzz::Scratch::File("chunk");
  hoard::fuzz::WriteOrDie(path, bytes);
  hoard::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) std::abort();
  if (in_xattr && ::fsetxattr(fd.get(), hoard::kChunkMetaXattr, record.data(), record.size(), 0) != 0) {
    if (errno == ENOTSUP) return 0;  // a scratch filesystem without user xattrs
    std::abort();
  }

  const hoard::ChunkLayout layout = in_xattr ? hoard::ChunkLayout::kXattr : hoard::ChunkLayout::kTrailer;
  hoard::Result<hoard::ChunkMeta> decoded = hoard::DecodeChunkMeta(record, bytes.size(), layout);
  if (in_xattr && !decoded.ok()) {
    // Read as a conversion cut short: the xattr leaves a trailer's room, and
    // the file's last 32 bytes are that same record.
    hoard::Result<hoard::ChunkMeta> cut = hoard::DecodeChunkMeta(record, bytes.size(), hoard::ChunkLayout::kTrailer);
    if (cut.ok() && bytes.compare(bytes.size() - hoard::kChunkMetaSize, hoard::kChunkMetaSize, record) == 0) {
      decoded = cut;
    }
  }
  hoard::Result<hoard::ChunkMeta> read = hoard::ReadChunkMeta(fd.get(), bytes.size());
  if (decoded.ok() != read.ok()) std::abort();
  char scratch[256];
  hoard::Result<hoard::ChunkMeta> verified =
      hoard::ReadAndVerifyChunkFile(fd.get(), bytes.size(), scratch, sizeof scratch);
  if (read.ok()) {
    if (read->layout != decoded->layout || read->file_size() != bytes.size()) std::abort();
    const bool sum_ok = hoard::VerifyChunkFile(fd.get(), *read).ok();
    if (sum_ok != verified.ok()) std::abort();  // two checks of one file disagree
  } else if (verified.ok()) {
    std::abort();
  }
  return 0;
}
