// File: common/task_pool.h
//
// TaskPool runs closures on threads of its own and never makes one closure
// wait for another: a closure that blocks for seconds (a request to a peer
// that was stopped, waiting out its timeout) keeps its thread, and the next
// closure gets an idle thread or a new one, up to `max_threads`; past that,
// closures queue until a thread is free. Threads beyond `keep_idle` exit
// after `idle_for` without work, so a burst of stuck requests does not leave
// hundreds of threads behind.
//
//   TaskPool pool({.max_threads = 256});
//   pool.Run([state] { state->Deliver(Fetch()); });
//
// Thread-safety: Run may be called from any thread, also from a closure.
// The destructor waits for every closure queued or running: whatever the
// closures use must outlive the pool (declare it after those members).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace hoard {

class TaskPool {
 public:
  struct Options {
    size_t max_threads = 256;
    size_t keep_idle = 4;
    std::chrono::milliseconds idle_for{10000};
  };

  explicit TaskPool(Options options);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs `fn` on a pool thread (queued while `max_threads` are busy).
  void Run(std::function<void()> fn);

  // Threads alive now, and those of them waiting for work (for tests).
  size_t threads() const;
  size_t idle() const;

 private:
  void Loop() EXCLUDES(mu_);
  // Joins the threads that exited; takes them out under mu_, joins outside.
  void ReapExited() EXCLUDES(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar work_cv_;  // queue_ not empty, or stopping_
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  size_t idle_ GUARDED_BY(mu_) = 0;  // threads waiting on work_cv_
  bool stopping_ GUARDED_BY(mu_) = false;
  // Every thread started and not yet joined, by id; a thread that exits
  // (idle too long) puts its id in exited_ for the next Run to join.
  std::unordered_map<std::thread::id, std::thread> threads_ GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ GUARDED_BY(mu_);
};

}  // namespace hoard
