// File: fuse/chunk_reader.h
//
// ChunkReader finds the bytes of one chunk for the mount, trying in order:
//   1. this node's chunk store: the chunk file is opened directly (no IPC), its
//      checksum verified the first time this mount uses it (ChunkSet) and
//      the blocks a read needs again whenever they left the page cache, and
//      the caller splices from the fd, which the calling thread keeps open for
//      its next requests (LocalFds);
//   1b. the mount's read tier (fuse/read_tier.h): copies of chunks it fetched
//      over the network before, on this node's disk, opened the same way;
//   2. the chunk's owners over ZeroMQ, up ones first in placement rank order;
//      an owner that misses reads through from the origin and caches;
//   3. the origin itself, when no owner answers.
// Steps 2 and 3 are hedged (common/hedger.h): a source that has not answered
// within its hedge delay (4x the p99 of the last 256 answers from peers,
// 100 ms to 1 s: Options::hedge) is left in flight and the next source is
// asked too (the origin only past an owner that has stopped answering
// altogether, not one that is busy reading it); the first answer of the
// right length wins, and the others are dropped when they come. A peer that
// has stopped answering is skipped while a request to it is overdue, and
// one that leaves `slow_after` requests in a row overdue is skipped for
// `suspect_for`, as one that cannot be reached is: a node agent that is
// stopped (SIGSTOP, swapping) keeps its connections open, so no connection
// drop or TCP timeout ever tells (proto/rpc_client.h). An owner that dies
// while it is asked costs no delay at all: the call fails as soon as its
// connection drops, and the next source is asked at once. Requests carry
// the view's placement epoch; a reply from a node with a newer one makes the
// mount refresh its map (on_newer_placement).
// Chunks fetched over the network are offered to the read tier (unless this
// node's agent stored them itself: it owns them) and kept in a small in-memory LRU, since
// the kernel asks for a chunk in many reads (128 KiB to 1 MiB each), and a
// fetch is single-flight: concurrent readers of a chunk share one transfer.
//
// Sequential read-ahead: a chunk fetched on demand costs the reader a whole
// round trip (to an owner that may itself read the origin), so a reader
// streaming a large file would have one chunk in flight at a time, two where
// the kernel's 4 MiB read-ahead window crosses a chunk boundary. NoteRead,
// called for every read request, follows each file's reads. Once a file is
// read sequentially (kSequentialReads requests in a row that start within
// `sequential_slack` of where its reads so far ended and take that end
// further: FUSE threads pass the requests of one kernel read-ahead window in
// any order), the `readahead_chunks` chunks after the one being read are
// fetched by a pool of `readahead_threads`, through the same single flight
// as demand reads: a demand read of a chunk being read ahead waits for that
// transfer instead of starting another. Read-ahead never goes past the
// file's last chunk and skips chunks that the local store holds (read from
// there directly) or that are in memory already; a file whose reads stop
// being sequential has its queued read-ahead dropped. A failed read-ahead is
// counted and otherwise silent: the demand read tries again and reports.
// Read-ahead asks the owners that already hold a chunk before any owner is
// asked to read it through (after a node died, the first owner in rank order
// may be a new one while a surviving replica holds the chunk), and it never
// reads the origin itself; it gives up as soon as every owner it asked is
// overdue (they are then skipped), and a demand read that joined a failed
// read-ahead transfer starts its own.
//
// Memory: chunks read ahead wait in their own list, not in the LRU, until a
// demand read uses them (then they join the LRU) or `readahead_ttl` passes
// (then they become the LRU's oldest entries), so a burst of other reads
// never evicts what was just read ahead for a reader that has yet to get
// there. Those chunks plus the read-ahead transfers in flight are at most
// `readahead_max_bytes`; read-ahead waits while they are not. A chunk that
// read-ahead finds in the local store once fetched (this node owns it, and
// its node agent stored it while serving us) is not kept: the demand read
// opens the file.
//
// Random reads: a small read (the caller's choice: fuse/ops_io.cc takes at
// most an eighth of a chunk) that jumped within a file of several chunks (a
// numpy memmap, safetensors, parquet: NoteRead says so) and whose chunk is
// neither local nor in memory fetches just the range it asked for
// (FetchRange), from
// the same sources in the same order, hedged the same way: an owner that
// misses reads only that range from the origin and answers (GetChunk
// range_only), storing nothing. A whole chunk for a 16 KiB read would cost
// the reader 4 MiB of transfer, and the origin a whole-chunk read, per miss.
// Ranges are not single-flight and are kept nowhere (the kernel's page cache
// keeps what it was given); a file read sequentially gets whole chunks, as
// before.
//
// A failure of every source is returned as the last source's Status; the
// FUSE layer turns it into EIO.
//
// The units (one concept each; ChunkReader is the façade that composes
// them and holds the single flight of transfers they share):
//   fuse/local_chunks.h   step 1: the store's and the read tier's chunk files;
//   fuse/remote_chunks.h  steps 2 and 3, hedged, with cluster/peer_chunk_client.h
//                         (busy retries, suspicion) for every peer request;
//   fuse/chunk_cache.h    the LRU, the chunks read ahead, the read-ahead budget;
//   fuse/readahead.h      sequential detection and the read-ahead workers;
//   fuse/read_counters.h  what they count (Counters).
//
// Thread-safety: all methods may be called from any FUSE worker thread.
// Requests to peers and the origin run on the Hedger's threads; the
// destructor stops read-ahead, then waits for those still in flight (at
// most `peer_timeout`).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "cluster/cluster_view.h"
#include "common/clock.h"
#include "common/hedger.h"
#include "common/latency_window.h"
#include "common/metrics.h"
#include "common/result.h"
#include "common/single_flight.h"
#include "fuse/chunk_cache.h"
#include "fuse/local_chunks.h"
#include "fuse/local_fds.h"
#include "fuse/namespace.h"
#include "fuse/read_counters.h"
#include "fuse/read_tier.h"
#include "fuse/readahead.h"
#include "fuse/remote_chunks.h"
#include "origin/origin_pool.h"
#include "striping/chunk_key.h"

