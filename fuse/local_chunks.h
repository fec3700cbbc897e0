// File: fuse/local_chunks.h
//
// LocalChunks: the chunk files on this node's disk that the mount reads
// directly, with no IPC: the node agent's chunk store (its `chunks/`
// directory) and the mount's own read tier (fuse/read_tier.h: copies of
// chunks it fetched over the network before). Steps 1 and 1b of
// fuse/chunk_reader.h.
//
// A chunk file is checked the first time this mount uses it (record and
// checksum, in one pass; remembered in a ChunkSet) and, before each use,
// again whole whenever any page of it left the page cache: a dropped page
// comes back from a disk that may have rotted since (common/page_cache.h,
// block sums in store/chunk_file.h). Whole, not the range read: a read brings
// neighbouring pages in by read-ahead, unchecked. A file found corrupt is
// never used again (remembered by chunk and inode), its pages are dropped,
// and the read goes on to the next source; the node agent, asked next,
// checks the chunk it serves, quarantines it and fetches it again. A bad
// copy in the read tier is discarded. The fds are cached per thread
// (fuse/local_fds.h) and dropped by ForgetFds.
//
// Invariants: while no check of a chunk is in flight (striped counters) and
// no file was marked bad since a caller's generation, every cached page of a
// chunk file is one a check read. A file in `bad_` is never served.
//
// Thread-safety: every method may be called from any thread; no lock (atomic
// sets and counters). The read tier's writer calls back on_stored from its
// thread; the destructor stops it first.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/result.h"
#include "common/single_flight.h"
#include "fuse/chunk_set.h"
#include "fuse/local_fds.h"
#include "fuse/namespace.h"
#include "fuse/read_counters.h"
#include "fuse/read_tier.h"
#include "store/chunk_file.h"
#include "striping/chunk_key.h"

struct stat;

namespace hoard::fuse {

class LocalChunks {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  struct Options {
    std::string local_store;  // the node agent's chunk store directory; empty = none
    // The read tier: its directory ("" = none), the most it may hold, and
    // the disk space it leaves free.
    std::string read_tier_dir;
    uint64_t read_tier_bytes = 0;
    uint64_t read_tier_min_free = 0;
    std::shared_ptr<spdlog::logger> logger;
  };

  // `counters` outlives this object (local_bytes, corrupt_local_chunks,
  // rechecked_ranges).
  LocalChunks(Options options, ReadCounters* counters);
  ~LocalChunks();
  LocalChunks(const LocalChunks&) = delete;
  LocalChunks& operator=(const LocalChunks&) = delete;

  // The local chunk file of chunk `index` of file `entry`, checked (above),
  // or -1 when the chunk is not held locally (or failed its check, which is
  // logged). The fd is borrowed from this thread's LocalFds and stays valid
  // until `deferred` is destroyed. A hit costs no lock or allocation, and one
  // cachestat(2).
  int LocalFd(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
              LocalFds::Deferred* deferred);

  // Makes every thread drop its cached chunk fds at its next read, so chunk
  // files deleted from the store (evicted, dataset removed) are released.
  void ForgetFds() { generation_.fetch_add(1, std::memory_order_relaxed); }

  // The whole chunk read into memory from a local file, checked in the
  // buffer it is returned in (as the agent does), or null when no local file
  // holds it (or it failed, then marked bad). Its own fd: one from the
  // thread's cache could evict an fd a request has queued for its reply.
  Bytes ReadCopy(const MountedDataset& ds, uint32_t entry, uint32_t index);

  // Whether the store or the read tier holds the chunk file (not checked).
  bool Held(const ChunkKey& key);

  // Offers a chunk fetched over the network to the read tier, unless this
  // node's agent holds it (it filled a chunk it owns while serving us).
  void KeepCopy(const MountedDataset& ds, const ChunkKey& key, const Bytes& bytes);

  // The read tier, or null when there is none.
  ReadTier* read_tier() { return tier_.get(); }
  const ReadTier* read_tier() const { return tier_.get(); }

 private:
  // Opens and (first time) verifies a local chunk file; -1 if unusable.
  int OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index, const ChunkKey& key);
  // Checks [offset, offset + len) of an open chunk file again, through the
  // page cache; false (the file marked bad if corrupt).
  bool Recheck(const MountedDataset& ds, const ChunkKey& key, int fd, uint64_t offset, uint64_t len);
  // Records a corrupt chunk file (by inode) so it is never served again,
  // drops its cached pages and every thread's cached fds.
  void MarkBad(const MountedDataset& ds, const ChunkKey& key, int fd, const struct stat& st, const Status& why);
  static uint64_t BadFingerprint(uint64_t chunk_fp, uint64_t ino);
  // DIR/chunks of the local store, opened on first use (the node agent may
  // create the store after the mount starts); -1 while it does not exist.
  int ChunksDir();
  static bool HeldIn(int dir, const ChunkKey& key);

  const Options options_;
  ReadCounters* counters_;
  const uint64_t id_;  // this object's key in every thread's LocalFds
  std::atomic<uint64_t> generation_{1};  // LocalFds entries of older ones are dropped; bumped by MarkBad
  // Checks of local chunk files in flight, by stripe of the chunk key
  // (LocalFd: pages a check is reading in are not yet known good).
  static constexpr size_t kCheckStripes = 64;
  static size_t CheckStripe(const ChunkKey& key) { return size_t(ChunkSet::Fingerprint(key) % kCheckStripes); }
  std::array<std::atomic<uint32_t>, kCheckStripes> checking_{};
  std::atomic<int> chunks_dir_{-1};
  ChunkSet verified_;
  // Chunk files (chunk and inode) found corrupt: never opened again.
  ChunkSet bad_;
  // Chunks last found in the read tier (or stored there): their open tries
  // the tier's directory first. On a node of N, (N-1)/N of a dataset is
  // there, and a failed lookup in the agent's directory costs as much as
  // a found one.
  ChunkSet in_tier_;
  SingleFlight<ChunkKey, Result<ChunkMeta>, ChunkKeyHash> verify_flights_;
  std::unique_ptr<ReadTier> tier_;  // null = none; set in the constructor, reset first in the destructor
};

}  // namespace hoard::fuse
