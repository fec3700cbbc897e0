// File: striping/manifest.h
//
// A Manifest is one immutable version of a dataset's namespace: every entry of
// the origin tree (path, size, mode, uid, gid, mtime) as recorded when the
// dataset was added, plus what striping derives from it (each file's key and
// the ordinal of its first chunk). The coordinator builds it once with
// ManifestBuilder; nodes and mounts fetch the bytes and use them in place,
// without parsing into other structures: the serialized form *is* the index.
//
// Serialized form (little-endian, 8-byte aligned; docs/architecture.md):
//   Header (kHeaderSize bytes): magic "HRDMANI1", format, counts, dataset uid,
//                               version, chunk size, checksum of what follows
//   EntryRecord[entry_count]    64 bytes each, breadth-first order:
//                               entry 0 is the root directory; the children of
//                               every directory are contiguous and sorted by
//                               name (bytewise), so lookup is a binary search
//                               and a readdir offset is a stable child position
//   names blob                  entry names and symlink targets, not terminated
//
// Every file owns the chunk ordinals [first_chunk, first_chunk + chunks), in
// entry order, so a dataset's chunks are numbered 0..total_chunks-1.
//
// Parse validates everything a reader later relies on (bounds, tree shape,
// name safety, sort order, chunk numbering, checksum), so that accessors can
// index without checks: a corrupt or hostile manifest is rejected whole. It
// allocates nothing per entry, and runs under the decode budget
// (common/alloc_budget.h) like every decoder.
//
// Thread-safety: a Manifest is immutable; copies share the bytes and may be
// used from any thread.
#pragma once

#include <sys/stat.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "striping/chunk_key.h"
#include "striping/chunking.h"

namespace hoard {

static_assert(std::endian::native == std::endian::little,
              "the manifest is used in place and is little-endian");

// One entry as laid out in the serialized manifest.
struct EntryRecord {
  uint64_t size;      // file: bytes; symlink: target length; dir: number of
                      // child directories (for st_nlink; informational)
  int64_t mtime_ns;   // nanoseconds since the epoch
  uint64_t aux;       // file: first chunk ordinal; dir: first child index in
                      // the low 32 bits, child count in the high 32 bits;
                      // symlink: offset of the target in the names blob
  uint64_t key_lo;    // file: FileKey; others: 0
  uint64_t key_hi;
  uint32_t mode;      // st_mode: type bits and permissions
  uint32_t uid;
  uint32_t gid;
  uint32_t parent;    // index of the parent directory; the root's is 0
  uint32_t name_off;  // offset of the name in the names blob
  uint16_t name_len;
  uint16_t reserved;  // 0

  bool is_dir() const { return S_ISDIR(mode); }
  bool is_file() const { return S_ISREG(mode); }
  bool is_symlink() const { return S_ISLNK(mode); }
  FileKey file_key() const { return FileKey{key_lo, key_hi}; }
  uint64_t first_chunk() const { return aux; }
  uint32_t first_child() const { return static_cast<uint32_t>(aux); }
  uint32_t child_count() const { return static_cast<uint32_t>(aux >> 32); }
};
static_assert(sizeof(EntryRecord) == 64);

class Manifest {
 public:
  static constexpr uint32_t kFormat = 1;
  static constexpr size_t kHeaderSize = 96;
  // Hard limits a manifest may not exceed (a reader refuses larger ones).
  static constexpr uint64_t kMaxEntries = 1ull << 32;
  static constexpr uint64_t kMaxNamesBytes = 1ull << 32;
  static constexpr uint64_t kMaxFileBytes = 1ull << 50;  // 1 PiB
  static constexpr uint64_t kMaxChunks = 1ull << 40;

  // Validates and adopts serialized bytes. kCorruption if anything is off.
  static Result<Manifest> Parse(std::string bytes);
  // Maps a manifest file read-only and validates it.
  static Result<Manifest> Load(const std::string& path);

  Manifest() = default;

  uint64_t dataset_uid() const;
  uint32_t version() const;
  uint64_t chunk_size() const;
  uint32_t entry_count() const;
  uint64_t file_count() const;
  uint64_t total_bytes() const;   // sum of file sizes
  uint64_t total_chunks() const;
  int64_t created_unix() const;

  // The whole serialized manifest (what is sent over the wire and stored).
  std::string_view bytes() const { return {data_, size_}; }
  uint64_t checksum() const;

  // REQUIRES: i < entry_count().
  const EntryRecord& entry(uint32_t i) const { return entries_[i]; }
  std::string_view name(uint32_t i) const;
  // REQUIRES: entry(i).is_symlink().
  std::string_view symlink_target(uint32_t i) const;
  // The entry's path relative to the dataset root ("" for the root).
  std::string Path(uint32_t i) const;

  // The child of directory `dir` called `name`, if any.
  std::optional<uint32_t> Lookup(uint32_t dir, std::string_view name) const;
  // The entry at a relative path ("a/b/c"; "" is the root).
  std::optional<uint32_t> Resolve(std::string_view path) const;

  // For file entry `file`: its chunks, and the key of chunk `index`.
  uint64_t chunk_count(uint32_t file) const { return ChunkCount(entries_[file].size, chunk_size()); }
  ChunkKey chunk_key(uint32_t file, uint32_t index) const {
    return ChunkKey{entries_[file].file_key(), index};
  }

 private:
  std::shared_ptr<const void> storage_;  // keeps data_ alive
  const char* data_ = nullptr;
  size_t size_ = 0;
  const EntryRecord* entries_ = nullptr;
  const char* names_ = nullptr;
};

// Builds a manifest from the entries of an origin walk, in any order.
//
//   ManifestBuilder b(uid, /*version=*/1, kDefaultChunkSize);
//   b.SetRoot(0755 | S_IFDIR, 0, 0, mtime);
//   b.Add("train/a.jpg", S_IFREG | 0644, uid, gid, size, mtime);  // ...
//   Result<std::string> bytes = b.Finish();
//
// Thread-safety: one thread.
class ManifestBuilder {
 public:
  ManifestBuilder(uint64_t dataset_uid, uint32_t version, uint64_t chunk_size);

  void SetRoot(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime_ns);
  // `path` is relative, '/'-separated; `mode` carries the type bits
  // (S_IFREG, S_IFDIR or S_IFLNK). `symlink_target` only for symlinks.
  void Add(std::string path, uint32_t mode, uint32_t uid, uint32_t gid, uint64_t size,
           int64_t mtime_ns, std::string symlink_target = {});

  size_t size() const { return items_.size(); }

  // Lays out and serializes the manifest. kInvalidArgument if an entry's parent
  // directory is missing, a path is given twice or a name is unsafe.
  Result<std::string> Finish(int64_t created_unix);

 private:
  struct Item {
    std::string path;
    std::string target;
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode, uid, gid;
  };
  uint64_t uid_;
  uint32_t version_;
  uint64_t chunk_size_;
  Item root_{};
  std::vector<Item> items_;
};

}  // namespace hoard
