// File: node/chunk_file.h
//
// The format of one chunk file, shared by the chunk store (which writes them)
// and the FUSE mount (which reads local chunks directly):
//
//   [0, length)              the chunk's bytes, so offset o of the chunk is
//                            offset o of the file (reads need no translation)
//   [length, length + 32)    trailer, little-endian:
//                              u64 magic "HRDCHNK1"
//                              u64 length
//                              u64 checksum (Checksum64 of the bytes)
//                              u64 dataset uid
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace hoard {

inline constexpr uint64_t kChunkTrailerMagic = 0x314B4E4843445248ULL;  // "HRDCHNK1"
inline constexpr size_t kChunkTrailerSize = 32;

struct ChunkTrailer {
  uint64_t length = 0;
  uint64_t checksum = 0;
  uint64_t dataset_uid = 0;
};

void EncodeChunkTrailer(const ChunkTrailer& t, char out[kChunkTrailerSize]);
// kCorruption if the magic is wrong or the length disagrees with the file size.
Result<ChunkTrailer> DecodeChunkTrailer(std::string_view bytes, uint64_t file_size);

// Reads the trailer of an open chunk file of `file_size` bytes.
Result<ChunkTrailer> ReadChunkTrailer(int fd, uint64_t file_size);

// Reads the whole chunk data of an open chunk file and checks it against the
// trailer's checksum; kCorruption on mismatch.
Status VerifyChunkFile(int fd, const ChunkTrailer& trailer);

// Reads a chunk file of `file_size` bytes front to back exactly once, decoding
// its trailer and checking the data against the trailer's checksum; `scratch`
// is the caller's buffer (the mount keeps one per thread). kCorruption if the
// trailer or the checksum is wrong.
Result<ChunkTrailer> ReadAndVerifyChunkFile(int fd, uint64_t file_size, char* scratch, size_t scratch_size);

}  // namespace hoard
