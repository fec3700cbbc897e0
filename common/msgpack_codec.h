// File: common/msgpack_codec.h
//
// Packing and bounded unpacking of the coordinator's durable msgpack state
// (StateStore's snapshot and log records, the checkpoint journal and
// snapshot, a node's or mount's saved cluster map). The decoder limits are
// far above any real state (16M entries) and low enough that a damaged file
// cannot make msgpack allocate gigabytes for one array header; the decode
// budget (common/alloc_budget.h) bounds the whole: decoding N bytes may
// allocate DecodeBudget(N) = 16 N + 64 KiB, tree and structs together, far
// above what real state takes (a checkpoint snapshot 8x, at any size).
//
// Thread-safety: stateless functions.
#pragma once

#include <exception>
#include <string>

#include <msgpack.hpp>

#include "common/alloc_budget.h"
#include "common/msgpack_budget.h"

namespace hoard {

inline const msgpack::unpack_limit kStateDecodeLimits(/*array=*/1u << 24, /*map=*/1u << 16, /*str=*/1u << 20,
                                                      /*bin=*/1u << 30, /*ext=*/0, /*depth=*/8);

template <typename T>
std::string PackState(const T& value) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, value);
  return std::string(buf.data(), buf.size());
}

// Unpacks `data` and calls fn(tree), both under the decode budget of `len`
// bytes. Throws msgpack's exceptions on malformed input, AllocBudgetExceeded
// (a std::bad_alloc) when the budget does not hold the tree and what fn
// makes of it, and whatever fn throws; callers turn them into kCorruption.
// They are rethrown after the budget ended, so that the callers' messages
// can allocate.
template <typename Fn>
void DecodeState(const char* data, size_t len, Fn&& fn) {
  const std::exception_ptr failure = RunWithAllocBudget(DecodeBudget(len), [&] {
    msgpack::object_handle h = UnpackCharged(data, len, kStateDecodeLimits);
    fn(h.get());
  });
  if (failure) std::rethrow_exception(failure);
}

// DecodeState converting the tree to T.
template <typename T>
void UnpackState(const char* data, size_t len, T* out) {
  DecodeState(data, len, [&](const msgpack::object& tree) { tree.convert(*out); });
}

}  // namespace hoard
