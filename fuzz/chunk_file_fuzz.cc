// Fuzz target: chunk files as the node agent (at start, and on every read)
// and the mount (reading local chunks directly) read them back: the bytes
// and their trailer (node/chunk_file.h).
//
// Input: a chunk file. Its trailer's checksum is rewritten to match the
// bytes when the input's first byte is odd, so both the accepting and the
// refusing paths are fuzzed. The three readers must agree: the trailer
// decoded from memory, from the file, and by the one-pass verifying read.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "common/hash.h"
#include "fuzz/fuzz_util.h"
#include "node/chunk_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size >= hoard::kChunkTrailerSize && (data[0] & 1)) {
    const size_t len = size - hoard::kChunkTrailerSize;
    const uint64_t sum = hoard::Checksum64(bytes.data(), len);
    for (int i = 0; i < 8; ++i) bytes[len + 16 + i] = static_cast<char>(sum >> (8 * i));
  }
  const std::string path = hoard::fuzz::Scratch::File("chunk");
  hoard::fuzz::WriteOrDie(path, bytes);
  hoard::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) std::abort();

  const std::string_view tail = std::string_view(bytes).substr(bytes.size() - std::min(bytes.size(), hoard::kChunkTrailerSize));
  hoard::Result<hoard::ChunkTrailer> decoded = hoard::DecodeChunkTrailer(tail, bytes.size());
  hoard::Result<hoard::ChunkTrailer> read = hoard::ReadChunkTrailer(fd.get(), bytes.size());
  if (decoded.ok() != read.ok()) std::abort();
  char scratch[256];
  hoard::Result<hoard::ChunkTrailer> verified =
      hoard::ReadAndVerifyChunkFile(fd.get(), bytes.size(), scratch, sizeof scratch);
  if (read.ok()) {
    if (read->length != bytes.size() - hoard::kChunkTrailerSize) std::abort();
    const bool sum_ok = hoard::VerifyChunkFile(fd.get(), *read).ok();
    if (sum_ok != verified.ok()) std::abort();  // two checks of one file disagree
  } else if (verified.ok()) {
    std::abort();
  }
  return 0;
}
