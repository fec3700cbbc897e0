// File: store/replica_store.h
//
// ReplicaStore holds a node's copies of checkpoint bytes (issue 6), under
// CKPT = STORE/ckpt (STORE: the chunk store's directory, store/chunk_store.h):
//
//   CKPT/chunks/<id>-<gen>-<index>-<checksum>
//                                    a replica: chunk `index` of generation
//                                    `gen` of file `id` (decimal numbers), with
//                                    XXH3 `checksum` (16 hex digits), sent by a
//                                    writer with PutCkptChunk. The chunk's
//                                    bytes, then a 24-byte trailer: magic,
//                                    length, checksum (little-endian). The
//                                    checksum is in the name so that Puts of
//                                    one chunk with other bytes never replace
//                                    each other (a late write-behind Put must
//                                    not land over the bytes a commit counted).
//                                    Files named without it (older versions)
//                                    are renamed by Open, from their trailer.
//   CKPT/chunks/*.tmp.*              a replica being written; removed at Open.
//   CKPT/files/<id>                  the whole-file copy written by the mount of
//                                    this node (the writer's L copy). Plain
//                                    bytes, written in place by the mount,
//                                    which stamps it with the generation it
//                                    holds (xattr user.hoard.gen, decimal)
//                                    after each commit and removes the stamp
//                                    before it writes again.
//
// Durability: Put writes a .tmp file (with O_DIRECT where the filesystem has
// it: nothing is gained by a page-cache copy of bytes that are fsynced at
// once), fsyncs it, renames it into place and fsyncs the directory before it
// returns OK; only then may the PutCkptChunk
// reply go out, since the writer counts this copy towards level R. A file torn
// by a crash (renamed before its data reached the disk, or cut short) fails
// its trailer or checksum on Read, is removed, and is reported absent.
//
// Reading whole-file copies: the mount rewrites files/<id> in place, so its
// bytes may be newer than every committed generation. Read serves a chunk
// from it only when the bytes at index*chunk_size hash to the checksum asked
// for; otherwise the chunk is reported absent (kNotFound), never wrong.
//
// Contract with the mount (checkpoint/ckpt_fs.h), which writes files/<id>:
//   - WholeFilePath(store_dir, id) is the file's path.
//   - While the mount has the file open for writing, and until the commit of
//     what it wrote was answered by the coordinator, it holds flock(LOCK_SH)
//     on it (on any fd of that file). DropFilesExcept never deletes a file
//     it cannot flock(LOCK_EX | LOCK_NB), so a file being written, or
//     written and not yet committed, survives eviction even when the
//     coordinator's keep list predates its creation.
//   - Eviction may unlink the file between the mount's open() and its
//     flock(); so after taking LOCK_SH the mount checks that its fd is still
//     the file at the path (fstat().st_nlink > 0) and opens it again if not.
//   - The mount creates files/ (MakeDirs) if missing; Open creates it too.
//
// Eviction never deletes a file changed after `asked_at - kEvictionGrace`:
// a replica stored while a CkptWork reply was in flight (for a file the
// reply's keep list could not know about yet) stays until the next round.
//
// Thread-safety: all methods may be called concurrently. There is no
// in-memory index: the directory is the state, and every operation on one
// chunk file is a single rename or unlink, atomic by itself. Concurrent Puts
// of one chunk write distinct .tmp files and rename the same bytes.
// One ReplicaStore per directory (the node agent's; the chunk store's LOCK
// file already keeps a second agent away).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/direct_io.h"
#include "common/quarantine.h"
#include "common/result.h"

namespace hoard {

class ReplicaStore {
 public:
  struct Options {
    std::string dir;  // CKPT: STORE/ckpt; created if missing
    std::shared_ptr<spdlog::logger> logger;  // required
    // Fault injection (tests): called before each write(2) of a replica's
    // .tmp file with the bytes written so far; a non-OK status is returned
    // as if the write failed with it (kNoSpace stands for ENOSPC).
    std::function<Status(uint64_t written)> before_write;
  };

  // A replica chunk on disk (its name; the bytes are checked on Read).
  struct Held {
    uint64_t id = 0;
    uint64_t gen = 0;
    uint32_t index = 0;
    uint64_t length = 0;  // data bytes (the file's size minus the trailer)
    uint64_t checksum = 0;
    bool legacy = false;  // named without its checksum (torn: Open could not rename it)
    bool operator==(const Held&) const = default;
  };
  struct Listing {
    std::vector<Held> chunks;        // sorted by (id, gen, index, checksum)
    std::vector<uint64_t> files;     // ids of whole-file copies, sorted
  };
  struct Usage {
    uint64_t chunk_bytes = 0;  // replica files, trailers included
    uint64_t file_bytes = 0;   // whole-file copies
    uint64_t chunks = 0;
    uint64_t files = 0;
  };

  static constexpr std::chrono::seconds kEvictionGrace{10};

  // Creates CKPT/chunks and CKPT/files if missing and removes leftover .tmp
  // files of replicas whose Put a crash interrupted.
  static Result<std::unique_ptr<ReplicaStore>> Open(Options options);

  // Stores a replica, durably (see the top). kCorruption if `bytes` does not
  // hash to `checksum` (nothing written); kNoSpace if the disk is full (no
  // file left behind). A copy already there is replaced by the same bytes.
  Status Put(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum, std::string_view bytes);

