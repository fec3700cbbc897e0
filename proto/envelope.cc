#include "proto/envelope.h"

#include <optional>

#include "common/msgpack_budget.h"

namespace hoard::proto {
namespace {

// Decoder limits: generous for real messages, small enough that a hostile
// header cannot make the decoder allocate much more than its own size (msgpack
// allocates an array's slots when it reads the array's header).
const msgpack::unpack_limit kLimits(/*array=*/kMaxArrayEntries, /*map=*/1u << 12, /*str=*/1u << 20,
                                    /*bin=*/kMaxHeaderBytes, /*ext=*/0, /*depth=*/10);

std::string Size(size_t bytes) { return std::to_string(bytes) + " bytes"; }

// Reads a msgpack unsigned integer at `*pos`; false if there is none.
bool ReadUint(std::string_view b, size_t* pos, uint64_t* out) {
  if (*pos >= b.size()) return false;
  const auto tag = uint8_t(b[*pos]);
  size_t width = 0;
  if (tag <= 0x7F) {
    *out = tag;
    ++*pos;
    return true;
  }
  if (tag == 0xCC) width = 1;
  else if (tag == 0xCD) width = 2;
  else if (tag == 0xCE) width = 4;
  else if (tag == 0xCF) width = 8;
  else return false;
  if (*pos + 1 + width > b.size()) return false;
  *out = 0;
  for (size_t i = 0; i < width; ++i) *out = (*out << 8) | uint8_t(b[*pos + 1 + i]);
  *pos += 1 + width;
  return true;
}

// The type a header names, read from its first bytes without decoding it
// (the array header, the version, the type); nullopt if they are not that.
std::optional<MsgType> PeekType(std::string_view header) {
  size_t pos = 1;
  uint64_t version = 0, type = 0;
  if (header.empty() || uint8_t(header[0]) != 0x96 || !ReadUint(header, &pos, &version) ||
      !ReadUint(header, &pos, &type) || type > 0xFFFF || !IsKnownType(uint16_t(type))) {
    return std::nullopt;
  }
  return static_cast<MsgType>(type);
}

}  // namespace

bool IsKnownType(uint16_t t) {
  switch (static_cast<MsgType>(t)) {
#define HOARD_MSG_CASE(name, ...) case MsgType::k##name:
    HOARD_MESSAGE_TYPES(HOARD_MSG_CASE)
#undef HOARD_MSG_CASE
    return true;
  }
  return false;
}

bool IsIdempotent(uint16_t t) {
  switch (static_cast<MsgType>(t)) {
#define HOARD_IDEMPOTENT_CASE(name) case MsgType::k##name:
    HOARD_IDEMPOTENT_REQUESTS(HOARD_IDEMPOTENT_CASE)
#undef HOARD_IDEMPOTENT_CASE
    return true;
    default:
      return false;
  }
}

const char* TypeName(MsgType t) {
  switch (t) {
#define HOARD_MSG_NAME(name, ...) \
  case MsgType::k##name:          \
    return #name;
    HOARD_MESSAGE_TYPES(HOARD_MSG_NAME)
#undef HOARD_MSG_NAME
  }
  return "Unknown";
}

Result<Envelope> DecodeMessage(std::vector<zmq::message_t>& frames, uint64_t* id_out) {
  *id_out = 0;
  if (frames.empty()) return Status::InvalidArgument("empty message");
  if (frames.size() > 2) {
    return Status::InvalidArgument("message has " + std::to_string(frames.size()) +
                                   " frames; at most 2 (header, payload) are allowed");
  }
  const zmq::message_t& header = frames[0];
  if (header.size() > kMaxHeaderBytes) {
    return Status::InvalidArgument("message header of " + Size(header.size()) + " exceeds the limit of " +
                                   Size(kMaxHeaderBytes));
  }
  if (frames.size() == 2 && frames[1].size() > kMaxPayloadBytes) {
    return Status::InvalidArgument("message payload of " + Size(frames[1].size()) +
                                   " exceeds the limit of " + Size(kMaxPayloadBytes));
  }
  // Each type's own limits, before anything is decoded.
  if (std::optional<MsgType> type = PeekType(header.to_string_view())) {
    const MessageLimits limits = LimitsOf(*type);
    if (header.size() > limits.header) {
      return Status::InvalidArgument(std::string(TypeName(*type)) + " header of " + Size(header.size()) +
                                     " exceeds its limit of " + Size(limits.header));
    }
    if (frames.size() == 2 && limits.payload == 0) {
      return Status::InvalidArgument(std::string(TypeName(*type)) + " carries no payload");
    }
    if (frames.size() == 2 && frames[1].size() > limits.payload) {
      return Status::InvalidArgument(std::string(TypeName(*type)) + " payload of " + Size(frames[1].size()) +
                                     " exceeds its limit of " + Size(limits.payload));
    }
  }

  Envelope env;
  // The tree is charged before it is built; what is left is the body's.
  const size_t budget = DecodeBudget(header.size());
  size_t charged = 0;
  const std::exception_ptr failure = RunWithAllocBudget(
      budget,
      [&] { env.handle = UnpackCharged(static_cast<const char*>(header.data()), header.size(), kLimits); },
      &charged);
  if (failure) {
    if (IsAllocBudgetExceeded(failure)) {
      return Status::InvalidArgument("message header of " + Size(header.size()) + " refused: " +
                                     ExceptionMessage(failure));
    }
    return Status::InvalidArgument(std::string("header is not valid msgpack: ") + ExceptionMessage(failure));
  }
  env.body_budget = budget - charged;
  const msgpack::object& root = env.handle.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size != 6) {
    return Status::InvalidArgument("header is not a 6-element array");
  }
  const msgpack::object* f = root.via.array.ptr;
  if (f[0].type != msgpack::type::POSITIVE_INTEGER || f[1].type != msgpack::type::POSITIVE_INTEGER ||
      f[2].type != msgpack::type::POSITIVE_INTEGER || f[3].type != msgpack::type::POSITIVE_INTEGER ||
      f[4].type != msgpack::type::STR) {
    return Status::InvalidArgument("header fields have the wrong types");
  }
  *id_out = f[2].via.u64;
  if (f[0].via.u64 != kProtocolVersion) {
    return Status::InvalidArgument("protocol version " + std::to_string(f[0].via.u64) +
                                   " is not supported (this side speaks " +
                                   std::to_string(kProtocolVersion) + ")");
  }
  if (f[1].via.u64 > 0xFFFF || !IsKnownType(static_cast<uint16_t>(f[1].via.u64))) {
    return Status::InvalidArgument("unknown message type " + std::to_string(f[1].via.u64));
  }
  env.type = static_cast<MsgType>(f[1].via.u64);
  env.id = f[2].via.u64;
  const Code code = CodeFromWire(static_cast<uint32_t>(std::min<uint64_t>(f[3].via.u64, 0xFFFFFFFF)));
  if (code != Code::kOk) env.status = Status(code, std::string(f[4].via.str.ptr, f[4].via.str.size));
  env.body = f[5];
  if (frames.size() == 2) {
    env.payload = std::move(frames[1]);
    env.has_payload = true;
  }
  return env;
}

std::string EncodeError(uint64_t id, const Status& status) {
  return EncodeHeader(MsgType::kError, id, status, ErrorBody{});
}

}  // namespace hoard::proto
