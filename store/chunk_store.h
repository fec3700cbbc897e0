// File: store/chunk_store.h
//
// ChunkStore keeps cached chunks in a directory that stands for a node's NVMe
// disk, with a checksum per chunk and a capacity limit.
//
// On-disk layout (see also docs/architecture.md):
//   DIR/chunks/<hh>/<chunk name>   one file per chunk: the chunk's bytes from
//                                  offset 0, and a 32-byte record of its length,
//                                  checksum and dataset uid in the xattr
//                                  user.hoard.chunk (store/chunk_file.h; a
//                                  trailer after the bytes where the filesystem
//                                  has no user xattrs, converted at open where
//                                  it has). <hh> is the first two hex digits
//                                  of the name.
//   DIR/chunks/<hh>/*.tmp          a chunk being written; removed at open.
//   DIR/.xattr-probe.<pid>          made and removed at open, to learn whether
//                                  the filesystem takes user xattrs.
// A chunk file appears only complete (written as .tmp, then renamed), and is
// never modified in place, so a reader that opened it (the FUSE mount reads
// chunk files directly) keeps consistent bytes even if the chunk is removed.
//
// Integrity: Put computes the checksum from the bytes it is given and reads
// the written file back against it before the chunk enters the index, so a
// chunk that is Contained (and reported cached) was verified once. Chunk
// files are written and read back with O_DIRECT where the filesystem has it
// (common/direct_io.h), so the read-back checks the disk, not a page cache
// copy, and a fill costs no copy into the page cache. A disk may rot later, so
// Read never trusts an old check: a read of a whole chunk (what peers and
// mounts ask for) is checked in the buffer it returns; a read of part of one
// is served only while the whole chunk has stayed in the page cache since it
// was checked (common/page_cache.h), else the chunk is read and checked again
// first. Scrub reads a chunk from the disk (O_DIRECT) and checks it; the node's
// scrubber (node/scrubber.h) runs it over every chunk on a schedule. A chunk
// that fails is quarantined (moved to DIR/quarantine: common/quarantine.h) and
// removed from the index, Options::on_corrupt is told (the agent fetches it
// again), and Read returns kCorruption, so the caller fetches it elsewhere.
//
// Durability: chunk files are not fsynced. The store caches bytes the origin
// still has, so a chunk lost in a crash costs one refetch; and a chunk file
// torn by a crash (renamed before its data reached the disk) fails its record
// check at open or its checksum at first read and is dropped, so a torn file
// is never served. An fsync per chunk would only slow every cache fill.
//
// Capacity: used bytes are the chunk files' sizes: the data, plus the
// trailers of files that have one. The capacity may be shared with other
// bytes on the same disk that the store does not hold (the node's checkpoint
// copies and the mount's read tier: store/disk_usage.h), which the owner
// keeps up to date with SetOtherBytes. Put fails with kNoSpace, and writes
// nothing, when it would push usage plus those other bytes past the
// capacity, or when the disk itself is full (ENOSPC). Eviction is the
// caller's decision (Remove).
//
// Thread-safety: all methods may be called concurrently. One mutex guards the
// in-memory index; file I/O runs outside it. A Put or Remove marks its key busy
// while it touches the key's file, and a Put of a busy key waits, so the file
// at ChunkPath always belongs to the index entry (if any) for that key.
// One ChunkStore per directory at a time: Open deletes any .tmp file it finds.
//
// Invariants (under mu_): a key is never both in index_ and in busy_; an entry
// enters index_ only after its file was renamed into place and leaves it before
// the file is unlinked; used_bytes_ is the sum of file_bytes() over
// index_, and used_bytes_ + reserved_bytes_ + other_bytes_ <= capacity_bytes
// (when set) when each Put was admitted (Open may find more on disk, and
// other bytes may grow afterwards: checkpoints are never refused).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/direct_io.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/result.h"
#include "store/chunk_file.h"
#include "common/quarantine.h"
#include "striping/chunk_key.h"

