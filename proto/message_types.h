// File: proto/message_types.h
//
// The one list of hoard's wire message types. Everything that depends on the
// set of types is generated from HOARD_MESSAGE_TYPES, so the places that
// used to be kept in step by hand cannot disagree: MsgType, LimitsOf and
// ReplyType (proto/messages.h), IsKnownType and TypeName (proto/envelope.cc),
// MayCall (proto/access.h), UsesDataChannel (proto/data_channel.h), the
// body decoder switch of fuzz/message_fuzz.cc and the message seeds of
// fuzz/make_seeds.cc. Beside it, HOARD_IDEMPOTENT_REQUESTS (below) lists the
// requests a client may send twice (IsIdempotent).
//
// To add a message type: write its struct (messages.h or ckpt_messages.h; a
// request names its kType and Reply) and add its row below. That is all; a
// richer fuzz seed than the struct's defaults is optional (make_seeds.cc).
// proto/message_types_test.cc checks that each struct agrees with its row, and
// pins the admin, client and data-channel sets and the per-type limits:
// changing who may send what, or how, is meant to be seen.
//
// A row is X(name, number, body, kind, access, channel, header, payload):
//   name     MsgType::k<name>, and TypeName's string: logs and error
//            replies show it, so renaming one is visible to operators.
//   number   its value on the wire: never reuse or renumber one (an old peer
//            would read it as the old message); gaps are free.
//   body     the struct its header's body decodes into, one struct per type.
//   kind     kRequest (the struct names kType and Reply) or kReply.
//   access   the least key class that may send the request (proto/access.h
//            says which and why): kAdmin for requests that change the cluster
//            at the operator's will; kMember for what members do to run the
//            cluster (register, heartbeat, write checkpoints); kClient for
//            what a job hook or user may do (read, warm, lease). A key class
//            may send its own column and every one below it. Replies are
//            kMember (never checked: a server only checks requests).
//   channel  kData for the requests that move chunk bytes: with a data
//            channel open they go sealed over it instead of CURVE
//            (proto/data_channel.h); everything else kCurve.
//   header   the most header bytes one message may have (kSmallHeaderBytes
//            for a data-path request, whose header is a chunk's coordinates),
//   payload  and payload bytes (0: none; DecodeMessage refuses a payload
//            frame). Checked before the header is decoded, so a request
//            cannot make a server decode more than its type needs.
//
// The rows are expanded where MsgType, the structs and the size constants
// exist; this header defines only the column values. Thread-safety: constants.
#pragma once

#include <cstdint>

namespace hoard::proto {

enum class MsgKind : uint8_t { kRequest, kReply };
// Ordered: a key of class C may send the requests whose access is <= C.
enum class MsgAccess : uint8_t { kClient, kMember, kAdmin };
// Who a connection authenticated as (proto/curve.h), in the same order; an
// insecure server's connections (no keys: no identity) may send anything.
enum class KeyClass : uint8_t { kClient, kMember, kAdmin, kInsecure };
enum class MsgChannel : uint8_t { kCurve, kData };

}  // namespace hoard::proto

