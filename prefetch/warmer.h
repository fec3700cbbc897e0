// File: prefetch/warmer.h
//
// Warmer fills this node's chunk store with the chunks it owns of every
// dataset marked warm, on a pool of worker threads, through the ChunkFiller
// (from the peers that hold a chunk, else from the origin).
//
// It works from a list of targets (dataset + owned chunks) that the node agent
// replaces whenever placement or the dataset list changes. Chunks already in
// the store are skipped, so an interrupted warm-up resumes where it stopped.
// A chunk that fails is recorded with its file and reason and retried after
// `retry_after`.
//
// An origin that is unavailable (down, refusing, timing out) is backed off:
// after a chunk of a dataset fails with kUnavailable, that dataset's warm-up
// pauses for 1 s, then 2, 4, ... up to `max_backoff`, and the failed chunks
// are tried first when it resumes; the first success ends the backoff. So a
// server that is away is asked about once per backoff interval, not by
// every worker in a loop, and the warm-up goes on by itself when it is back.
// The failure list says "retrying in N s" meanwhile.
//
// Its fills read the origin at warm-up priority (origin/origin_gate.h): the
// gate's limits bound them, and reads a job waits for go first.
//
// Space: a chunk that would push the store past its capacity (the node's,
// which checkpoints and the read tier share: store/disk_usage.h) is not fetched
// at all (recorded as NoSpace), so a dataset larger than the cache fills what
// fits without reading from the origin what it cannot keep. A disk that is
// full below its configured capacity stops the dataset's warm-up until the
// retry time passes.
//
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "prefetch/chunk_filler.h"
#include "origin/origin_gate.h"
#include "proto/messages.h"

namespace hoard {

class Warmer {
 public:
  struct Options {
    int threads = 4;
    std::chrono::milliseconds retry_after{30000};
    std::chrono::milliseconds first_backoff{1000};
    std::chrono::milliseconds max_backoff{30000};
    std::shared_ptr<spdlog::logger> logger;
    // Time of backoffs and rescans, and the clock their waits end on.
    Clock* clock = Clock::Real();
  };
  struct Target {
    std::shared_ptr<const DatasetView> dataset;
    std::shared_ptr<const std::vector<ChunkRef>> owned;
  };

  Warmer(ChunkFiller* filler, ChunkStore* store, Options options);
  ~Warmer();

  void Start();
  void Stop();

  // Replaces the work list and restarts the scan.
  void SetTargets(std::vector<Target> targets);

  // The files of a dataset with a failed chunk (at most 100), in dataset
  // order, each with the reason of its first failed chunk.
  std::vector<proto::FileFailure> Failures(uint64_t uid) const;

  // Bumps whenever the failure list changes, so a reporter can tell it has
  // something new to say.
  uint64_t failure_generation() const { return failure_generation_.load(); }

  // Called (without locks held) when a pass over the targets has nothing left
  // to fetch, so the node can report at once instead of at its next
  // heartbeat.
  void SetOnIdle(std::function<void()> on_idle);

  // Waits up to `timeout` until a pass over the current (non-empty) targets
  // found nothing left to fetch now and nothing is in flight; false if that
  // did not happen in time. Until the next SetTargets or rescan (after
  // retry_after, or a backoff's end) the store then holds what the warm-up
  // can get. Tests use it instead of watching the store stay still.
  bool WaitIdle(std::chrono::milliseconds timeout) const EXCLUDES(mu_);

  uint64_t fetched_chunks() const { return fetched_chunks_.load(); }
  uint64_t fetched_bytes() const { return fetched_bytes_.load(); }

 private:
  struct Job {
    std::shared_ptr<const DatasetView> dataset;
    ChunkRef chunk;
    size_t target = 0;
    uint64_t generation = 0;
  };

  void WorkerLoop();
  void RunJob(const Job& job);
  // Finds the next owned chunk not in the store.
  bool NextJobLocked(Job* job, std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  void RecordFailure(const Job& job, const std::string& path, const std::string& error) EXCLUDES(mu_);
  // After a kUnavailable failure: pauses the job's target and queues the
  // chunk to be tried first.
  std::chrono::milliseconds BackOff(const Job& job) EXCLUDES(mu_);
  void EndBackoff(const Job& job) EXCLUDES(mu_);
  void ClearFailure(const Job& job) EXCLUDES(mu_);

  ChunkFiller* filler_;
  ChunkStore* store_;
  Options options_;
  std::vector<std::thread> threads_;

  mutable Mutex mu_;
  CondVar cv_;
  mutable CondVar idle_cv_;  // idle_notified_ became true
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // bumps on SetTargets
  std::vector<Target> targets_ GUARDED_BY(mu_);
  std::vector<size_t> cursor_ GUARDED_BY(mu_);  // next position per target
  std::vector<bool> blocked_ GUARDED_BY(mu_);   // store full for this target
  struct Backoff {
    std::chrono::steady_clock::time_point until;
    std::chrono::milliseconds interval{0};
    std::vector<ChunkRef> retry;  // failed with kUnavailable; tried first
  };
  std::vector<Backoff> backoff_ GUARDED_BY(mu_);  // per target
  std::function<void()> on_idle_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;  // jobs taken, not finished
  bool idle_notified_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point next_rescan_ GUARDED_BY(mu_);
  // Failures by dataset uid, then chunk ordinal (a file's chunks fail and
  // succeed separately); at most kMaxFailures per dataset.
  static constexpr size_t kMaxFailures = 1000;
  std::map<uint64_t, std::map<uint64_t, proto::FileFailure>> failures_ GUARDED_BY(mu_);
  std::set<uint64_t> capacity_logged_ GUARDED_BY(mu_);  // datasets whose full cache was logged

  std::atomic<uint64_t> failure_generation_{0};
  std::atomic<uint64_t> fetched_chunks_{0};
  std::atomic<uint64_t> fetched_bytes_{0};
};

}  // namespace hoard
