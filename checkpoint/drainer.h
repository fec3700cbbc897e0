// File: checkpoint/drainer.h
//
// Drainer is the node agent's checkpoint background work (issue 6). Each
// round, every poll_interval and at once after a round that drained a file:
//   1. asks the coordinator for work (CkptWork);
//   2. eviction: deletes the local copies of files not in the reply's
//      keep_files (ReplicaStore::DropFilesExcept), only after the coordinator
//      answered a well-formed reply; an unreachable or erring coordinator
//      never causes a deletion; and the copies the reply's drop lists name
//      (retired generations: ReplicaStore::DropReplicas, DropWholeFiles),
//      echoed as done in the next CkptWork;
//   3. rebuild: fetches the replicas the reply lists and the disk lacks from
//      their other holders (GetCkptChunk), never from the origin;
//   4. drain: uploads each task's generation to the checkpoint origin at
//      task.tmp_path, `upload_streams` tasks at a time (oldest first: a
//      FanOut, common/fan_out.h, on the drainer's task pool), each
//      on its own origin connection: one stream of synchronous (FILE_SYNC)
//      writes idles the link while the server writes each one, and a second
//      stream fills that gap. Chunk by chunk in order, each from the local store when
//      there, else from its holders (the writer, then replicas[i]), each
//      verified against its checksum; Close() (fsync), then CkptDrained{ok}.
//      A failed upload (origin unreachable or full, a chunk nowhere) is
//      reported ok=false with the reason (and whether the origin failed, or
//      the fetching of chunks: CkptDrained.at_origin) and removed from the
//      origin; it is never reported ok unless every byte was written and
//      fsynced. The tasks of a round after its first failure are not
//      attempted; the next CkptWork hands them out again.
// After a failed round the next one waits backoff_min, doubling up to
// backoff_max (10 s: an origin that was full or away and is back gets the
// drain within 10 s); a good round resets it. Uploads are paced to the
// reply's max_drain_bytes_per_s (an OriginGate token bucket; 0 = unlimited).
//
// A generation this node already uploaded (reported ok) kMaxRepeatedUploads
// times and is asked to upload again is counted (repeated_uploads) and
// logged, at most once a minute (Options.clock): the coordinator does not find those
// uploads on its origin (see its log and `hoard checkpoint ls`), a drain loop
// that costs the link the file's size each round.
//
// The origin is opened once, on the first task, with Options.open_origin
// (OpenCkptOrigin in the daemon); a failed open is retried next round.
//
// Thread-safety: Start/Stop from one thread; RunOnce from one thread at a
// time (the drainer's own, or a test's when not started). Counters are
// atomics readable from anywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "origin/ckpt_origin.h"
#include "store/replica_store.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/task_pool.h"
#include "origin/origin_gate.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard {

class Drainer {
 public:
  using Opener = std::function<Result<std::unique_ptr<CkptOrigin>>(const std::string& source)>;
  // A node's endpoint by name, from the cluster map; "" when unknown or down.
  using Resolver = std::function<std::string(const std::string& node)>;

  struct Options {
    std::string node;         // this node's name (CkptWork.node; never asked for chunks)
    std::string coordinator;  // coordinator endpoint, or several separated by commas
    // The checkpoint origin (`hoard-node --ckpt-origin`). "": drain tasks
    // fail with that reason (eviction and rebuild still run).
    std::string origin_source;
    Opener open_origin;       // required when origin_source is set
    Resolver resolve;         // required
    proto::ClientPool* peers = nullptr;  // required; the agent's pool of peer clients
    std::chrono::milliseconds poll_interval{500};
    int upload_streams = 2;  // uploads at once, each with its own origin connection
    std::chrono::milliseconds backoff_min{1000};
    std::chrono::milliseconds backoff_max{10000};
    std::chrono::milliseconds rpc_timeout{3000};    // coordinator calls
    std::chrono::milliseconds peer_timeout{10000};  // one chunk from a peer
    // How often CkptWork asks for the rebuild list after the first call.
    std::chrono::milliseconds rebuild_interval{std::chrono::minutes(5)};
    std::shared_ptr<spdlog::logger> logger;  // required
    zmq::context_t* context = nullptr;       // required
    // Waits between rounds, the rebuild-list interval, the spacing of the
    // repeated-upload warnings.
    Clock* clock = Clock::Real();
  };