namespace hoard::fuse {

class ChunkReader {
 public:
  struct Options {
    std::string local_store;  // the local node's chunk store directory; empty = none
    // The read tier (fuse/read_tier.h): its directory ("" = none), the most it
    // may hold, and the disk space it leaves free.
    std::string read_tier_dir;
    uint64_t read_tier_bytes = 0;
    uint64_t read_tier_min_free = 0;
    std::chrono::milliseconds peer_timeout{10000};  // a peer may be reading through
    std::chrono::milliseconds peer_connect_timeout{500};
    // How long a peer that could not be reached, or was slow `slow_after`
    // times in a row, is skipped (common/peer_health.h).
    std::chrono::milliseconds suspect_for{5000};
    int slow_after = 3;
    // When a chunk request is hedged (common/latency_window.h): 4x the p99 of
    // the last 256 answers from peers (of the last minute), at least 100 ms
    // and at most 1 s (also while there are fewer than 20 answers to go by).
    LatencyWindow::Options hedge;
    size_t memory_cache_bytes = 256u << 20;
    std::shared_ptr<spdlog::logger> logger;
    // Ages chunks read ahead (readahead_ttl), times the retries of a busy
    // peer and how long a peer stays suspect, and dates the hedge delay's
    // samples (tests pass a FakeClock).
    Clock* clock = Clock::Real();
    zmq::context_t* context = nullptr;
    OriginOptions origin;
    OriginPool::Opener open_origin;  // tests substitute an in-memory origin
    // Called (from a reading thread; keep it cheap) when a peer's reply
    // shows a placement epoch newer than the current view's.
    std::function<void()> on_newer_placement;

    // Read-ahead (see above). Chunks fetched ahead of a sequential reader:
    // kAutoReadahead = enough for 16 MiB, at least 4 (4 chunks of 4 MiB);
    // 0 = no read-ahead.
    int readahead_chunks = kAutoReadahead;
    // Threads fetching ahead: the most read-ahead transfers in flight for
    // all readers together (a demand read never waits for a free one).
    int readahead_threads = 8;
    // Bytes read ahead and not yet used, plus those in flight. Part of
    // memory_cache_bytes, and at most half of it (the rest is for chunks
    // readers are using).
    size_t readahead_max_bytes = 128u << 20;
    // How long a chunk read ahead is kept for its reader before it becomes
    // an ordinary LRU entry (a reader that stopped, or was far behind).
    std::chrono::milliseconds readahead_ttl{10000};
    // How far from where a file's reads ended the next one may start (or
    // end) and still count as sequential: the kernel's read-ahead window
    // plus a request, since FUSE worker threads pass the requests of one
    // window in any order.
    uint64_t sequential_slack = 8u << 20;
  };
  static constexpr int kAutoReadahead = Readahead::kAuto;
  // Reads in a row that make a file sequential.
  static constexpr uint32_t kSequentialReads = Readahead::kSequentialReads;

