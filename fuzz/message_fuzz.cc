// Fuzz target: every message a process decodes from the network.
//
// The input is frame 0 of a message (the envelope header, proto/messages.h).
// DecodeMessage checks it; if it passes, the body goes through BodyAs<T> for
// the struct its type names, so every request and reply decoder is reached
// (the seeds hold one real message of each type: fuzz/make_seeds.cc). A body
// that decodes must encode back to bytes that decode to the same encoding:
// what a server reads is what it would write. Paths of checkpoint requests go
// through IsSafeCkptPath and node reports' ordinals through DecodeOrdinals,
// as the servers do before using them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "proto/envelope.h"
#include "proto/ordinals.h"

namespace hoard::proto {
namespace {

// What servers do with a decoded body before using it.
template <typename T>
void Check(const T&) {}
void Check(const Heartbeat& hb) {
  for (const DatasetReport& r : hb.datasets) {
    (void)DecodeOrdinals(r.cached_ordinals, r.owned_chunks, r.cached_chunks, [](uint64_t) {});
  }
}
void Check(const CkptLookup& r) { (void)IsSafeCkptPath(r.path); }
void Check(const CkptList& r) { (void)IsSafeCkptPath(r.path); }
void Check(const CkptCreate& r) { (void)IsSafeCkptPath(r.path); }
void Check(const CkptRename& r) { (void)(IsSafeCkptPath(r.from) && IsSafeCkptPath(r.to)); }
void Check(const CkptRemove& r) { (void)IsSafeCkptPath(r.path); }
void Check(const CkptSetAttr& r) { (void)IsSafeCkptPath(r.path); }

template <typename T>
void Decode(MsgType type, const Envelope& env) {
  Result<T> body = BodyAs<T>(env);
  if (!body.ok()) {
    if (body.status().code() != Code::kInvalidArgument) std::abort();  // the documented error
    return;
  }
  Check(*body);
  const std::string once = EncodeHeader(type, env.id, env.status, *body);
  // Defaults fill in every field a body left out, so a body of empty maps
  // re-encodes many times larger (16 MB of them: 230 MB): past the limit,
  // nothing to compare.
  if (once.size() > kMaxHeaderBytes) return;
  std::vector<zmq::message_t> frames;
  frames.emplace_back(once.data(), once.size());
  uint64_t id = 0;
  Result<Envelope> again = DecodeMessage(frames, &id);
  Result<T> body2 = again.ok() ? BodyAs<T>(*again) : Result<T>(again.status());
  if (!body2.ok() || EncodeHeader(type, env.id, env.status, *body2) != once) {
    std::fprintf(stderr, "%s: a decoded body does not survive encode+decode: %s\n", TypeName(type),
                 body2.ok() ? "different bytes" : body2.status().ToString().c_str());
    std::abort();
  }
}

void DecodeBody(const Envelope& env) {
  switch (env.type) {
#define HOARD_FUZZ_BODY(name, number, body, ...) \
  case MsgType::k##name:                         \
    return Decode<body>(MsgType::k##name, env);
    HOARD_MESSAGE_TYPES(HOARD_FUZZ_BODY)
#undef HOARD_FUZZ_BODY
  }
  // DecodeMessage let through a type that is no row of HOARD_MESSAGE_TYPES:
  // IsKnownType is broken.
  std::fprintf(stderr, "type %u passed DecodeMessage but has no body decoder here\n",
               static_cast<unsigned>(env.type));
  std::abort();
}

}  // namespace
}  // namespace hoard::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hoard::proto;
  std::vector<zmq::message_t> frames;
  frames.emplace_back(data, size);
  // A payload frame, as GetChunk replies and PutCkptChunk requests carry.
  frames.emplace_back(data, std::min<size_t>(size, 16));
  uint64_t id = 0;
  hoard::Result<Envelope> env = DecodeMessage(frames, &id);
  if (!env.ok()) {
    if (env.status().code() != hoard::Code::kInvalidArgument) std::abort();
    return 0;
  }
  if (env->id != id || !env->has_payload) std::abort();
  DecodeBody(*env);
  return 0;
}
