// File: common/work_queue.h
//
// WorkQueue<T> is hoard's one background-worker type: a FIFO of items of
// type T and a fixed set of threads that take them in order and hand each
// to one handler. Every daemon's "queue plus N threads" (the RPC server's
// workers, the mount's read-ahead, its read-tier writer, checkpoint
// write-behind and chunk prefetch) is one of these, so stopping, bounding and
// waiting work the same way everywhere.
//
//   WorkQueue<Job> q({.name = "rpc", .threads = 4, .max_items = 4096},
//                    [this](Job& job) { Serve(job); });
//   if (!q.Push(std::move(job), job.bytes)) AnswerBusy();
//
// Bounds: Push refuses an item (returns false, the item is not taken) when
// `max_items` items, or `max_cost` summed cost, are queued (running items do
// not count, unless `count_running`), or once Stop has begun. What to do then is the caller's choice:
// answer "busy", drop and count, or do the work inline. An item whose cost
// alone exceeds max_cost is accepted when nothing is queued, so one large
// item is never refused for ever. Two variants of the bound:
// `count_running` counts running items too, until their handler returns (a
// bound on the memory the items hold, not on the queue's length), and
// `drop_oldest` makes room for a new item by dropping the oldest queued ones
// (on_drop sees them) instead of refusing it (read-ahead: the newest
// requests matter most).
//
// Stop (and the destructor) drops what is queued, without running it, and
// waits for the items running to return; `on_drop`, if set, sees each
// dropped item (to answer a request or release what it holds). DropIf takes
// queued items out early (read-ahead of a file no longer read in order).
//
// Thread-safety: every method may be called from any thread, also from the
// handler (Push from a handler re-queues; WaitIdle from a handler would wait
// for itself and is not allowed). The handler runs without the queue's lock
// held. The handler and on_drop must outlive the queue: declare the queue
// after the members they use, so it is destroyed (and stopped) first.
// T must be movable and default-constructible.
// A handler may take the index of the thread running it (0 to threads-1) as
// a second argument, for state each thread keeps (a socket of its own): one
// thread runs one item at a time, so that state needs no lock.
// Invariants: queued_cost_ is the sum of the costs of the items in items_,
// running_cost_ that of the items whose handler runs (running_ of them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hoard {

template <typename T>
class WorkQueue {
 public:
  struct Options {
    std::string name = "work";  // thread name (15 bytes shown by the kernel)
    size_t threads = 1;
    size_t max_items = std::numeric_limits<size_t>::max();
    uint64_t max_cost = std::numeric_limits<uint64_t>::max();
    bool count_running = false;  // running items count toward the bounds (see the top)
    bool drop_oldest = false;    // when full, Push drops the oldest queued items instead
    std::function<void(T&)> on_drop;  // sees items Stop/DropIf/drop_oldest take out
  };
  using Handler = std::function<void(T&)>;
  using IndexedHandler = std::function<void(T&, size_t thread)>;

