// File: coordinator/msgpack_codec.h
//
// Packing and bounded unpacking of the coordinator's durable msgpack state
// (StateStore's snapshot and log records, the checkpoint journal). The
// decoder limits are far above any real state (16M entries) and low enough
// that a damaged file cannot make msgpack allocate gigabytes for one array
// header.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>

#include <msgpack.hpp>

namespace hoard {

inline const msgpack::unpack_limit kStateDecodeLimits(/*array=*/1u << 24, /*map=*/1u << 16, /*str=*/1u << 20,
                                                      /*bin=*/1u << 30, /*ext=*/0, /*depth=*/8);

template <typename T>
std::string PackState(const T& value) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, value);
  return std::string(buf.data(), buf.size());
}

// Throws msgpack's exceptions on malformed input; callers turn them into
// kCorruption.
template <typename T>
void UnpackState(const char* data, size_t len, T* out) {
  msgpack::object_handle h = msgpack::unpack(data, len, nullptr, nullptr, kStateDecodeLimits);
  h.get().convert(*out);
}

}  // namespace hoard
