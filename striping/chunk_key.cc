// File: striping/chunk_key.cc
//
// Chunk names and file keys. Both end up on disk (chunk file names in every
// node's store) and on the wire, so their formats are persistent: changing the
// encoding below orphans every cached chunk in the cluster.
#include "striping/chunk_key.h"

#include <cstdio>

namespace hoard {
namespace {

// Fixed-width little-endian, whatever the host, so that every node derives the
// same key for the same file.
char* PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) *p++ = static_cast<char>((v >> (8 * i)) & 0xff);
  return p;
}

// Dataset listings key millions of files; paths up to this length are encoded
// on the stack instead of in a heap buffer.
constexpr size_t kStackPath = 480;

}  // namespace

std::string ChunkKey::Name() const {
  char index_hex[9];
  std::snprintf(index_hex, sizeof index_hex, "%08x", static_cast<unsigned>(index));
  std::string name = file.Hex();
  name.push_back('-');
  name.append(index_hex, 8);
  return name;
}

FileKey MakeFileKey(uint64_t dataset_uid, std::string_view path, uint64_t size, int64_t mtime_ns) {
  // Layout: uid | len(path) | path | size | mtime, integers as u64 LE. The
  // length prefix keeps the encoding injective if a variable-length field is
  // ever appended, so two distinct tuples never hash the same bytes.
  char stack[32 + kStackPath];
  std::string heap;
  char* buf = stack;
  if (path.size() > kStackPath) {
    heap.resize(32 + path.size());
    buf = heap.data();
  }
  char* p = PutU64(buf, dataset_uid);
  p = PutU64(p, path.size());
  path.copy(p, path.size());
  p += path.size();
  p = PutU64(p, size);
  // As two's complement, so pre-1970 mtimes stay distinct from later ones.
  p = PutU64(p, static_cast<uint64_t>(mtime_ns));
  return Hash128(std::string_view(buf, static_cast<size_t>(p - buf)));
}

}  // namespace hoard