  WorkQueue(Options options, Handler handler)
      : WorkQueue(std::move(options), IndexedHandler([h = std::move(handler)](T& item, size_t) { h(item); })) {}
  WorkQueue(Options options, IndexedHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {
    const size_t n = options_.threads == 0 ? 1 : options_.threads;
    threads_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      threads_.emplace_back([this, i] { Loop(i); });
      pthread_setname_np(threads_.back().native_handle(), options_.name.substr(0, 15).c_str());
    }
  }
  ~WorkQueue() { Stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `item` with `cost` (bytes, or 0). False if full or stopping; the
  // item is then left with the caller (moved from only on success).
  bool Push(T&& item, uint64_t cost = 0) EXCLUDES(mu_) {
    std::vector<T> dropped;
    {
      MutexLock lock(&mu_);
      if (stopping_) return false;
      while (Full(cost) && options_.drop_oldest && !items_.empty()) {
        queued_cost_ -= items_.front().cost;
        dropped.push_back(std::move(items_.front().item));
        items_.pop_front();
      }
      if (Full(cost)) return false;
      items_.push_back(Entry{std::move(item), cost});
      queued_cost_ += cost;
    }
    work_cv_.NotifyOne();
    if (options_.on_drop) {
      for (T& d : dropped) options_.on_drop(d);
    }
    return true;
  }

  // Takes every queued item `pred` accepts out of the queue (on_drop sees
  // each); returns how many. Items already running are not affected.
  size_t DropIf(const std::function<bool(const T&)>& pred) EXCLUDES(mu_) {
    std::vector<T> dropped;
    {
      MutexLock lock(&mu_);
      for (auto it = items_.begin(); it != items_.end();) {
        if (!pred(it->item)) {
          ++it;
          continue;
        }
        queued_cost_ -= it->cost;
        dropped.push_back(std::move(it->item));
        it = items_.erase(it);
      }
    }
    if (!dropped.empty()) idle_cv_.NotifyAll();
    if (options_.on_drop) {
      for (T& item : dropped) options_.on_drop(item);
    }
    return dropped.size();
  }

  // Returns once nothing is queued or running (tests, shutdown ordering).
  void WaitIdle() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!items_.empty() || running_ > 0) idle_cv_.Wait(&mu_);
  }

  // Drops what is queued (on_drop sees it) and joins the threads after the
  // items running return. Idempotent; Push fails afterwards.
  void Stop() EXCLUDES(mu_) {
    std::deque<Entry> dropped;
    {
      MutexLock lock(&mu_);
      if (stopping_ && threads_.empty()) return;
      stopping_ = true;
      dropped.swap(items_);
      queued_cost_ = 0;
    }
    work_cv_.NotifyAll();
    idle_cv_.NotifyAll();
    if (options_.on_drop) {
      for (Entry& e : dropped) options_.on_drop(e.item);
    }
    std::vector<std::thread> threads;
    {
      MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) {
      if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
      else if (t.joinable()) t.detach();  // Stop from a handler: it returns on its own
    }
  }

  size_t queued() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return items_.size();
  }
  uint64_t queued_cost() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return queued_cost_;
  }
  // Items queued or running.
  size_t pending() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return items_.size() + running_;
  }

 private:
  struct Entry {
    T item;
    uint64_t cost;
  };

  // Whether an item of `cost` would exceed a bound now.
  bool Full(uint64_t cost) const REQUIRES(mu_) {
    const size_t items = items_.size() + (options_.count_running ? running_ : 0);
    const uint64_t held = queued_cost_ + (options_.count_running ? running_cost_ : 0);
    if (items >= options_.max_items) return true;
    return items > 0 && cost > options_.max_cost - std::min(held, options_.max_cost);
  }

  void Loop(size_t index) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (;;) {
      while (!stopping_ && items_.empty()) work_cv_.Wait(&mu_);
      if (stopping_) return;
      Entry e = std::move(items_.front());
      items_.pop_front();
      queued_cost_ -= e.cost;
      running_cost_ += e.cost;
      ++running_;
      lock.Unlock();
      handler_(e.item, index);
      const uint64_t cost = e.cost;
      e = Entry{};  // what the item holds goes now, not under the lock
      lock.Lock();
      running_cost_ -= cost;
      --running_;
      if (items_.empty() && running_ == 0) idle_cv_.NotifyAll();
    }
  }

  const Options options_;
  const IndexedHandler handler_;
  mutable Mutex mu_;
  CondVar work_cv_;  // items_ not empty, or stopping_
  CondVar idle_cv_;  // items_ empty and running_ == 0, or stopping_
  std::deque<Entry> items_ GUARDED_BY(mu_);
  uint64_t queued_cost_ GUARDED_BY(mu_) = 0;
  uint64_t running_cost_ GUARDED_BY(mu_) = 0;
  size_t running_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

}  // namespace hoard