namespace hoard {

class ChunkStore {
 public:
  struct Options {
    std::string dir;                 // created if missing
    uint64_t capacity_bytes = 0;     // 0 = unlimited (only the disk limits)
    // Read each Put's file back against its checksum before it is indexed
    // (see Integrity). A store whose chunks are only ever read through a
    // reader that verifies them at first use (the mount's read tier) may
    // skip this second pass over the bytes.
    bool verify_puts = true;
    std::shared_ptr<spdlog::logger> logger;  // required
    // Called, on the thread that found it, after a chunk failed its checksum
    // and was quarantined. May be empty.
    std::function<void(const ChunkKey&, uint64_t dataset_uid)> on_corrupt;
  };

  // What Scrub found.
  struct ScrubResult {
    uint64_t bytes = 0;    // data bytes read from the disk
    bool corrupt = false;  // and quarantined
    bool gone = false;     // not in the store (removed meanwhile)
  };

  struct Usage {
    uint64_t used_bytes = 0;
    uint64_t capacity_bytes = 0;  // 0 = unlimited
    uint64_t other_bytes = 0;     // SetOtherBytes: other kinds sharing the capacity
    uint64_t chunks = 0;
    // Since the store was opened: chunks removed (evicted: datasets removed,
    // copies no longer owned, old versions, corrupt chunks) and their bytes.
    uint64_t removed_chunks = 0;
    uint64_t removed_bytes = 0;
    // Whether a chunk file of `need` bytes would fit now (Put's test, less
    // the Puts in flight).
    bool Fits(uint64_t need) const {
      return capacity_bytes == 0 || used_bytes + other_bytes + need <= capacity_bytes;
    }
  };

  // Opens or creates the store and indexes the chunks already in it (reading
  // each record, and moving trailers to xattrs where it can; files with a bad
  // record and leftover .tmp files are removed).
  static Result<std::unique_ptr<ChunkStore>> Open(Options options);

  // Stores a complete chunk. OK (and nothing written) if the chunk is already
  // present. kNoSpace when over capacity or the disk is full.
  Status Put(const ChunkKey& key, uint64_t dataset_uid, std::string_view data);

  // Copies `len` bytes at `offset` of the chunk into `buf` (fewer if the chunk
  // is shorter; 0 when offset == length); returns the count. kNotFound if
  // absent, kInvalidArgument if offset > length, kCorruption if the checksum
  // failed (the chunk is then removed).
  Result<size_t> Read(const ChunkKey& key, uint64_t offset, size_t len, char* buf);

  // Reads chunk `key` from the disk, bypassing the page cache, against its
  // record and checksum; quarantines it if it fails (see Integrity).
  Result<ScrubResult> Scrub(const ChunkKey& key);
  // Chunks found corrupt by Read since the store was opened (Scrub's finds
  // are the caller's to count: its ScrubResult says).
  uint64_t corrupt_chunks() const { return corrupt_chunks_.load(std::memory_order_relaxed); }
  const std::string& quarantine_dir() const { return quarantine_.dir(); }

  bool Contains(const ChunkKey& key) const;
  // Data length of a stored chunk; kNotFound if absent.
  Result<uint64_t> Length(const ChunkKey& key) const;

  // Removes one chunk; OK if it was absent.
  Status Remove(const ChunkKey& key);
  // Removes every chunk of a dataset; returns how many were removed.
  size_t RemoveDataset(uint64_t dataset_uid);

  // Calls fn for every stored chunk (under no lock: a snapshot of the index).
  void ForEach(const std::function<void(const ChunkKey&, uint64_t dataset_uid, uint64_t length)>& fn) const;

  Usage usage() const;
  const std::string& dir() const { return options_.dir; }
  // Bytes of other kinds on the disk that count against the capacity too
  // (see Capacity at the top); replaces the last value.
  void SetOtherBytes(uint64_t bytes);

  // Where the chunk's file lives in a store rooted at `dir`; the mount uses
  // this to read local chunks directly.
  static std::string ChunkPath(std::string_view dir, const ChunkKey& key);
  // The same path relative to DIR/chunks ("hh/NAME"), written into `out`
  // without allocating: the mount opens chunks with openat() per read.
  static constexpr size_t kRelativePathSize = 45;  // 2 + 1 + 41 + NUL
  static void RelativeChunkPath(const ChunkKey& key, char (&out)[kRelativePathSize]);