// clang-format off
#define HOARD_MESSAGE_TYPES(X)                                                                                        \
  /* name                number  body                 kind      access   channel header             payload */        \
  X(Error,               1,      ErrorBody,           kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(Ping,                2,      Ping,                kRequest, kClient, kCurve, kSmallHeaderBytes, 0)                \
  X(Pong,                3,      Pong,                kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Member -> any server with a data channel (proto/data_channel.h), over CURVE. */                                 \
  X(OpenDataChannel,     4,      OpenDataChannel,     kRequest, kMember, kCurve, kSmallHeaderBytes, 0)                \
  X(DataChannel,         5,      DataChannel,         kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Node agent -> coordinator. */                                                                                    \
  X(RegisterNode,        10,     RegisterNode,        kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(RegisterNodeReply,   11,     RegisterNodeReply,   kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(Heartbeat,           12,     Heartbeat,           kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(HeartbeatReply,      13,     HeartbeatReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Anyone -> coordinator. */                                                                                        \
  X(GetClusterMap,       20,     GetClusterMap,       kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(ClusterMap,          21,     ClusterMap,          kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(GetManifest,         22,     GetManifest,         kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(ManifestPart,        23,     ManifestPart,        kReply,   kMember, kCurve, kMaxHeaderBytes,   kMaxPayloadBytes) \
  X(ClusterStatus,       24,     ClusterStatus,       kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(ClusterStatusReply,  25,     ClusterStatusReply,  kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* CLI -> coordinator. */                                                                                           \
  X(DatasetAdd,          30,     DatasetAdd,          kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetAddReply,     31,     DatasetAddReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetList,         32,     DatasetList,         kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetListReply,    33,     DatasetListReply,    kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetRemove,       34,     DatasetRemove,       kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetRemoveReply,  35,     DatasetRemoveReply,  kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(Warm,                36,     Warm,                kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(WarmReply,           37,     WarmReply,           kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(NodeDrain,           38,     NodeDrain,           kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(NodeDrainReply,      39,     NodeDrainReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(NodeRemove,          40,     NodeRemove,          kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(NodeRemoveReply,     41,     NodeRemoveReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetRefresh,      42,     DatasetRefresh,      kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetRefreshReply, 43,     DatasetRefreshReply, kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Mount or peer -> node agent; CLI -> node agent: status, scrub now (node/scrubber.h). */                         \
  X(GetChunk,            50,     GetChunk,            kRequest, kMember, kData,  kSmallHeaderBytes, 0)                \
  X(ChunkData,           51,     ChunkData,           kReply,   kMember, kCurve, kMaxHeaderBytes,   kMaxPayloadBytes) \
  X(NodeStatus,          52,     NodeStatus,          kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(NodeStatusReply,     53,     NodeStatusReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(Scrub,               54,     Scrub,               kRequest, kMember, kCurve, kSmallHeaderBytes, 0)                \
  X(ScrubReply,          55,     ScrubReply,          kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Checkpoints (proto/ckpt_messages.h): mount/CLI/node -> coordinator. */                                           \
  X(CkptLookup,          60,     CkptLookup,          kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptEntryReply,      61,     CkptEntryReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptList,            62,     CkptList,            kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptListReply,       63,     CkptListReply,       kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptCreate,          64,     CkptCreate,          kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptRename,          65,     CkptRename,          kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptRenameReply,     66,     CkptRenameReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptRemove,          67,     CkptRemove,          kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptRemoveReply,     68,     CkptRemoveReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptCommit,          69,     CkptCommit,          kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptSetAttr,         70,     CkptSetAttr,         kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptStatus,          71,     CkptStatus,          kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptStatusReply,     72,     CkptStatusReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptFlush,           73,     CkptFlush,           kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptFlushReply,      74,     CkptFlushReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptWork,            75,     CkptWork,            kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptWorkReply,       76,     CkptWorkReply,       kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptDrained,         77,     CkptDrained,         kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptDrainedReply,    78,     CkptDrainedReply,    kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Checkpoint replicas: mount/node -> node. */                                                                      \
  X(PutCkptChunk,        80,     PutCkptChunk,        kRequest, kMember, kData,  kSmallHeaderBytes, kMaxPayloadBytes) \
  X(CkptPutReply,        81,     CkptPutReply,        kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(GetCkptChunk,        82,     GetCkptChunk,        kRequest, kMember, kData,  kSmallHeaderBytes, 0)                \
  X(CkptChunkData,       83,     CkptChunkData,       kReply,   kMember, kCurve, kMaxHeaderBytes,   kMaxPayloadBytes) \
  /* Checkpoint sessions and locks: mount -> coordinator. */                                                          \
  X(CkptSession,         84,     CkptSession,         kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptSessionReply,    85,     CkptSessionReply,    kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptLock,            86,     CkptLock,            kRequest, kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(CkptLockReply,       87,     CkptLockReply,       kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Job leases (coordinator/leases.h): hook/CLI -> coordinator. */                                                  \
  X(LeaseTake,           90,     LeaseTake,           kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(LeaseTakeReply,      91,     LeaseTakeReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(LeaseRelease,        92,     LeaseRelease,        kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(LeaseReleaseReply,   93,     LeaseReleaseReply,   kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(LeaseList,           94,     LeaseList,           kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(LeaseListReply,      95,     LeaseListReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  /* Eviction settings and tenant quotas: CLI -> coordinator (coordinator/eviction.h). */                             \
  X(DatasetSet,          100,    DatasetSet,          kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(DatasetSetReply,     101,    DatasetSetReply,     kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(QuotaSet,            102,    QuotaSet,            kRequest, kAdmin,  kCurve, kMaxHeaderBytes,   0)                \
  X(QuotaSetReply,       103,    QuotaSetReply,       kReply,   kMember, kCurve, kMaxHeaderBytes,   0)                \
  X(QuotaList,           104,    QuotaList,           kRequest, kClient, kCurve, kMaxHeaderBytes,   0)                \
  X(QuotaListReply,      105,    QuotaListReply,      kReply,   kMember, kCurve, kMaxHeaderBytes,   0)
// clang-format on

// The requests a client may send again when it cannot know whether the first
// one was applied (it went out and no reply came: the server died, or the
// reply was lost), which is what proto::LeaderClient does across a takeover of
// the coordinator. Sending one twice leaves the state as sending it once, and
// its reply means the same either way. Not listed means not idempotent: a
// new request type is never retried until someone adds it here (and to
// message_types_test.cc, which pins this set). Why each is here:
//   reads:     Ping (it also records the mount, a set), GetClusterMap,
//              GetManifest, ClusterStatus, DatasetList, CkptLookup (its
//              atime touch sets "now" again), CkptList, CkptStatus, and the
//              node's GetChunk, NodeStatus, GetCkptChunk;
//   heartbeats, whose body is the whole state, replacing the last:
//              RegisterNode (a re-registration is what a restarted node
//              sends anyway), Heartbeat, CkptSession;
//   set a flag to a value: Warm (warm = true; a second finds the dataset
//              warm and resident and evicts nothing), NodeDrain (draining =
//              the request's value: Coordinator::SetDraining says idempotent),
//              DatasetSet (the named settings = the request's values),
//              QuotaSet (the tenant's quota = bytes); and QuotaList, a read.
//   leases:    LeaseTake (take or renew: expiry = now + ttl, set again),
//              LeaseRelease (releasing a lease that is not there is done),
//              LeaseList (a read).
//   set attributes to values: CkptSetAttr (mode, times, owner, and a reopen
//              that holds the file's copies; a second changes only ctime).
// Resent with `retry` set, not listed: DatasetAdd, DatasetRemove, NodeRemove,
// CkptCreate, CkptRename, CkptRemove and CkptCommit. A second one is not the
// same as the first (AlreadyExists, NotFound or Stale for what succeeded), so
// each struct has `bool retry`, which LeaderClient sets on every attempt after
// a call's first and which lets it resend the request; the handler then
// counts finding the request's own effect as success: the dataset there with
// the same source and layout, the dataset, node or path already gone, an
// entry of the same kind and owner at the path (never committed, for a file),
// `from` gone and `to` there, generation `gen` there with the same size and
// checksums. The price: a resend cannot tell its own effect from the same
// change made by another client meanwhile (two mounts creating one new file
// within a takeover both succeed, as open(O_CREAT) without O_EXCL would).
// Neither, on purpose: DatasetRefresh (a second answers "unchanged" and
// loses the diff), CkptFlush, CkptWork (leases drain work and adds up
// rebuilt/dropped counts), CkptDrained (queues a publish), CkptLock (a
// retried take or release can cross another owner's), PutCkptChunk, Scrub,
// OpenDataChannel (RpcClient's own) and every reply type.
// clang-format off
#define HOARD_IDEMPOTENT_REQUESTS(X)                                                                  \
  X(Ping) X(GetClusterMap) X(GetManifest) X(ClusterStatus) X(DatasetList) X(CkptLookup) X(CkptList) \
  X(CkptStatus) X(GetChunk) X(NodeStatus) X(GetCkptChunk)                                            \
  X(RegisterNode) X(Heartbeat) X(CkptSession)                                                        \
  X(Warm) X(NodeDrain) X(CkptSetAttr) X(DatasetSet) X(QuotaSet) X(QuotaList)                       \
  X(LeaseTake) X(LeaseRelease) X(LeaseList)
// clang-format on

namespace hoard::proto {

// True for the request types HOARD_IDEMPOTENT_REQUESTS lists (by wire number:
// a client asks about the type it sent). Defined in proto/envelope.cc.
bool IsIdempotent(uint16_t type);

}  // namespace hoard::proto
