#include "common/task_pool.h"

#include <algorithm>

namespace hoard {

TaskPool::TaskPool(Options options) : options_(options) {}

TaskPool::~TaskPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.NotifyAll();
  // Threads drain the queue before they exit; none starts after stopping_.
  std::unordered_map<std::thread::id, std::thread> all;
  {
    MutexLock lock(&mu_);
    all.swap(threads_);
  }
  for (auto& [id, t] : all) t.join();
}

void TaskPool::Run(std::function<void()> fn) {
  ReapExited();
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
    // A thread waiting for work takes it; else start one, unless at the cap
    // (then the first thread to finish takes it).
    if (idle_ < queue_.size() && threads_.size() - exited_.size() < std::max<size_t>(options_.max_threads, 1)) {
      std::thread t([this] { Loop(); });
      const std::thread::id id = t.get_id();
      threads_.emplace(id, std::move(t));
    }
  }
  work_cv_.NotifyOne();
}

void TaskPool::Loop() {
  MutexLock lock(&mu_);
  for (;;) {
    if (!queue_.empty()) {
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.Unlock();
      fn();
      fn = nullptr;  // what it captured goes now, not under the lock
      lock.Lock();
      continue;
    }
    if (stopping_) return;
    ++idle_;
    const bool woken = work_cv_.WaitFor(&mu_, options_.idle_for, [&] {
      mu_.AssertHeld();
      return stopping_ || !queue_.empty();
    });
    --idle_;
    if (!woken && threads_.size() - exited_.size() > options_.keep_idle) {
      // Idle too long, and more threads than are kept: leave. (Our entry in
      // threads_ is joined by the next Run, or the destructor.)
      exited_.push_back(std::this_thread::get_id());
      return;
    }
  }
}

void TaskPool::ReapExited() {
  std::vector<std::thread> done;
  {
    MutexLock lock(&mu_);
    if (exited_.empty()) return;
    for (const std::thread::id& id : exited_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    exited_.clear();
  }
  for (std::thread& t : done) t.join();
}

size_t TaskPool::threads() const {
  MutexLock lock(&mu_);
  return threads_.size() - exited_.size();
}

size_t TaskPool::idle() const {
  MutexLock lock(&mu_);
  return idle_;
}

}  // namespace hoard