  using Counters = ReadCounters;

  using Bytes = std::shared_ptr<const std::string>;

  ChunkReader(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view);
  ~ChunkReader();

  // The local chunk file of chunk `index` of file `entry`, checked, or -1
  // when the chunk is not held locally (or failed its checksum, which is
  // logged). Checked: the whole chunk, whenever any page of it is not in the
  // page cache (those would come from a disk that may have rotted since:
  // common/page_cache.h, block sums in store/chunk_file.h); while every page
  // stays cached, each is one a check read. A file found corrupt is never
  // used again. The fd is borrowed from this thread's LocalFds and stays valid until `deferred` is
  // destroyed. A hit costs no lock or allocation, and one cachestat(2).
  int LocalFd(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
              LocalFds::Deferred* deferred) {
    return local_.LocalFd(ds, entry, index, offset, deferred);
  }

  // Makes every thread drop its cached chunk fds at its next read, so chunk
  // files deleted from the store (evicted, dataset removed) are released.
  void ForgetLocalFds() { local_.ForgetFds(); }

  // The whole chunk from peers or the origin (step 2 and 3 above).
  Result<Bytes> FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index);

  // The bytes [offset, offset + length) of a chunk, for a random read (see
  // "Random reads" above): from the memory cache when the whole chunk is
  // there, else just the range from its owners (GetChunk range_only) or the
  // origin. `*at` is where the range starts in the returned bytes (`offset`
  // for a cached chunk, else 0). Nothing partial is kept: not in memory, not
  // in the read tier.
  Result<Bytes> FetchRange(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
                           uint64_t length, uint64_t* at);

  // Notes a read request of bytes [offset, end) of file `entry` and, when
  // the file is being read sequentially, queues read-ahead of the chunks
  // after it (see above). Returns whether the read is random (a jump in a
  // file of several chunks: fuse/readahead.h), to be served by FetchRange.
  // Cheap: a single-chunk file returns at once, others take one short lock.
  // `ds` must outlive this reader (Namespace keeps every MountedDataset until
  // it is destroyed, after the reader).
  bool NoteRead(const MountedDataset& ds, uint32_t entry, uint64_t offset, uint64_t end) {
    return ahead_.NoteRead(ds, entry, offset, end);
  }

  // The read-ahead depth in chunks for `chunk_size` (0 = none).
  uint32_t ReadaheadChunks(uint64_t chunk_size) const { return ahead_.Depth(chunk_size); }

  // The read tier, or null when there is none.
  ReadTier* read_tier() { return local_.read_tier(); }
  const ReadTier* read_tier() const { return local_.read_tier(); }

  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }
  // Seconds per GetChunk asked of an owner (with its busy retries).
  const metrics::Histogram& peer_latency() const { return remote_.peer_latency(); }
  // Hedged requests: counts, and the delay a request asked now would get.
  const Hedger& hedger() const { return remote_.hedger(); }
  // Read-ahead tasks queued or running. Tests: once it is 0 after a read
  // returned, read-ahead fetches nothing more until the next read (NoteRead
  // queues before the read is answered).
  size_t TEST_readahead_pending() const { return cache_.ahead_pending(); }
  // Seconds per origin read call, when the mount reads the origin itself.
  const metrics::Histogram& origin_read_latency() const { return remote_.origin_read_latency(); }

 private:
  // A transfer's result, and whether a read-ahead ran it (it gives up where
  // a demand read goes on, so a demand read that joined one tries again).
  struct Fetched {
    Result<Bytes> bytes;
    bool ahead = false;
  };
  // Readahead's worker: fetches the task's chunk through the single flight.
  void FetchAhead(const AheadTask& task);

  Options options_;
  Counters counters_;
  LocalChunks local_;
  ChunkCache cache_;
  // Transfers of remote chunks, demand and read-ahead alike: concurrent
  // readers of a chunk share one.
  SingleFlight<ChunkKey, Fetched, ChunkKeyHash> flights_;
  RemoteChunks remote_;  // its Hedger waits for its requests in flight
  // Last: destroyed first, its workers use the members above.
  Readahead ahead_;
};

}  // namespace hoard::fuse
