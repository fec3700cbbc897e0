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
#define HOARD_FUZZ_BODY(Type, Struct) \
  case MsgType::Type:                 \
    return Decode<Struct>(MsgType::Type, env);
    HOARD_FUZZ_BODY(kError, ErrorBody)
    HOARD_FUZZ_BODY(kPing, Ping)
    HOARD_FUZZ_BODY(kPong, Pong)
    HOARD_FUZZ_BODY(kOpenDataChannel, OpenDataChannel)
    HOARD_FUZZ_BODY(kDataChannel, DataChannel)
    HOARD_FUZZ_BODY(kRegisterNode, RegisterNode)
    HOARD_FUZZ_BODY(kRegisterNodeReply, RegisterNodeReply)
    HOARD_FUZZ_BODY(kHeartbeat, Heartbeat)
    HOARD_FUZZ_BODY(kHeartbeatReply, HeartbeatReply)
    HOARD_FUZZ_BODY(kGetClusterMap, GetClusterMap)
    HOARD_FUZZ_BODY(kClusterMap, ClusterMap)
    HOARD_FUZZ_BODY(kGetManifest, GetManifest)
    HOARD_FUZZ_BODY(kManifestPart, ManifestPart)
    HOARD_FUZZ_BODY(kClusterStatus, ClusterStatus)
    HOARD_FUZZ_BODY(kClusterStatusReply, ClusterStatusReply)
    HOARD_FUZZ_BODY(kDatasetAdd, DatasetAdd)
    HOARD_FUZZ_BODY(kDatasetAddReply, DatasetAddReply)
    HOARD_FUZZ_BODY(kDatasetList, DatasetList)
    HOARD_FUZZ_BODY(kDatasetListReply, DatasetListReply)
    HOARD_FUZZ_BODY(kDatasetRemove, DatasetRemove)
    HOARD_FUZZ_BODY(kDatasetRemoveReply, DatasetRemoveReply)
    HOARD_FUZZ_BODY(kWarm, Warm)
    HOARD_FUZZ_BODY(kWarmReply, WarmReply)
    HOARD_FUZZ_BODY(kNodeDrain, NodeDrain)
    HOARD_FUZZ_BODY(kNodeDrainReply, NodeDrainReply)
    HOARD_FUZZ_BODY(kNodeRemove, NodeRemove)
    HOARD_FUZZ_BODY(kNodeRemoveReply, NodeRemoveReply)
    HOARD_FUZZ_BODY(kDatasetRefresh, DatasetRefresh)
    HOARD_FUZZ_BODY(kDatasetRefreshReply, DatasetRefreshReply)
    HOARD_FUZZ_BODY(kGetChunk, GetChunk)
    HOARD_FUZZ_BODY(kChunkData, ChunkData)
    HOARD_FUZZ_BODY(kNodeStatus, NodeStatus)
    HOARD_FUZZ_BODY(kNodeStatusReply, NodeStatusReply)
    HOARD_FUZZ_BODY(kScrub, Scrub)
    HOARD_FUZZ_BODY(kScrubReply, ScrubReply)
    HOARD_FUZZ_BODY(kCkptLookup, CkptLookup)
    HOARD_FUZZ_BODY(kCkptEntryReply, CkptEntryReply)
    HOARD_FUZZ_BODY(kCkptList, CkptList)
    HOARD_FUZZ_BODY(kCkptListReply, CkptListReply)
    HOARD_FUZZ_BODY(kCkptCreate, CkptCreate)
    HOARD_FUZZ_BODY(kCkptRename, CkptRename)
    HOARD_FUZZ_BODY(kCkptRenameReply, CkptRenameReply)
    HOARD_FUZZ_BODY(kCkptRemove, CkptRemove)
    HOARD_FUZZ_BODY(kCkptRemoveReply, CkptRemoveReply)
    HOARD_FUZZ_BODY(kCkptCommit, CkptCommit)
    HOARD_FUZZ_BODY(kCkptSetAttr, CkptSetAttr)
    HOARD_FUZZ_BODY(kCkptStatus, CkptStatus)
    HOARD_FUZZ_BODY(kCkptStatusReply, CkptStatusReply)
    HOARD_FUZZ_BODY(kCkptFlush, CkptFlush)
    HOARD_FUZZ_BODY(kCkptFlushReply, CkptFlushReply)
    HOARD_FUZZ_BODY(kCkptWork, CkptWork)
    HOARD_FUZZ_BODY(kCkptWorkReply, CkptWorkReply)
    HOARD_FUZZ_BODY(kCkptDrained, CkptDrained)
    HOARD_FUZZ_BODY(kCkptDrainedReply, CkptDrainedReply)
    HOARD_FUZZ_BODY(kPutCkptChunk, PutCkptChunk)
    HOARD_FUZZ_BODY(kCkptPutReply, CkptPutReply)
    HOARD_FUZZ_BODY(kGetCkptChunk, GetCkptChunk)
    HOARD_FUZZ_BODY(kCkptChunkData, CkptChunkData)
    HOARD_FUZZ_BODY(kCkptSession, CkptSession)
    HOARD_FUZZ_BODY(kCkptSessionReply, CkptSessionReply)
    HOARD_FUZZ_BODY(kCkptLock, CkptLock)
    HOARD_FUZZ_BODY(kCkptLockReply, CkptLockReply)
#undef HOARD_FUZZ_BODY
  }
  // DecodeMessage let through a type this switch does not know: the two
  // lists (IsKnownType, here) disagree.
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
