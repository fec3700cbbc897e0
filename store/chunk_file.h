// File: store/chunk_file.h
//
// The format of one chunk file, shared by the chunk store (which writes them)
// and the FUSE mount (which reads local chunks directly). A chunk file holds
// the chunk's bytes at their own offsets ([0, length): offset o of the chunk
// is offset o of the file, so reads need no translation) and a 32-byte
// record, little-endian:
//     u64 magic "HRDCHNK1"
//     u64 length
//     u64 checksum (Checksum64 of the bytes)
//     u64 dataset uid
// The record lives in one of two places (ChunkLayout):
//   kXattr    in the extended attribute user.hoard.chunk, and the file is
//             exactly the chunk's bytes. The kernel can then serve a whole
//             file of one chunk from the chunk file itself (FUSE passthrough:
//             fuse/passthrough.h), which reads a backing file to its end.
//   kTrailer  right after the bytes, at [length, length + 32): the first
//             format, and the one kept where the filesystem has no user
//             xattrs. A store that can use xattrs converts such files when it
//             opens (MoveTrailerToXattr).
// Readers accept both. A file whose xattr is set and whose trailer is still
// there (a conversion cut short) reads as kTrailer until converted again.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

inline constexpr uint64_t kChunkMetaMagic = 0x314B4E4843445248ULL;  // "HRDCHNK1"
// The record's size; the stores also count it as each chunk's overhead.
inline constexpr size_t kChunkMetaSize = 32;
inline constexpr char kChunkMetaXattr[] = "user.hoard.chunk";

enum class ChunkLayout : uint8_t { kXattr, kTrailer };

struct ChunkMeta {
  uint64_t length = 0;
  uint64_t checksum = 0;
  uint64_t dataset_uid = 0;
  ChunkLayout layout = ChunkLayout::kXattr;

  uint64_t file_size() const { return length + (layout == ChunkLayout::kTrailer ? kChunkMetaSize : 0); }
};

void EncodeChunkMeta(const ChunkMeta& m, char out[kChunkMetaSize]);
// Decodes a record found in `layout`'s place of a file of `file_size` bytes.
// kCorruption if the magic is wrong or the length disagrees with the file size.
Result<ChunkMeta> DecodeChunkMeta(std::string_view bytes, uint64_t file_size, ChunkLayout layout);

// Reads the record of an open chunk file of `file_size` bytes: the xattr,
// else the trailer. kCorruption if neither holds a record that fits the size.
Result<ChunkMeta> ReadChunkMeta(int fd, uint64_t file_size);

// Whether files in `dir` can hold the xattr: creates, tags and removes a
// probe file. kXattr or kTrailer; an error only if the probe cannot be made.
Result<ChunkLayout> ProbeChunkLayout(const std::string& dir);

// Sets the xattr of a chunk file (its layout must be kXattr).
Status WriteChunkMetaXattr(int fd, const ChunkMeta& m);

// Converts the kTrailer file `path` (open as `fd`) in place: sets the xattr,
// then cuts the trailer off. A crash between the two leaves a file that reads
// as kTrailer, to be converted again.
Status MoveTrailerToXattr(int fd, const std::string& path, const ChunkMeta& m);

// Reads the whole chunk data of an open chunk file and checks it against the
// record's checksum; kCorruption on mismatch.
Status VerifyChunkFile(int fd, const ChunkMeta& m);

// Block sums: a chunk of more than one kSumBlockBytes block also carries the
// checksum (Checksum64) of each block, little-endian u64s in the xattr
// user.hoard.sums, so that a reader that must check part of a chunk again
// (its pages left the page cache: common/page_cache.h) reads and checks only
// the blocks it serves, not a whole 64 MiB chunk per 4 KiB read. A file
// without them (one block, written before they existed, a filesystem without
// xattrs) is checked whole. VerifyChunkFile and ReadAndVerifyChunkFile check
// them too when present.
inline constexpr uint64_t kSumBlockBytes = 1u << 20;
inline constexpr char kChunkSumsXattr[] = "user.hoard.sums";
// The xattr's value for `data` ("" for a chunk of one block).
std::string EncodeBlockSums(std::string_view data);
// Sets it on a chunk file (nothing for a chunk of one block).
Status WriteBlockSums(int fd, std::string_view data);
// The file's block sums for a chunk of `length`; nullopt if it has none.
// kCorruption if the xattr does not fit the length.
Result<std::optional<std::vector<uint64_t>>> ReadBlockSums(int fd, uint64_t length);
// Reads [offset, offset + len) of the chunk's data through the page cache,
// widened to whole blocks (or the whole chunk, without block sums), and
// checks it; `scratch` is the caller's buffer. kCorruption on a mismatch.
Status VerifyChunkRange(int fd, const ChunkMeta& m, uint64_t offset, uint64_t len, char* scratch,
                        size_t scratch_size);

// Reads a chunk file of `file_size` bytes front to back exactly once, reading
// its record and checking the data against the record's checksum; `scratch`
// is the caller's buffer (the mount keeps one per thread). kCorruption if the
// record or the checksum is wrong.
Result<ChunkMeta> ReadAndVerifyChunkFile(int fd, uint64_t file_size, char* scratch, size_t scratch_size);

}  // namespace hoard
