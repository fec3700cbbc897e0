// File: striping/chunk_key.h
//
// A chunk is identified by the file it belongs to and its index in that file.
//
// FileKey identifies one version of one file of one dataset: a 128-bit hash of
// (dataset uid, path, size, mtime). A file that changes at the origin gets a new
// key, so bytes of two versions are never mixed and an unchanged file keeps its
// key (and its cached chunks) across dataset refreshes.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/hash.h"

namespace hoard {

using FileKey = Hash128Value;

struct ChunkKey {
  FileKey file;
  uint32_t index = 0;

  bool operator==(const ChunkKey&) const = default;
  auto operator<=>(const ChunkKey&) const = default;

  // "<32 hex digits of file>-<8 hex digits of index>", the chunk's file name
  // in a chunk store and its name in logs.
  std::string Name() const;
  // The 64-bit value placement ranks nodes by.
  uint64_t PlacementHash() const { return Mix64(file.lo ^ file.hi, index); }
};

FileKey MakeFileKey(uint64_t dataset_uid, std::string_view path, uint64_t size, int64_t mtime_ns);

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const { return static_cast<size_t>(k.PlacementHash()); }
};

}  // namespace hoard
