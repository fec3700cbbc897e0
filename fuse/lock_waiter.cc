#include "fuse/lock_waiter.h"

#include <algorithm>
#include <cerrno>

namespace hoard::fuse {

LockWaiter::LockWaiter() : thread_([this] { Loop(); }) {}

LockWaiter::~LockWaiter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Waiter& w : waiters_) fuse_reply_err(w.req, ENOLCK);
}

void LockWaiter::Wait(fuse_req_t req, Attempt attempt) {
  const auto first = std::chrono::milliseconds(5);
  {
    std::lock_guard lock(mu_);
    if (!abandoned_) {
      waiters_.push_back(Waiter{req, std::move(attempt), std::chrono::steady_clock::now() + first, first});
      cv_.notify_all();
      return;
    }
  }
  fuse_reply_err(req, ENOLCK);
}

void LockWaiter::Abandon() {
  std::list<Waiter> left;
  {
    std::unique_lock lock(mu_);
    abandoned_ = true;
    // The entry an attempt is running for stays with the loop, which replies.
    attempt_done_.wait(lock, [&] { return !in_attempt_; });
    left.swap(waiters_);
  }
  for (Waiter& w : left) fuse_reply_err(w.req, ENOLCK);
}

int LockWaiter::waiting() const {
  std::lock_guard lock(mu_);
  return int(waiters_.size());
}

void LockWaiter::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (const Waiter& w : waiters_) next = std::min(next, w.next);
    cv_.wait_until(lock, next);
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->next > now) {
        ++it;
        continue;
      }
      // The attempt may ask the coordinator: not under mu_, so that new
      // waiters are not held up. This thread alone takes entries out.
      Waiter& w = *it;
      in_attempt_ = true;
      lock.unlock();
      const int result = fuse_req_interrupted(w.req) ? EINTR : w.attempt();
      lock.lock();
      in_attempt_ = false;
      attempt_done_.notify_all();
      if (abandoned_) {
        // Abandon waits for this attempt; `w` is still ours to answer, the
        // rest are Abandon's.
        fuse_reply_err(w.req, result == EAGAIN ? ENOLCK : result);
        waiters_.erase(it);
        break;
      }
      if (result == EAGAIN) {
        w.backoff = std::min(w.backoff * 2, std::chrono::milliseconds(200));
        w.next = std::chrono::steady_clock::now() + w.backoff;
        ++it;
      } else {
        fuse_reply_err(w.req, result);
        it = waiters_.erase(it);
      }
    }
  }
}

}  // namespace hoard::fuse
