#include "common/fan_out.h"

#include <algorithm>
#include <memory>

#include "common/mutex.h"

namespace hoard {
namespace {

// Shared with the helpers, which may outlive the call (a helper the pool
// starts late finds `closed` and leaves without touching `fn`).
struct FanOutState {
  Mutex mu;
  CondVar done_cv;  // active fell to 0
  const std::function<Status(size_t, size_t)>* fn GUARDED_BY(mu) = nullptr;
  size_t n = 0;
  size_t next GUARDED_BY(mu) = 0;
  size_t active GUARDED_BY(mu) = 0;  // helpers inside the work loop
  bool closed GUARDED_BY(mu) = false;
  Status first_error GUARDED_BY(mu);

  // Runs indices until none is left or one failed; drops mu around fn.
  void Work(size_t slot) REQUIRES(mu) {
    while (next < n && first_error.ok()) {
      const size_t i = next++;
      const std::function<Status(size_t, size_t)>& f = *fn;
      mu.Unlock();
      Status s = f(i, slot);
      mu.Lock();
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
    }
  }
};

}  // namespace

Status FanOut(TaskPool* pool, size_t n, size_t width, const std::function<Status(size_t)>& fn) {
  return FanOut(pool, n, width, std::function<Status(size_t, size_t)>([&fn](size_t i, size_t) { return fn(i); }));
}

Status FanOut(TaskPool* pool, size_t n, size_t width, const std::function<Status(size_t, size_t)>& fn) {
  if (n == 0) return Status::Ok();
  auto state = std::make_shared<FanOutState>();
  state->n = n;
  {
    MutexLock lock(&state->mu);
    state->fn = &fn;
  }
  const size_t helpers = pool == nullptr ? 0 : std::min(std::max<size_t>(width, 1), n) - 1;
  for (size_t h = 0; h < helpers; ++h) {
    pool->Run([state, slot = h + 1] {
      MutexLock lock(&state->mu);
      if (state->closed) return;
      ++state->active;
      state->Work(slot);
      if (--state->active == 0) state->done_cv.NotifyAll();
    });
  }
  MutexLock lock(&state->mu);
  state->Work(0);
  // No index is left to start: helpers still inside finish their own.
  state->closed = true;
  while (state->active > 0) state->done_cv.Wait(&state->mu);
  state->fn = nullptr;
  return state->first_error;
}

}  // namespace hoard
