// File: common/fan_out.h
//
// FanOut runs fn(0), ..., fn(n-1) with at most `width` of them at once and
// returns the first error: the "N streams, next index, first error" loop of
// a checkpoint commit (chunks sent to peers) and of a drain round (files
// uploaded to the origin). It starts no thread: the caller's thread works
// through the indices itself, and up to width-1 helpers borrowed from a
// long-lived TaskPool join it. A helper the pool cannot start soon (all its
// threads busy) only means less parallelism, never a deadlock: the caller
// alone would finish every index, so FanOut may be called from a thread of
// the same pool.
//
//   Status s = FanOut(&pool_, files.size(), options_.streams,
//                     [&](size_t i) { return Upload(files[i]); });
//
// After the first error, indices not yet started are not started (those
// running finish); the error returned is the first one recorded. FanOut
// returns only once no helper runs `fn` any more, so `fn` may capture the
// caller's stack by reference; a helper that starts after that returns
// without calling it.
//
// Thread-safety: `fn` runs concurrently with itself; FanOut may be called
// from several threads at once on one pool.
#pragma once

#include <cstddef>
#include <functional>

#include "common/status.h"
#include "common/task_pool.h"

namespace hoard {

Status FanOut(TaskPool* pool, size_t n, size_t width, const std::function<Status(size_t)>& fn);

// The same, with the slot running each index as fn's second argument: 0 for
// the caller, 1 to width-1 for the helpers. A slot runs one index at a time,
// so what is kept per slot (a chunk buffer, an origin connection) needs no
// lock.
Status FanOut(TaskPool* pool, size_t n, size_t width, const std::function<Status(size_t index, size_t slot)>& fn);

}  // namespace hoard
