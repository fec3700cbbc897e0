// File: checkpoint/publisher.h
//
// The Publisher is the one thread that changes the checkpoint origin's
// namespace. It applies CkptTable's queue of origin operations (ckpt_table.h)
// strictly in order, one at a time, and reports each back with
// CkptTable::OriginOpDone, which removes it from the durable queue. The queue
// lives in the table's journal, not here: after a coordinator restart the
// publisher simply continues with the table's oldest operation, and an
// operation that was applied but not yet reported is applied again, so each
// operation is written to be idempotent:
//
//   publish  Stat the staging file; gone: kUploadLost (it was renamed before
//            the crash, or lost: the table has it drained again, which is
//            harmless either way). Else MakeDirs(parent), Rename(tmp, path).
//   rename   MakeDirs(parent of the target), Rename(from, to); a source that
//            is not on the origin means there is nothing to mirror: done.
//   unlink, rmdir
//            kNotFound counts as done.
//
// Errors: kUnavailable, kNoSpace and permission errors (the server is away,
// full, or refuses: DrainHealth::Reason) are retried forever with exponential
// backoff (min_backoff doubling to max_backoff, 10 s, so that an origin that
// is back is used within 10 s): nothing is dropped or reordered, the copies on
// the nodes stay meanwhile. Other kIoErrors are retried `io_error_attempts`
// times, then treated as permanent. Every failed attempt is recorded in the
// table (CkptTable::OriginOpFailed) for `hoard status` and `hoard checkpoint
// status`.
// Permanent errors (kNotEmpty, kIsDirectory, ...: the origin was changed
// behind hoard's back) are logged as errors and the operation is reported
// kFailed, so one bad entry cannot stop every later checkpoint; such a file
// stays below P and shows as overdue in `hoard status`, and the commit
// markers of its directory are never published (the table queues a marker
// only once every other file of its directory is P).
//
// Thread-safety: Notify, Stop and WaitIdle may be called from any thread.
// Lock order: the table's lock may be held when Notify is called (it is the
// table's listener), so the publisher never calls the table with mu_ held.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "origin/ckpt_origin.h"
#include "checkpoint/ckpt_table.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace hoard {

class Publisher {
 public:
  struct Options {
    CkptTable* table = nullptr;   // required, outlives the publisher
    CkptOrigin* origin = nullptr;  // required, outlives the publisher
    std::shared_ptr<spdlog::logger> logger;  // required
    std::chrono::milliseconds min_backoff{100};
    std::chrono::milliseconds max_backoff{std::chrono::seconds(10)};
    // With the backoff doubling from 100 ms to 10 s: about 2 minutes for an
    // NFS server to get over an EIO or ESTALE (a restart, a failover).
    int io_error_attempts = 18;
    Clock* clock = Clock::Real();  // the backoff between attempts
  };

  // Starts the thread and registers itself as the table's listener.
  explicit Publisher(Options options);
  ~Publisher();  // Stop()
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Wakes the thread: operations were queued.
  void Notify();
  // Stops the thread after the operation in progress (its retries end).
  void Stop();
  // Test helper: true once the thread has found the table's queue empty
  // after the last Notify (within `limit`, real time).
  bool WaitIdle(std::chrono::milliseconds limit);

 private:
  enum class Attempt { kDone, kUploadLost, kRetry, kFailed };
  void Run();
  Attempt ApplyOnce(const OriginOp& op, int* io_errors);
  // Sleeps `d` unless stopped; false when stopped.
  bool SleepUnlessStopped(std::chrono::milliseconds d) EXCLUDES(mu_);

  Options options_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool pending_ GUARDED_BY(mu_) = false;  // Notify since the thread last looked
  // The thread's last look found no operation queued (and none came since).
  bool idle_ GUARDED_BY(mu_) = false;
  CondVar idle_cv_;  // idle_ became true
  std::thread thread_;
};

}  // namespace hoard
