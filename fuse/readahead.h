// File: fuse/readahead.h
//
// Readahead: the mount's sequential read-ahead. A chunk fetched on demand
// costs the reader a whole round trip (to an owner that may itself read the
// origin), so a reader streaming a large file would have one chunk in flight
// at a time, two where the kernel's 4 MiB read-ahead window crosses a chunk
// boundary. NoteRead, called for every read request, follows each file's
// reads. Once a file is read sequentially (kSequentialReads requests in a row
// that start within `sequential_slack` of where its reads so far ended and
// take that end further: FUSE threads pass the requests of one kernel
// read-ahead window in any order), the `chunks` chunks after the one being
// read are queued for `threads` workers (a WorkQueue<AheadTask>), which hand
// each to `fetch` (ChunkReader: through the same single flight as demand
// reads). Read-ahead never goes past the file's last chunk and skips chunks
// that the local store holds (read from there directly) or that are cached
// or reserved already (fuse/chunk_cache.h, whose budget it reserves); a file
// whose reads stop being sequential has its queued read-ahead dropped
// (WorkQueue::DropIf) and its chunks read ahead aged. NoteRead also tells
// its caller whether the read is random (a jump), for which the mount
// fetches just the range, not the chunk.
//
// Files being read are tracked in a small direct-mapped table: a collision
// only makes a file look new, as if it had just been opened.
//
// Invariants: every task queued or running holds one reservation in the
// cache, released when it ends or is dropped; `ahead_to` of a stream never
// passes a chunk that was neither queued nor skipped.
//
// Thread-safety: NoteRead from any thread (one short lock); `fetch` runs on
// the workers. The destructor drops what is queued and waits for the running
// tasks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/work_queue.h"
#include "fuse/chunk_cache.h"
#include "fuse/local_chunks.h"
#include "fuse/namespace.h"
#include "fuse/read_counters.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

// One chunk to read ahead.
struct AheadTask {
  const MountedDataset* ds = nullptr;  // outlives the reader (Namespace keeps it)
  uint32_t entry = 0;
  uint32_t index = 0;
  uint64_t stream = 0;  // the file's stream key
  ChunkKey key;
  uint64_t len = 0;
};

class Readahead {
 public:
  struct Options {
    // Chunks fetched ahead of a sequential reader: kAuto = enough for 16 MiB,
    // at least 4; 0 = no read-ahead.
    int chunks = kAuto;
    // Workers: the most read-ahead transfers in flight for all readers.
    int threads = 8;
    // How far from where a file's reads ended the next one may start (or
    // end) and still count as sequential.
    uint64_t sequential_slack = 8u << 20;
  };
  static constexpr int kAuto = -1;
  // Reads in a row that make a file sequential.
  static constexpr uint32_t kSequentialReads = 2;

  // `local`, `cache` and `counters` outlive this object; `fetch` fetches a
  // task's chunk (on a worker).
  Readahead(Options options, LocalChunks* local, ChunkCache* cache, ReadCounters* counters,
            std::function<void(const AheadTask&)> fetch);
  ~Readahead();

  // Notes a read request of bytes [offset, end) of file `entry` and, when
  // the file is being read sequentially, queues read-ahead of the chunks
  // after it. `ds` must outlive this object. Returns whether the read is
  // random: in a file of more than one chunk whose reads jumped (a read
  // started farther than `sequential_slack` from where the file's reads
  // ended, or the first one that far from its start), until a streak of
  // reads makes it sequential again (see Stream::jumped). Such a read is served a
  // range, not a whole chunk (ChunkReader::FetchRange); a file read from its
  // start is never random until it jumps. Always false with read-ahead off
  // (no file is followed then).
  bool NoteRead(const MountedDataset& ds, uint32_t entry, uint64_t offset, uint64_t end) EXCLUDES(streams_mu_);

  // The read-ahead depth in chunks for `chunk_size` (0 = none).
  uint32_t Depth(uint64_t chunk_size) const;

 private:
  // Where a file's reads have got to. `stream` 0 = a free slot.
  struct Stream {
    uint64_t stream = 0;
    uint64_t end = 0;       // where the sequential reads so far ended
    uint32_t streak = 0;    // requests in a row that were sequential
    uint32_t ahead_to = 0;  // chunks below this one were queued (or skipped)
    // The file's reads jumped at least once (or began far from its start):
    // a random reader's, whose reads are random until a streak makes them
    // sequential again. (A page fault of a memory-mapped file is such a
    // streak: four 1 MiB requests of the kernel's read-around; the read-ahead
    // it starts measured faster for warm and cold memmaps alike than none.)
    bool jumped = false;
  };
  // Whether the stream's reads are sequential now (read-ahead follows them).
  bool Sequential(const Stream& s) const;
  static uint64_t StreamKey(const MountedDataset& ds, uint32_t entry) { return (uint64_t(ds.slot) << 32 | entry) + 1; }
  Stream& SlotLocked(uint64_t stream) REQUIRES(streams_mu_);
  // Queues read-ahead of chunks [from, to) of the file; returns the first
  // chunk it did not queue for lack of budget (`to` when all were).
  uint32_t Queue(const MountedDataset& ds, uint32_t entry, uint64_t stream, uint32_t from, uint32_t to);
  // The file's reads are no longer sequential: drop its queued read-ahead
  // and let the chunks it read ahead age like any other.
  void Drop(uint64_t stream, const FileKey& file);

  const Options options_;
  LocalChunks* local_;
  ChunkCache* cache_;
  ReadCounters* counters_;
  const std::function<void(const AheadTask&)> fetch_;

  static constexpr size_t kStreamSlots = 1024;
  Mutex streams_mu_;  // never held while taking another lock
  std::vector<Stream> streams_ GUARDED_BY(streams_mu_);  // kStreamSlots entries

  // Null when read-ahead is off. Last: destroyed (stopped) first.
  std::unique_ptr<WorkQueue<AheadTask>> queue_;
};

}  // namespace hoard::fuse
