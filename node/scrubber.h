// File: node/scrubber.h
//
// Scrubber re-reads every chunk file a node keeps, from the disk, against its
// checksum, so that bit rot is found before a reader meets it: the chunk
// store's dataset chunks (ChunkStore::Scrub), the mount's read tier (the same
// chunk file format, in STORE/store/read-tier) and the checkpoint replicas
// (ReplicaStore::Scrub). Reads bypass the page cache (O_DIRECT), so the disk
// is what is checked.
//
// A corrupt file is quarantined (common/quarantine.h) and its owner told: the
// chunk store calls the agent's on_corrupt, which fetches the chunk again
// from a replica or the origin; a lost checkpoint replica makes the drainer
// rebuild (on_replica_lost); a read-tier copy is simply gone (the mount reads
// the chunk elsewhere and may copy it again). A mount that has the file open
// keeps its descriptor to the quarantined inode: fuse/chunk_reader.h checks a
// chunk again whenever its pages left the page cache, and a passthrough open
// made before keeps reading the old file until it is closed.
//
// Schedule: a pass visits everything once, in name order, at most
// `rate_bytes_per_s` (a token bucket over whole chunks), and waits while
// `busy()` says demand reads are being served (at most `max_yield` per chunk,
// so a node that is never idle is still scrubbed, at its rate). A pass starts
// `interval` after the previous one started, or at once when asked
// (RequestPass: `hoard scrub`). The state (pass number, where the pass got to,
// when the last pass ended, corrupt chunks found) is saved to `state_path`
// every few seconds and at the end of a pass, so a restarted node resumes its
// pass where it stopped instead of starting over.
//
// Thread-safety: Start/Stop from one thread; everything else from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/replica_store.h"
#include "common/result.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "store/chunk_store.h"
#include "common/quarantine.h"

namespace hoard {

class Scrubber {
 public:
  struct Options {
    ChunkStore* store = nullptr;        // required
    ReplicaStore* replicas = nullptr;   // may be null
    std::string read_tier_dir;          // "" = none; the mount's read tier (a chunk store dir)
    std::string state_path;             // required: where the schedule is kept
    std::chrono::seconds interval{7 * 24 * 3600};  // 0 = only when asked
    uint64_t rate_bytes_per_s = 64u << 20;         // 0 = unlimited
    // Demand reads are being served: the scrubber waits (up to max_yield).
    std::function<bool()> busy;
    std::chrono::milliseconds max_yield{1000};
    // A replica was quarantined: the drainer should rebuild.
    std::function<void()> on_replica_lost;
    std::shared_ptr<spdlog::logger> logger;  // required
    // Pacing, yielding to demand reads and the schedule (its wall time).
    Clock* clock = Clock::Real();
  };

  // What `hoard scrub` and the metrics show.
  struct Progress {
    uint64_t pass = 0;             // the pass running, or the last one
    bool running = false;
    uint64_t pass_items = 0;       // files in the running pass
    uint64_t pass_items_done = 0;
    uint64_t pass_bytes = 0;       // their bytes
    uint64_t pass_bytes_done = 0;
    int64_t pass_started_unix = 0;
    int64_t last_pass_end_unix = 0;  // 0 = never finished one
    uint64_t passes_done = 0;        // since the node was set up
    uint64_t corrupt_found = 0;      // since the node was set up
    uint64_t bytes_scrubbed = 0;     // since this process started
    uint64_t items_scrubbed = 0;     // since this process started
  };

  static Result<std::unique_ptr<Scrubber>> Create(Options options);
  ~Scrubber();
  void Start();
  void Stop();

  // Starts a pass now, unless one is running; returns the number of the pass
  // that will cover "now" (the running one's, or the new one's).
  uint64_t RequestPass();
  // Waits until pass `pass` has ended (or the scrubber stops, or `timeout`).
  bool WaitPass(uint64_t pass, std::chrono::milliseconds timeout);
  Progress progress() const;

  // The token bucket (public for tests): how long to wait, at `rate` bytes/s,
  // after `bytes` more were read, given the bucket state.
  struct Bucket {
    double tokens = 0;  // bytes that may be read before waiting
    std::chrono::steady_clock::time_point at{};
  };
  static std::chrono::nanoseconds Pace(Bucket* bucket, uint64_t rate, uint64_t bytes,
                                       std::chrono::steady_clock::time_point now);

 private:
  enum class Kind : uint8_t { kStore, kTier, kReplica };
  struct Item {
    std::string name;  // "s/KEY", "t/HH/NAME", "r/NAME": the pass's order
    Kind kind;
    ChunkKey key;                 // kStore
    ReplicaStore::Held replica;   // kReplica
    std::string path;             // kTier
    uint64_t bytes = 0;
  };

  explicit Scrubber(Options options);
  void Loop();
  std::vector<Item> List() const;
  // Checks one item; adds to *corrupt if it was.
  Status ScrubItem(const Item& item, bool* corrupt);
  Status ScrubTierFile(const std::string& path, bool* corrupt);
  void LoadState() EXCLUDES(mu_);
  void SaveStateLocked() REQUIRES(mu_);

  Options options_;
  QuarantineDir quarantine_;
  std::thread thread_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool requested_ GUARDED_BY(mu_) = false;
  bool resume_ GUARDED_BY(mu_) = false;  // a pass the last process left running
  Progress progress_ GUARDED_BY(mu_);
  std::string cursor_ GUARDED_BY(mu_);   // the last item done in the running pass
};

}  // namespace hoard
