// File: fuse/chunk_reader.h
//
// ChunkReader finds the bytes of one chunk for the mount, trying in order:
//   1. this node's chunk store: the chunk file is opened directly (no IPC), its
//      checksum verified the first time this mount uses it (VerifiedSet), and
//      the caller splices from the fd, which the calling thread keeps open for
//      its next requests (LocalFds);
//   2. the chunk's owners over ZeroMQ, up ones first in placement rank order;
//      an owner that misses reads through from the origin and caches;
//   3. the origin itself, when no owner answers within the peer timeout.
// An owner that dies while it is asked costs no timeout: the call fails as
// soon as its connection drops (proto/rpc_client.h), and the next source is
// tried. Requests carry the view's placement epoch; a reply from a node with
// a newer one makes the mount refresh its map (on_newer_placement).
// Chunks fetched over the network are kept in a small in-memory LRU, since
// the kernel asks for a chunk in many reads (128 KiB to 1 MiB each), and a
// fetch is single-flight: concurrent readers of a chunk share one transfer.
//
// A failure of every source is returned as the last source's Status; the
// FUSE layer turns it into EIO.
//
// Thread-safety: all methods may be called from any FUSE worker thread.
#pragma once

#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/file_util.h"
#include "common/single_flight.h"
#include "coordinator/cluster_view.h"
#include "fuse/local_fds.h"
#include "fuse/namespace.h"
#include "fuse/verified_set.h"
#include "node/chunk_file.h"
#include "origin/origin_pool.h"
#include "prefetch/chunk_filler.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

class ChunkReader {
 public:
  struct Options {
    std::string local_store;  // the local node's chunk store directory; empty = none
    std::chrono::milliseconds peer_timeout{10000};  // a peer may be reading through
    std::chrono::milliseconds peer_connect_timeout{500};
    std::chrono::milliseconds suspect_for{5000};
    size_t memory_cache_bytes = 256u << 20;
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    OriginOptions origin;
    OriginPool::Opener open_origin;  // tests substitute an in-memory origin
    // Called (from a reading thread; keep it cheap) when a peer's reply
    // shows a placement epoch newer than the current view's.
    std::function<void()> on_newer_placement;
  };

  struct Counters {
    std::atomic<uint64_t> local_bytes{0};
    std::atomic<uint64_t> peer_bytes{0};
    std::atomic<uint64_t> origin_bytes{0};
    std::atomic<uint64_t> peer_failures{0};
    std::atomic<uint64_t> corrupt_local_chunks{0};
  };

  using Bytes = std::shared_ptr<const std::string>;

  ChunkReader(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view);
  ~ChunkReader();

  // The local chunk file of chunk `index` of file `entry`, verified (once per
  // mount), or -1 when the chunk is not held locally (or failed its checksum,
  // which is logged). `offset` within the chunk is where the caller will read
  // (the kernel is asked to read ahead from there). The fd is borrowed from
  // this thread's LocalFds and stays valid until `deferred` is destroyed. A
  // hit costs no lock, allocation or syscall.
  int LocalFd(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset,
              LocalFds::Deferred* deferred);

  // Makes every thread drop its cached chunk fds at its next read, so chunk
  // files deleted from the store (evicted, dataset removed) are released.
  void ForgetLocalFds() { generation_.fetch_add(1, std::memory_order_relaxed); }

  // The whole chunk from peers or the origin (step 2 and 3 above).
  Result<Bytes> FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index);

  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }

 private:
  // Opens and (first time) verifies a local chunk file; -1 if unusable.
  int OpenLocal(const MountedDataset& ds, uint32_t entry, uint32_t index, uint64_t offset, const ChunkKey& key);
  static constexpr uint64_t kWillNeedBytes = 4 << 20;
  // DIR/chunks of the local store, opened on first use (the node agent may
  // create the store after the mount starts); -1 while it does not exist.
  int ChunksDir();
  Result<Bytes> FetchUncached(const MountedDataset& ds, uint32_t entry, uint32_t index);
  Result<Bytes> FetchFromPeer(const proto::NodeInfo& node, uint64_t placement_epoch, const MountedDataset& ds,
                              uint32_t entry, uint32_t index, uint64_t chunk_len);
  void Remember(const ChunkKey& key, Bytes bytes);
  // A peer that could not be reached is skipped for `suspect_for`, or until
  // the map changes (it may say the node restarted, or is down), so one
  // dead node costs one connect timeout, not one per chunk. The coordinator
  // marks it down soon after, and the map then says the same.
  bool Suspect(const std::string& endpoint, uint64_t map_epoch);
  void MarkSuspect(const std::string& endpoint, uint64_t map_epoch);

  Options options_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  proto::ClientPool peers_;
  OriginPool origins_;
  ChunkFiller origin_reader_;  // no store: reads through without caching
  Counters counters_;

  const uint64_t id_;  // this reader's key in every thread's LocalFds
  std::atomic<uint64_t> generation_{1};  // LocalFds entries of older ones are dropped
  std::atomic<int> chunks_dir_{-1};
  VerifiedSet verified_;
  SingleFlight<ChunkKey, Result<ChunkTrailer>, ChunkKeyHash> verify_flights_;

  SingleFlight<ChunkKey, Result<Bytes>, ChunkKeyHash> flights_;
  // In-memory LRU of remote chunks.
  std::mutex cache_mu_;
  std::list<std::pair<ChunkKey, Bytes>> lru_;  // guarded by cache_mu_; front = newest
  std::unordered_map<ChunkKey, std::list<std::pair<ChunkKey, Bytes>>::iterator, ChunkKeyHash> lru_index_;
  size_t lru_bytes_ = 0;  // guarded by cache_mu_

  struct Suspicion {
    std::chrono::steady_clock::time_point until;
    uint64_t map_epoch = 0;  // of the map the failure happened under
  };
  std::mutex suspect_mu_;
  std::unordered_map<std::string, Suspicion> suspects_;  // guarded by suspect_mu_; by endpoint
};

}  // namespace hoard::fuse
