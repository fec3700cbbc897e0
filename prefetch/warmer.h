// File: prefetch/warmer.h
//
// Warmer fills this node's chunk store with the chunks it owns of every
// dataset marked warm, from the origin, on a pool of worker threads.
//
// It works from a list of targets (dataset + owned chunks) that the node agent
// replaces whenever placement or the dataset list changes. Chunks already in
// the store are skipped, so an interrupted warm-up resumes where it stopped.
// A chunk that fails is recorded with its file and reason and retried after
// `retry_after`; a full store stops that dataset's warm-up (recorded once)
// until the targets change or the retry time passes.
//
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "prefetch/chunk_filler.h"
#include "proto/messages.h"

namespace hoard {

class Warmer {
 public:
  struct Options {
    int threads = 4;
    std::chrono::milliseconds retry_after{30000};
    std::shared_ptr<spdlog::logger> logger;
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

  // The most recent failures of a dataset (at most 100), oldest first.
  std::vector<proto::FileFailure> Failures(uint64_t uid) const;

  // Bumps whenever the failure list changes, so a reporter can tell it has
  // something new to say.
  uint64_t failure_generation() const { return failure_generation_.load(); }

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
  // Finds the next owned chunk not in the store. REQUIRES: mu_ held.
  bool NextJobLocked(Job* job);
  void RecordFailure(uint64_t uid, const std::string& path, const std::string& error);

  ChunkFiller* filler_;
  ChunkStore* store_;
  Options options_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                 // guarded by mu_
  uint64_t generation_ = 0;               // guarded by mu_; bumps on SetTargets
  std::vector<Target> targets_;           // guarded by mu_
  std::vector<size_t> cursor_;            // guarded by mu_; next position per target
  std::vector<bool> blocked_;             // guarded by mu_; store full for this target
  std::chrono::steady_clock::time_point next_rescan_;  // guarded by mu_
  // Failures by dataset uid, then path; bounded.
  std::map<uint64_t, std::map<std::string, std::string>> failures_;  // guarded by mu_

  std::atomic<uint64_t> failure_generation_{0};
  std::atomic<uint64_t> fetched_chunks_{0};
  std::atomic<uint64_t> fetched_bytes_{0};
};

}  // namespace hoard
