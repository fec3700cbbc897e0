// File: striping/chunking.h
//
// How a file is cut into chunks: fixed-size pieces of `chunk_size` bytes, the
// last one shorter. A file smaller than a chunk is one chunk; an empty file has
// no chunks (there is nothing to cache).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace hoard {

// Chunk sizes a dataset may use: a power of two in [64 KiB, 64 MiB].
inline constexpr uint64_t kDefaultChunkSize = 4ull << 20;
inline constexpr uint64_t kMinChunkSize = 64ull << 10;
inline constexpr uint64_t kMaxChunkSize = 64ull << 20;

inline bool ValidChunkSize(uint64_t chunk_size) {
  return chunk_size >= kMinChunkSize && chunk_size <= kMaxChunkSize &&
         (chunk_size & (chunk_size - 1)) == 0;
}

// Number of chunks of a file of `file_size` bytes. REQUIRES: ValidChunkSize.
inline uint64_t ChunkCount(uint64_t file_size, uint64_t chunk_size) {
  return (file_size + chunk_size - 1) / chunk_size;
}

// Bytes in chunk `index` of a file. REQUIRES: index < ChunkCount(...).
inline uint64_t ChunkLength(uint64_t file_size, uint64_t chunk_size, uint64_t index) {
  uint64_t start = index * chunk_size;
  uint64_t left = file_size - start;
  return left < chunk_size ? left : chunk_size;
}

// The chunk holding byte `offset` of a file.
inline uint64_t ChunkIndexOf(uint64_t offset, uint64_t chunk_size) { return offset / chunk_size; }

}  // namespace hoard
