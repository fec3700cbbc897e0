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
// A failure of every source is returned as the last source's Status; the
// FUSE layer turns it into EIO.
//
// Thread-safety: all methods may be called from any FUSE worker thread.
// Requests to peers and the origin run on the Hedger's threads; the
// destructor waits for those still in flight (at most `peer_timeout`).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/hedger.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/single_flight.h"
#include "common/thread_annotations.h"
#include "cluster/cluster_view.h"
#include "fuse/chunk_set.h"
#include "fuse/local_fds.h"
#include "fuse/namespace.h"
#include "fuse/read_tier.h"
#include "store/chunk_file.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_filler.h"
#include "proto/rpc_client.h"

struct stat;

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
    // Ages chunks read ahead (readahead_ttl) and times the retries of a busy
    // peer (tests pass a FakeClock).
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
  static constexpr int kAutoReadahead = -1;
  // Reads in a row that make a file sequential.
  static constexpr uint32_t kSequentialReads = 2;

  struct Counters {
    std::atomic<uint64_t> local_bytes{0};
    std::atomic<uint64_t> peer_bytes{0};
    std::atomic<uint64_t> origin_bytes{0};
    std::atomic<uint64_t> peer_failures{0};
    std::atomic<uint64_t> corrupt_local_chunks{0};
    std::atomic<uint64_t> rechecked_ranges{0};  // checked again: not wholly in the page cache
    std::atomic<uint64_t> remote_fetches{0};    // chunks fetched from a peer or the origin
    std::atomic<uint64_t> readahead_chunks{0};  // read-ahead transfers started
    std::atomic<uint64_t> readahead_bytes{0};   // and their bytes, when they succeeded
    std::atomic<uint64_t> readahead_used{0};    // chunks read ahead that a demand read then used
    std::atomic<uint64_t> readahead_unused{0};  // dropped or expired before any read used them
    std::atomic<uint64_t> readahead_failures{0};
  };

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
              LocalFds::Deferred* deferred);

  // Makes every thread drop its cached chunk fds at its next read, so chunk
  // files deleted from the store (evicted, dataset removed) are released.
  void ForgetLocalFds() { generation_.fetch_add(1, std::memory_order_relaxed); }

  // The whole chunk from peers or the origin (step 2 and 3 above).
  Result<Bytes> FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index);

  // Notes a read request of bytes [offset, end) of file `entry` and, when
  // the file is being read sequentially, queues read-ahead of the chunks
  // after it (see above). Cheap: a single-chunk file returns at once, others
  // take one short lock. `ds` must outlive this reader (Namespace keeps every
  // MountedDataset until it is destroyed, after the reader).
  void NoteRead(const MountedDataset& ds, uint32_t entry, uint64_t offset, uint64_t end);

  // The read-ahead depth in chunks for `chunk_size` (0 = none).
  uint32_t ReadaheadChunks(uint64_t chunk_size) const;

  // The read tier, or null when there is none.
  ReadTier* read_tier() { return tier_.get(); }
  const ReadTier* read_tier() const { return tier_.get(); }

  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }
  // Seconds per GetChunk asked of an owner (with its busy retries).
  const metrics::Histogram& peer_latency() const { return peer_latency_; }
  // Hedged requests: counts, and the delay a request asked now would get.
  const Hedger& hedger() const { return hedger_; }
  // Read-ahead tasks queued or running. Tests: once it is 0 after a read
  // returned, read-ahead fetches nothing more until the next read (NoteRead
  // queues before the read is answered).
  size_t TEST_readahead_pending() EXCLUDES(cache_mu_) {
    MutexLock lock(&cache_mu_);
    return ahead_pending_.size();
  }
  // Seconds per origin read call, when the mount reads the origin itself.
  const metrics::Histogram& origin_read_latency() const { return origin_reader_.origin_read_latency(); }

 private:
  // Opens and (first time) verifies a local chunk file; -1 if unusable.
  int OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index, const ChunkKey& key);
  // Checks [offset, offset + len) of an open chunk file again (LocalFd: the
  // whole chunk), through the page cache; false (the file marked bad if
  // corrupt).
  bool Recheck(const MountedDataset& ds, const ChunkKey& key, int fd, uint64_t offset, uint64_t len);
  // Records a corrupt chunk file (by inode) so it is never served again,
  // drops its cached pages and every thread's cached fds.
  void MarkBad(const MountedDataset& ds, const ChunkKey& key, int fd, const struct stat& st, const Status& why);
  static uint64_t BadFingerprint(uint64_t chunk_fp, uint64_t ino);
  // DIR/chunks of the local store, opened on first use (the node agent may
  // create the store after the mount starts); -1 while it does not exist.
  int ChunksDir();
  // `ahead`: for read-ahead, which asks the owners that hold the chunk
  // first and never reads the origin itself (FetchAheadFromOwners).
  Result<Bytes> FetchUncached(const MountedDataset& ds, uint32_t entry, uint32_t index, bool ahead);
  Result<Bytes> FetchAheadFromOwners(const MountedDataset& ds, const std::shared_ptr<const ClusterView>& view,
                                     const std::vector<uint32_t>& owners, uint32_t entry, uint32_t index,
                                     uint64_t chunk_len);
  // A GetChunk of node `node` of `view` as a source for the Hedger. `demand`:
  // a reader waits for it (its failures are counted and logged; read-ahead's
  // are expected, and silent). The request may outlive the caller's wait: it
  // holds `view`, and `ds` outlives this reader.
  Hedger::Source<Bytes> PeerRequest(const MountedDataset& ds, std::shared_ptr<const ClusterView> view,
                                    uint32_t node, uint32_t entry, uint32_t index, uint64_t chunk_len, bool fill,
                                    bool demand);
  // Counts an answer the Hedger returned: from a peer, or (`origin`) the origin.
  void CountFetched(uint64_t chunk_len, bool origin);
  // Whether the local store (or the read tier) holds the chunk file (not
  // checked further).
  bool HeldLocally(const ChunkKey& key);
  static bool HeldIn(int dir, const ChunkKey& key);
  // Offers a chunk fetched over the network to the read tier, unless this
  // node's agent holds it (it filled a chunk it owns while serving us).
  void KeepCopy(const MountedDataset& ds, const ChunkKey& key, const Bytes& bytes);

  // ---- read-ahead ----
  struct AheadTask {
    const MountedDataset* ds;
    uint32_t entry;
    uint32_t index;
    uint64_t stream;  // StreamKey of the file
    ChunkKey key;
    uint64_t len;
  };
  // Where a file's reads have got to. `stream` 0 = a free slot.
  struct Stream {
    uint64_t stream = 0;
    uint64_t end = 0;       // where the sequential reads so far ended
    uint32_t streak = 0;    // requests in a row that were sequential
    uint32_t ahead_to = 0;  // chunks below this one were queued (or skipped)
  };
  static uint64_t StreamKey(const MountedDataset& ds, uint32_t entry) { return (uint64_t(ds.slot) << 32 | entry) + 1; }
  // Queues read-ahead of chunks [from, to) of the file; returns the first
  // chunk it did not queue for lack of budget (`to` when all were).
  uint32_t QueueAhead(const MountedDataset& ds, uint32_t entry, uint64_t stream, uint32_t from, uint32_t to);
  // The file's reads are no longer sequential: drop its queued read-ahead
  // and let the chunks it read ahead age like any other.
  void DropAhead(uint64_t stream, const FileKey& file) EXCLUDES(queue_mu_, cache_mu_);
  void AheadLoop() EXCLUDES(queue_mu_, cache_mu_);
  void FetchAhead(const AheadTask& task) EXCLUDES(cache_mu_);
  // Moves read-ahead chunks older than the TTL into the LRU's tail.
  void ExpireAheadLocked(std::chrono::steady_clock::time_point now) REQUIRES(cache_mu_);
  Result<Bytes> FetchFromPeer(const proto::NodeInfo& node, uint64_t placement_epoch, const MountedDataset& ds,
                              uint32_t entry, uint32_t index, uint64_t chunk_len, bool fill);
  // The cached chunk, or null; a chunk read ahead becomes an LRU entry.
  Bytes LookupLocked(const ChunkKey& key) REQUIRES(cache_mu_);
  // Caches a fetched chunk: at the LRU's head, or in the read-ahead list.
  void Remember(const ChunkKey& key, Bytes bytes, bool ahead) EXCLUDES(cache_mu_);
  void EvictLocked() REQUIRES(cache_mu_);

  Options options_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  proto::ClientPool peers_;
  OriginPool origins_;
  ChunkFiller origin_reader_;  // no store: reads through without caching
  Counters counters_;
  metrics::Histogram peer_latency_{metrics::Histogram::LatencyBuckets()};

  const uint64_t id_;  // this reader's key in every thread's LocalFds
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
  std::unique_ptr<ReadTier> tier_;  // null = none; set in the constructor
  SingleFlight<ChunkKey, Result<ChunkMeta>, ChunkKeyHash> verify_flights_;

  // A transfer's result, and whether a read-ahead ran it (it gives up where
  // a demand read goes on, so a demand read that joined one tries again).
  struct Fetched {
    Result<Bytes> bytes;
    bool ahead = false;
  };
  SingleFlight<ChunkKey, Fetched, ChunkKeyHash> flights_;
  // In-memory cache of remote chunks: the LRU, and the chunks read ahead that
  // no read has used yet (oldest first). One index covers both lists; an
  // entry says which it is on.
  struct Cached {
    ChunkKey key;
    Bytes bytes;
    bool ahead = false;
    std::chrono::steady_clock::time_point fetched;
  };
  using CacheList = std::list<Cached>;
  Mutex cache_mu_;  // never held while taking another lock of this class
  CacheList lru_ GUARDED_BY(cache_mu_);    // front = newest
  CacheList ahead_ GUARDED_BY(cache_mu_);  // front = oldest
  // Both lists' entries by key.
  std::unordered_map<ChunkKey, CacheList::iterator, ChunkKeyHash> lru_index_ GUARDED_BY(cache_mu_);
  size_t lru_bytes_ GUARDED_BY(cache_mu_) = 0;
  size_t ahead_bytes_ GUARDED_BY(cache_mu_) = 0;  // bytes in ahead_
  // Read-ahead queued or being fetched, and their bytes.
  std::unordered_set<ChunkKey, ChunkKeyHash> ahead_pending_ GUARDED_BY(cache_mu_);
  size_t ahead_pending_bytes_ GUARDED_BY(cache_mu_) = 0;

  // Files being read: a small direct-mapped table (a collision only makes a
  // file look new, as if it had just been opened).
  static constexpr size_t kStreamSlots = 1024;
  // Never held while taking another lock of this class.
  Mutex streams_mu_;
  std::vector<Stream> streams_ GUARDED_BY(streams_mu_);  // kStreamSlots entries

  // Never held while taking another lock of this class.
  Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<AheadTask> queue_ GUARDED_BY(queue_mu_);
  bool stopping_ GUARDED_BY(queue_mu_) = false;
  // Started in the constructor, joined in the destructor.
  std::vector<std::thread> ahead_threads_;

  // Asks owners and the origin, hedged, and keeps which peers to skip: one
  // that could not be reached, or left requests overdue (PeerHealth), is
  // skipped for `suspect_for` or until the map changes (it may say the node
  // restarted, or is down), so one dead or stopped node costs one wait, not
  // one per chunk. The coordinator marks it down soon after, and the map
  // then says the same. Last: destroyed first, it waits for the requests
  // still in flight, which use the members above.
  Hedger hedger_;
};

}  // namespace hoard::fuse
