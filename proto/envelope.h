// File: proto/envelope.h
//
// Encoding and decoding of the message envelope described in messages.h. This
// is the only code that turns bytes from the network into typed messages; it
// enforces the version, the type list and every size limit, and never throws.
//
// Decode budget (common/alloc_budget.h): a message of N header bytes may
// allocate DecodeBudget(N) = 16 N + 64 KiB while it is decoded, shared by
// DecodeMessage (the msgpack tree of the header) and BodyAs (the structs).
// Past it the decode stops and the message is refused as malformed
// (InvalidArgument "... decoding would take more than M bytes"). The payload
// frame is adopted as it came, never decoded, and costs nothing.
//
// Thread-safety: functions are pure; an Envelope is owned by one thread.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>
#include <zmq.hpp>

#include "common/alloc_budget.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard::proto {

// A decoded message. `body` points into `handle`'s zone.
struct Envelope {
  MsgType type = MsgType::kError;
  uint64_t id = 0;
  Status status;  // a reply's outcome; OK for requests
  msgpack::object_handle handle;
  msgpack::object body;
  zmq::message_t payload;  // empty when the message had none
  bool has_payload = false;
  // What BodyAs may still allocate: the message's decode budget less what
  // its tree was charged. Set by DecodeMessage.
  size_t body_budget = 0;
  // A request's sender's key class (proto/access.h), set by RpcServer before
  // the handler runs (which may log it: the coordinator's audit log).
  KeyClass key_class = KeyClass::kInsecure;

  std::string_view payload_view() const {
    return {static_cast<const char*>(payload.data()), payload.size()};
  }
};

// Converts the body to T; kInvalidArgument naming the type and the field
// problem if it does not fit (wrong msgpack type, not a map), or if the
// structs would take more than what is left of the message's decode budget.
template <typename T>
Result<T> BodyAs(const Envelope& env) {
  T out{};
  const std::exception_ptr failure = RunWithAllocBudget(env.body_budget, [&] { env.body.convert(out); });
  if (failure && IsAllocBudgetExceeded(failure)) {
    return Status::InvalidArgument(std::string("refused ") + TypeName(env.type) + " body: " +
                                   ExceptionMessage(failure) + " (what its msgpack tree left of the budget)");
  }
  if (failure) {
    return Status::InvalidArgument(std::string("malformed ") + TypeName(env.type) + " body: " +
                                   ExceptionMessage(failure));
  }
  return out;
}

// Packs the header frame of a message.
template <typename Body>
std::string EncodeHeader(MsgType type, uint64_t id, const Status& status, const Body& body) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(6);
  pk.pack(kProtocolVersion);
  pk.pack(static_cast<uint16_t>(type));
  pk.pack(id);
  pk.pack(static_cast<uint32_t>(status.code()));
  pk.pack(status.message());
  pk.pack(body);
  return std::string(buf.data(), buf.size());
}

// Decodes frame 0 (header) and adopts frame 1 (payload) if present. Checks, in
// order: frame count and sizes, msgpack well-formedness within decoder limits
// and the decode budget, envelope shape, protocol version, known type. The
// error says which failed.
// The returned message's id is also filled into `*id_out` when the header got
// far enough to carry one (so an error reply can echo it).
Result<Envelope> DecodeMessage(std::vector<zmq::message_t>& frames, uint64_t* id_out);

// Turns a body-less status into a kError header (for error replies).
std::string EncodeError(uint64_t id, const Status& status);

}  // namespace hoard::proto
