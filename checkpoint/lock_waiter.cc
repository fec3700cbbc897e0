#include "checkpoint/lock_waiter.h"

#include <algorithm>
#include <cerrno>

namespace hoard::fuse {

LockWaiter::LockWaiter(Clock* clock) : clock_(clock), thread_([this] { Loop(); }) {}

LockWaiter::~LockWaiter() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
  for (Waiter& w : waiters_) fuse_reply_err(w.req, ENOLCK);
}

void LockWaiter::Wait(fuse_req_t req, Attempt attempt) {
  const auto first = std::chrono::milliseconds(5);
  {
    MutexLock lock(&mu_);
    if (!abandoned_) {
      waiters_.push_back(Waiter{req, std::move(attempt), clock_->Now() + first, first});
      cv_.NotifyAll();
      return;
    }
  }
  fuse_reply_err(req, ENOLCK);
}

void LockWaiter::Abandon() {
  std::list<Waiter> left;
  {
    MutexLock lock(&mu_);
    abandoned_ = true;
    // The entry an attempt is running for stays with the loop, which replies.
    while (in_attempt_) attempt_done_.Wait(&mu_);
    left.swap(waiters_);
  }
  for (Waiter& w : left) fuse_reply_err(w.req, ENOLCK);
}

int LockWaiter::waiting() const {
  MutexLock lock(&mu_);
  return int(waiters_.size());
}

void LockWaiter::Loop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    auto next = clock_->Now() + std::chrono::seconds(1);
    for (const Waiter& w : waiters_) next = std::min(next, w.next);
    clock_->WaitUntil(&cv_, &mu_, next);
    if (stopping_) break;
    const auto now = clock_->Now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->next > now) {
        ++it;
        continue;
      }
      // The attempt may ask the coordinator: not under mu_, so that new
      // waiters are not held up. This thread alone takes entries out.
      Waiter& w = *it;
      in_attempt_ = true;
      lock.Unlock();
      const int result = fuse_req_interrupted(w.req) ? EINTR : w.attempt();
      lock.Lock();
      in_attempt_ = false;
      attempt_done_.NotifyAll();
      if (abandoned_) {
        // Abandon waits for this attempt; `w` is still ours to answer, the
        // rest are Abandon's.
        fuse_reply_err(w.req, result == EAGAIN ? ENOLCK : result);
        waiters_.erase(it);
        break;
      }
      if (result == EAGAIN) {
        w.backoff = std::min(w.backoff * 2, std::chrono::milliseconds(200));
        w.next = clock_->Now() + w.backoff;
        ++it;
      } else {
        fuse_reply_err(w.req, result);
        it = waiters_.erase(it);
      }
    }
  }
}

}  // namespace hoard::fuse
