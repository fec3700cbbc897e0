// Fuzz target: the manifest reader (striping/manifest.h), which nodes and
// mounts use in place after fetching it or reading it back from their cache.
//
// The input is a manifest file. Its checksum is rewritten first, or the
// fuzzer would never get past it to the validation behind it. A manifest
// Parse accepts must then answer every accessor without going out of bounds
// (ASan checks that): each entry's name and path, resolving that path back to
// the entry, looking each child up in its directory, symlink targets, chunk
// counts and keys.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/hash.h"
#include "striping/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using hoard::Manifest;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  constexpr size_t kChecksumOffset = Manifest::kHeaderSize - 8;
  if (bytes.size() >= Manifest::kHeaderSize) {
    const uint64_t sum = hoard::Checksum64(bytes.data() + Manifest::kHeaderSize, bytes.size() - Manifest::kHeaderSize);
    for (int i = 0; i < 8; ++i) bytes[kChecksumOffset + i] = static_cast<char>(sum >> (8 * i));
  }
  hoard::Result<Manifest> m = Manifest::Parse(std::move(bytes));
  if (!m.ok()) {
    if (m.status().code() != hoard::Code::kCorruption) std::abort();
    return 0;
  }
  // Bounded work per input: a valid manifest of a few KB has at most ~60
  // entries, but keep the walk linear in what it reads anyway.
  uint64_t chunk_keys = 0;
  for (uint32_t i = 0; i < m->entry_count(); ++i) {
    const hoard::EntryRecord& e = m->entry(i);
    (void)m->name(i);
    const std::string path = m->Path(i);
    if (m->Resolve(path) != i) std::abort();  // every entry is reachable by its path
    if (e.is_symlink()) (void)m->symlink_target(i);
    if (e.is_dir()) {
      for (uint32_t c = e.first_child(); c < e.first_child() + e.child_count(); ++c) {
        if (m->Lookup(i, m->name(c)) != c) std::abort();
      }
    }
    if (e.is_file()) {
      const uint64_t chunks = m->chunk_count(i);
      if (chunks > 0 && chunk_keys++ < 1000) (void)m->chunk_key(i, static_cast<uint32_t>(chunks - 1));
    }
  }
  return 0;
}
