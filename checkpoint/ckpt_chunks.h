// File: checkpoint/ckpt_chunks.h
//
// CkptChunks reads the committed bytes of checkpoint files for the mount:
// each chunk from its holders (the writer, then the replicas, this node
// first, read from its disk directly, then the others rotated by chunk index
// so that a restore pulls from every holder at once), verified by the node that serves it against the
// checksum in the entry; when no holder has it and the file is at P, from the
// checkpoint origin at the file's path.
//
// Chunks are kept in a small LRU (the kernel asks for a chunk in many 128 KiB
// to 1 MiB reads), fetches are single-flight, and a read of chunk i starts
// fetches of the next `ahead` chunks on a pool of threads (a WorkQueue,
// common/work_queue.h, of at most kMaxAhead fetches: the oldest are dropped
// first), so a sequential restore has many chunks in flight from many nodes.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/work_queue.h"
#include "origin/ckpt_origin.h"
#include "common/single_flight.h"
#include "cluster/cluster_view.h"
#include "proto/messages.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

class CkptChunks {
 public:
  struct Options {
    std::string node_name;
    // This node's replica store (STORE/ckpt): its copies are read from the
    // disk directly, not asked of its own node agent over ZeroMQ (which
    // would encrypt and decrypt them on the same machine). "" = none.
    std::string local_ckpt_dir;
    std::chrono::milliseconds peer_timeout{10000};
    size_t cache_bytes = 128u << 20;
    int ahead = 8;    // chunks fetched ahead of a reader
    int threads = 8;  // fetching ahead, for all readers
    std::shared_ptr<spdlog::logger> logger;
    std::function<Result<std::unique_ptr<CkptOrigin>>()> open_origin;  // null: no origin
  };
  using Bytes = std::shared_ptr<const std::string>;

  CkptChunks(Options options, proto::ClientPool* pool, std::function<std::shared_ptr<const ClusterView>()> view);
  ~CkptChunks();

  // Copies bytes [off, off + len) of the committed generation of `e` into
  // `out` (fewer at the end of the file).
  Result<size_t> Read(const proto::CkptEntry& e, uint64_t off, size_t len, char* out);
  // The same bytes as pieces of the chunks that hold them, uncopied (the
  // mount replies with them as they are: one copy fewer per byte).
  struct Piece {
    Bytes chunk;  // keeps `data` alive
    const char* data = nullptr;
    size_t size = 0;
  };
  Result<std::vector<Piece>> ReadPieces(const proto::CkptEntry& e, uint64_t off, size_t len);

  uint64_t local_bytes() const { return local_bytes_.load(); }
  // Bytes the mount read from this node's disk itself (checkpoint/ckpt_fs.h:
  // a handle reading the whole-file copy), counted with this class's own.
  void CountLocal(uint64_t n) { local_bytes_ += n; }
  uint64_t peer_bytes() const { return peer_bytes_.load(); }
  uint64_t origin_bytes() const { return origin_bytes_.load(); }

 private:
  struct Key {
    uint64_t id, gen;
    uint32_t index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.id * 1000003 ^ k.gen * 131 ^ k.index); }
  };
  Result<Bytes> Get(const proto::CkptEntry& e, uint32_t index);
  Result<Bytes> Fetch(const proto::CkptEntry& e, uint32_t index);
  Result<Bytes> FromOrigin(const proto::CkptEntry& e, uint32_t index);
  Bytes Cached(const Key& k) EXCLUDES(mu_);
  void Keep(const Key& k, Bytes b) EXCLUDES(mu_);

  // A chunk to fetch ahead of a reader.
  struct Ahead {
    std::shared_ptr<const proto::CkptEntry> entry;
    uint32_t index = 0;
  };
  // Fetches queued ahead of readers; past this, the oldest are dropped
  // (readers far ahead of the pool).
  static constexpr size_t kMaxAhead = 1024;

  Options options_;
  proto::ClientPool* pool_;
  std::function<std::shared_ptr<const ClusterView>()> view_;
  SingleFlight<Key, Result<Bytes>, KeyHash> flights_;
  std::atomic<uint64_t> local_bytes_{0}, peer_bytes_{0}, origin_bytes_{0};

  Mutex mu_;
  std::list<std::pair<Key, Bytes>> lru_ GUARDED_BY(mu_);  // newest first
  std::unordered_map<Key, std::list<std::pair<Key, Bytes>>::iterator, KeyHash> index_ GUARDED_BY(mu_);
  size_t cached_bytes_ GUARDED_BY(mu_) = 0;

  Mutex origin_mu_;
  // Opened on first use, then never replaced: callers use the pointer
  // they read under the lock after dropping it.
  std::unique_ptr<CkptOrigin> origin_ GUARDED_BY(origin_mu_);

  // Null without threads. Declared last: its threads use the members above.
  std::unique_ptr<WorkQueue<Ahead>> ahead_;
};

}  // namespace hoard::fuse