  struct Counters {
    std::atomic<uint64_t> drained_bytes{0};
    std::atomic<uint64_t> drained_files{0};
    std::atomic<uint64_t> failures{0};       // uploads reported ok=false
    std::atomic<uint64_t> rebuilt_chunks{0};
    std::atomic<uint64_t> evicted_files{0};
    std::atomic<uint64_t> dropped_copies{0};  // replicas and whole-file copies of retired generations
    std::atomic<uint64_t> repeated_uploads{0};  // uploads of a generation already uploaded kMaxRepeatedUploads times
  };
  static constexpr uint32_t kMaxRepeatedUploads = 3;

  Drainer(Options options, ReplicaStore* store);
  ~Drainer();
  Drainer(const Drainer&) = delete;
  Drainer& operator=(const Drainer&) = delete;

  void Start();
  // Wakes a paced upload, finishes the round's current chunk, joins. Idempotent.
  void Stop();

  // One round (see the top). OK when the coordinator answered and every task
  // and rebuild succeeded; *drained (if given) counts the files drained.
  Status RunOnce(int* drained = nullptr);

  const Counters& counters() const { return counters_; }

  // A replica this node held is gone (the scrubber found it corrupt): the
  // next round, started now, asks for the whole rebuild list again.
  void RequestRebuild();

  // Test hooks: how many waits between rounds the thread has begun, and when
  // (on Options::clock) the last one ends unless woken.
  uint64_t TEST_waits() const EXCLUDES(mu_);
  std::chrono::steady_clock::time_point TEST_next_round() const EXCLUDES(mu_);

 private:
  void Loop();
  // Drains `tasks`, upload_streams at a time; reports each to the
  // coordinator as it ends. Stops taking tasks after the first failure.
  Status Drain(const std::vector<proto::CkptDrainTask>& tasks, int* drained);
  // Uploads one generation over origin connection `stream`; the Status is
  // what CkptDrained reports, *at_origin whether the origin failed.
  Status Upload(const proto::CkptDrainTask& task, size_t stream, bool* at_origin);
  Status WriteAll(const proto::CkptEntry& e, CkptWriter* writer, bool* at_origin);
  // Counts the uploads of each generation reported ok; logs a repeat (see
  // the top). Called by the upload streams.
  void NoteUpload(const proto::CkptEntry& e, bool ok) EXCLUDES(uploads_mu_);
  // Chunk i of `e`, verified: local store first, then its holders.
  Result<std::string> FetchChunk(const proto::CkptEntry& e, uint32_t i);
  // From the first of `holders` (not this node) that has it.
  Result<std::string> FetchFromPeers(const std::vector<std::string>& holders, const proto::GetCkptChunk& req);
  Status Rebuild(const std::vector<proto::CkptChunkRef>& refs);
  // Origin connection `stream`, opened on first use.
  Result<CkptOrigin*> Origin(size_t stream);
  bool stopping() const { return stopping_.load(); }

  Options options_;
  ReplicaStore* store_;
  Counters counters_;
  OriginGate gate_;  // pacing only (no connection limit)
  Mutex coordinator_mu_;  // the upload streams report through one client
  // Waits out a takeover (LeaderClient::Options::failover_wait): drain is
  // background work, better late than failed.
  std::unique_ptr<proto::LeaderClient> coordinator_ GUARDED_BY(coordinator_mu_);
  // One per upload stream, each used by one stream at a time.
  std::vector<std::unique_ptr<CkptOrigin>> origins_;
  std::chrono::steady_clock::time_point last_rebuild_ask_;  // RunOnce's thread only
  bool asked_rebuild_ = false;                              // RunOnce's thread only
  uint64_t rebuilt_seq_ = 0;  // the last rebuild list held in full (RunOnce's thread only)
  uint64_t dropped_seq_ = 0;  // the last drop list carried out (RunOnce's thread only)
  std::atomic<bool> rebuild_requested_{false};

  Mutex uploads_mu_;
  // By id: (generation, uploads of it reported ok); the newest kUploadsKept ids.
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> uploads_ GUARDED_BY(uploads_mu_);
  static constexpr size_t kUploadsKept = 4096;
  std::chrono::steady_clock::time_point repeat_logged_ GUARDED_BY(uploads_mu_){};  // the last repeat logged

  std::thread thread_;  // the rounds (Loop): one long-lived loop, not a queue of work
  std::atomic<bool> stopping_{false};
  // Held to change stopping_ or rebuild_requested_, so that Loop's wait
  // cannot miss the change.
  mutable Mutex mu_;
  CondVar cv_;  // wakes Loop's wait on Stop
  uint64_t waits_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point next_round_ GUARDED_BY(mu_);

  // The upload streams beside the round's own thread (Drain's FanOut); kept
  // for the drainer's life, so a round starts no thread. Declared last: a
  // round waits for what it ran here.
  TaskPool upload_pool_;
};

}  // namespace hoard