 private:
  struct Entry {
    uint64_t dataset_uid = 0;
    uint64_t length = 0;    // data bytes
    uint64_t checksum = 0;
    bool trailer = false;   // the record follows the data (no xattrs here)
    bool verified = false;  // checksum checked since open/put
    // Unique per Put or per file found at Open. A reader that looked an entry
    // up before opening the file checks it again afterwards; the same
    // generation proves the fd is this entry's file, not a re-Put one.
    uint64_t generation = 0;

    uint64_t file_bytes() const { return length + (trailer ? kChunkMetaSize : 0); }
  };

  explicit ChunkStore(Options options);
  // An unverified index entry for a file holding `m`.
  static Entry MakeEntry(const ChunkMeta& m, uint64_t generation);

  // Indexes the chunk files under dir; called once by Open, before the store
  // is shared.
  Status Load() EXCLUDES(mu_);
  // Writes the chunk as a .tmp file and renames it into place. REQUIRES: the
  // key is busy (so no other thread writes or unlinks its file).
  Status WriteChunkFile(const ChunkKey& key, const ChunkMeta& meta, std::string_view data);
  // Removes the entry (only if its generation is `generation`, when given)
  // and then its file (into the quarantine, if asked); returns whether an
  // entry was removed.
  Result<bool> RemoveEntry(const ChunkKey& key, std::optional<uint64_t> generation, bool quarantine = false);
  // Unlinks (or quarantines) the files of entries already taken out of
  // index_ and marked busy, then clears their busy marks.
  Status UnlinkTaken(const std::vector<ChunkKey>& keys, bool quarantine = false);
  // Logs a chunk that failed, quarantines it and tells on_corrupt.
  void ReportCorrupt(const ChunkKey& key, const Entry& e, const Status& fault, bool by_read);
  // Whether `key` is indexed with `generation`.
  bool SameEntry(const ChunkKey& key, uint64_t generation) const;
  // "chunk store DIR is full: ..." for a kNoSpace from the disk; other errors
  // get the store's directory as context.
  Status StoreError(const Status& s) const;

  Options options_;
  QuarantineDir quarantine_;
  std::atomic<uint64_t> corrupt_chunks_{0};
  // Checks of part reads in flight, by stripe of the chunk key (Read).
  static constexpr size_t kCheckStripes = 64;
  static size_t CheckStripe(const ChunkKey& key) { return size_t(ChunkKeyHash{}(key) % kCheckStripes); }
  std::array<std::atomic<uint32_t>, kCheckStripes> checking_{};
  struct StripeHold {
    explicit StripeHold(std::atomic<uint32_t>& s) : stripe(s) { stripe.fetch_add(1); }
    ~StripeHold() { stripe.fetch_sub(1); }
    std::atomic<uint32_t>& stripe;
  };
  DirectIo direct_io_;  // chunk files are written with O_DIRECT where the filesystem takes it
  ChunkLayout layout_ = ChunkLayout::kXattr;  // where new files keep their record; set by Load
  UniqueFd lock_fd_;  // holds an exclusive flock on DIR/LOCK while open
  mutable Mutex mu_;
  // Signalled whenever a key leaves busy_.
  CondVar busy_cv_;
  std::unordered_map<ChunkKey, Entry, ChunkKeyHash> index_ GUARDED_BY(mu_);
  // Keys whose file a Put or Remove is writing or unlinking.
  std::unordered_set<ChunkKey, ChunkKeyHash> busy_ GUARDED_BY(mu_);
  uint64_t used_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t reserved_bytes_ GUARDED_BY(mu_) = 0;  // bytes of Puts in flight
  uint64_t other_bytes_ GUARDED_BY(mu_) = 0;     // SetOtherBytes
  uint64_t removed_chunks_ GUARDED_BY(mu_) = 0;
  uint64_t removed_bytes_ GUARDED_BY(mu_) = 0;  // data bytes
  uint64_t next_generation_ GUARDED_BY(mu_) = 1;
};

}  // namespace hoard