  // The chunk's bytes: from the replica file, else from the whole-file copy
  // at index * chunk_size, and only if they are `chunk_length` bytes hashing
  // to `checksum`. kNotFound otherwise (absent, torn, or other bytes).
  Result<std::string> Read(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum, uint64_t chunk_size,
                           uint64_t chunk_length);

  // Read without a store: the same bytes from the replica store in
  // `ckpt_dir` (STORE/ckpt), for the mount reading its own node's copies
  // with no RPC. A damaged replica is only skipped here (the node agent
  // removes it when it next reads it).
  static Result<std::string> ReadCopy(std::string_view ckpt_dir, uint64_t id, uint64_t gen, uint32_t index,
                                      uint64_t checksum, uint64_t chunk_size, uint64_t chunk_length);

  // Whether a replica file of the chunk with that checksum exists (not
  // verified; Read verifies).
  bool HasReplica(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum) const;

  Listing List() const;
  Usage usage() const;

  // What Scrub found.
  struct ScrubResult {
    uint64_t bytes = 0;    // bytes read from the disk
    bool corrupt = false;  // and moved to the quarantine
    bool gone = false;     // no such file (dropped meanwhile)
  };
  // Reads replica `h` from the disk, bypassing the page cache (O_DIRECT where
  // the filesystem has it), against its trailer and checksum; a file that
  // fails is moved to `quarantine` (node/scrubber.h, which then has the
  // drainer rebuild it).
  Result<ScrubResult> Scrub(const Held& h, const QuarantineDir& quarantine);

  // Deletes the replicas and whole-file copies of every id not in `keep`
  // (and below `keep_from_id` when it is not 0: ids the coordinator had not
  // yet given out when it answered), except whole-file copies the mount holds
  // an flock on, and files modified after asked_at - kEvictionGrace (see the
  // top). Returns how many files were deleted.
  size_t DropFilesExcept(const std::set<uint64_t>& keep, std::chrono::system_clock::time_point asked_at,
                         uint64_t keep_from_id = 0);
  // Deletes the replica files named exactly (the coordinator's
  // CkptWorkReply.drop: copies no generation anyone may read uses). Returns
  // how many were there.
  struct Ref {
    uint64_t id = 0, gen = 0;
    uint32_t index = 0;
    uint64_t checksum = 0;
  };
  size_t DropReplicas(const std::vector<Ref>& refs);
  // Deletes each whole-file copy files/<id> whose stamp says it holds
  // generation `gen` or older: never an unstamped one (being written, or
  // from before stamps), nor one the mount holds an flock on.
  size_t DropWholeFiles(const std::vector<std::pair<uint64_t, uint64_t>>& id_gens);

  // The stamp on a whole-file copy (see the top): set by the mount after a
  // commit, removed before it writes the file again. Best effort on a file
  // system without user xattrs (then the copy is only ever evicted whole,
  // by keep_files). The mount's readers on this node trust a stamp that
  // matches the generation they read and read the file directly
  // (checkpoint/ckpt_fs.h), so ClearGeneration, when it removed a stamp,
  // fsyncs the file: the removal is on the disk before any byte changes,
  // and a crash in the middle of a rewrite never leaves a stamp on bytes
  // that are not its generation's.
  static constexpr const char* kGenXattr = "user.hoard.gen";
  static void StampGeneration(int fd, uint64_t gen);
  static void ClearGeneration(int fd);
  static std::optional<uint64_t> StampedGeneration(int fd);

  const std::string& dir() const { return options_.dir; }
  // STORE/ckpt/files/<id> for the chunk store directory STORE (the mount's
  // path for its whole-file copy).
  static std::string WholeFilePath(std::string_view store_dir, uint64_t id);
  std::string ChunkPath(uint64_t id, uint64_t gen, uint32_t index, uint64_t checksum) const;

 private:
  explicit ReplicaStore(Options options);
  // Reads and checks a replica file; kNotFound if absent, kCorruption if
  // torn or not the bytes of `checksum` (the caller removes it).
  static Result<std::string> ReadReplica(const std::string& path, uint64_t checksum, uint64_t chunk_length);
  // Bytes [index * chunk_size, + chunk_length) of the whole-file copy at
  // `path`, if they hash to `checksum`; kNotFound otherwise.
  static Result<std::string> ReadFromWholeFile(const std::string& path, uint64_t index, uint64_t chunk_size,
                                               uint64_t chunk_length, uint64_t checksum);
  // The file a listed replica is in.
  std::string PathOf(const Held& h) const;
  // Renames a replica named without its checksum (an older version's) to
  // its name now, with the checksum from its trailer; leaves a torn one.
  void RenameLegacy(const std::string& path, const Held& h);
  // Writes bytes and trailer to the .tmp file (opened by direct_io_) and
  // fsyncs it.
  Status WriteTmp(int fd, const std::string& trailer, std::string_view bytes);
  std::string chunks_dir() const;
  std::string files_dir() const;

  Options options_;
  std::atomic<uint64_t> tmp_counter_{0};
  DirectIo direct_io_;  // replicas are written with O_DIRECT where the filesystem takes it
};

}  // namespace hoard
