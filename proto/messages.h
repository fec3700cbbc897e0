// File: proto/messages.h
//
// Every message that crosses a process boundary in hoard, in one place.
//
// A message on the wire is a ZeroMQ multipart message:
//   frame 0  header: a msgpack array
//              [protocol_version, type, request_id, status_code, status_message, body]
//            where body is a msgpack map (the struct below, by field name).
//            Requests carry status_code 0 and an empty message.
//   frame 1  optional payload: raw bytes (chunk data, a manifest slice), kept
//            out of msgpack so large data is not copied through the encoder.
// Limits: kMaxHeaderBytes for frame 0, kMaxPayloadBytes for frame 1, no
// further frames; each type's own, smaller limits are LimitsOf's. A REQ-style
// empty delimiter frame before the header is accepted and echoed.
//
// On the wire a frame larger than kMaxWireFrameBytes travels in pieces
// (proto/wire_frames.h): a server socket takes no bigger frame from anyone,
// so a stranger who never gets past the ZeroMQ handshake cannot make it hold
// more than that per connection.
//
// A receiver answers a malformed, oversized, unknown-type or wrong-version
// message with an error reply (type kError, status InvalidArgument) and a log
// line, and keeps running (proto/envelope.h, proto/rpc_server.h).
//
// Compatibility: bodies are maps, so a new optional field can be added without
// a version bump (old readers ignore unknown keys; missing keys keep their
// defaults). Changing a field's meaning or type needs kProtocolVersion + 1.
//
// Each request struct names its type (kType) and its reply struct (Reply). The
// types, their numbers and who may send them are one list:
// proto/message_types.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <msgpack.hpp>

#include "common/build_info.h"
#include "proto/message_types.h"

// A body with no fields: an empty msgpack map (MSGPACK_DEFINE_MAP needs at
// least one field). Anything but a map is rejected, like any malformed body.
#define HOARD_EMPTY_BODY                                                       \
  template <typename Packer>                                                   \
  void msgpack_pack(Packer& pk) const {                                        \
    pk.pack_map(0);                                                            \
  }                                                                            \
  void msgpack_unpack(const msgpack::object& o) {                              \
    if (o.type != msgpack::type::MAP) throw msgpack::type_error();             \
  }

namespace hoard::proto {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxHeaderBytes = 16u << 20;
inline constexpr size_t kMaxPayloadBytes = 80u << 20;  // > the largest chunk (64 MiB)
// The largest frame a server socket receives (ZMQ_MAXMSGSIZE); bigger frames
// are split (proto/wire_frames.h). ZeroMQ allocates a frame's announced size
// before the handshake has authenticated anyone, so this is what one
// unauthenticated connection can make a server hold.
inline constexpr size_t kMaxWireFrameBytes = 64u << 10;
// The header of a request on the data path (a chunk's coordinates: a name of
// at most 64 bytes and a few integers).
inline constexpr size_t kSmallHeaderBytes = 4u << 10;
// The most entries one array of a header may have (the decoder refuses more):
// e.g. a checkpoint file's chunks, one checksum each in its commit.
inline constexpr uint32_t kMaxArrayEntries = 1u << 16;

// The wire's message types, one per row of HOARD_MESSAGE_TYPES.
enum class MsgType : uint16_t {
#define HOARD_MSG_ENUM(name, number, ...) k##name = number,
  HOARD_MESSAGE_TYPES(HOARD_MSG_ENUM)
#undef HOARD_MSG_ENUM
};

// What one message of a type may carry: its header's bytes and its payload's
// (0: no payload), the last two columns of HOARD_MESSAGE_TYPES. DecodeMessage
// checks them before it decodes the header, so a request cannot make a server
// decode more than its type needs. Only PutCkptChunk carries a payload to a
// server; replies carry chunks back.
struct MessageLimits {
  size_t header = 0;
  size_t payload = 0;
};
constexpr MessageLimits LimitsOf(MsgType type) {
  switch (type) {
#define HOARD_MSG_LIMITS(name, number, body, kind, access, channel, header, payload) \
  case MsgType::k##name:                                                             \
    return {header, payload};
    HOARD_MESSAGE_TYPES(HOARD_MSG_LIMITS)
#undef HOARD_MSG_LIMITS
  }
  // Not a type: DecodeMessage refuses it before asking.
  return {kMaxHeaderBytes, 0};
}

}  // namespace hoard::proto

// The checkpoint messages need only MsgType; included here so the cluster
// messages below can carry checkpoint summaries (ClusterStatusReply::ckpt_jobs).
#include "proto/ckpt_messages.h"

namespace hoard::proto {

// True for the rows of HOARD_MESSAGE_TYPES; a header naming any other type is
// rejected.
bool IsKnownType(uint16_t type);
const char* TypeName(MsgType type);

// ---- shared pieces ---------------------------------------------------------

// Sent as the body of a kError reply; the code and message are in the header.
struct ErrorBody {
  HOARD_EMPTY_BODY
};

// What a program was built from (common/build_info.h), as node agents,
// mounts and the coordinator report it, so `hoard status` shows a rolling
// upgrade. Empty: a peer from before builds were reported.
struct Build {
  std::string version;  // CMake's project() version, "0.1.0"
  // 12 hex digits, with "-dirty" for a tree with uncommitted changes
  // (BuildInfo::CommitLabel), or "unknown" (built without git)
  std::string commit;
  MSGPACK_DEFINE_MAP(version, commit);
  bool operator==(const Build&) const = default;
  bool operator<(const Build& o) const { return std::tie(version, commit) < std::tie(o.version, o.commit); }
};

// This program's build.
inline Build OwnBuild() { return {std::string(ThisBuild().version), ThisBuild().CommitLabel()}; }

struct NodeInfo {
  std::string name;
  std::string endpoint;         // tcp://host:port of its peer service
  uint64_t capacity_bytes = 0;  // the node's --capacity (or its disk's size), as last reported
  uint64_t used_bytes = 0;      // every kind on the node's disk: the used_*_bytes below together
  uint64_t chunks = 0;          // dataset chunks
  // Placement weight: the capacity the node registered with, in MiB
  // (CapacityWeight). Changed only by a committed map change, never by a
  // heartbeat, so every party that holds a map of one epoch places alike.
  double weight = 1;
  bool up = true;               // heard from within the down timeout
  int64_t last_seen_unix = 0;
  // Being drained: placement weight 0 (owns nothing), still serving what it
  // holds so the new owners can copy it.
  bool draining = false;
  // The scrubber (node/scrubber.h), as last reported: when its last full
  // pass ended (0: none yet) and the corrupt chunk files it and the readers
  // found since the node was set up. Like used_bytes, not part of placement.
  int64_t scrub_last_pass_unix = 0;
  uint64_t scrub_corrupt = 0;
  // The node agent's build, as it last registered or heartbeat (volatile,
  // like used_bytes: not saved, empty until the node speaks after a
  // coordinator restart).
  Build build;
  // What used_bytes (their sum) is made of, as last reported (volatile, like
  // used_bytes): dataset chunks, the mount's read tier, checkpoint copies
  // (store/disk_usage.h). --capacity bounds the sum.
  uint64_t used_dataset_bytes = 0;
  uint64_t used_read_tier_bytes = 0;
  uint64_t used_checkpoint_bytes = 0;
  // Down and out (Ceph's distinction): a node marked down keeps its placement
  // (`held`) for the coordinator's --out-after, so a reboot moves nothing
  // away and back; readers skip it meanwhile (it is not `up`). Past
  // --out-after the coordinator commits held = false: it is out, and its
  // chunks get new owners. down_since_unix is when it was marked down (wall
  // clock, 0 while up); saved with the member, so a coordinator restart does
  // not restart the count. Both change only by a committed map change.
  int64_t down_since_unix = 0;
  bool held = false;
  MSGPACK_DEFINE_MAP(name, endpoint, capacity_bytes, used_bytes, chunks, weight, up, last_seen_unix, draining,
                     scrub_last_pass_unix, scrub_corrupt, build, used_dataset_bytes, used_read_tier_bytes,
                     used_checkpoint_bytes, down_since_unix, held);
};

// A mount as it names itself in its map polls (Ping::mount), and as the
// coordinator lists the mounts it heard from (ClusterStatusReply::mounts).
// (node, mountpoint) is a mount's identity: a restarted or upgraded mount
// replaces its entry.
struct MountInfo {
  std::string node;        // its node's name (hoard-fuse --node-name), else its host's name
  std::string mountpoint;  // at most kMaxMountpointBytes: a longer one is sent as its last bytes
  Build build;
  int64_t last_seen_unix = 0;  // filled in by the coordinator: when it last heard from the mount
  MSGPACK_DEFINE_MAP(node, mountpoint, build, last_seen_unix);
};
inline constexpr size_t kMaxMountpointBytes = 1024;  // keeps a Ping under kSmallHeaderBytes

// The weight a node of `capacity_bytes` registers with: its capacity in MiB
// (at least 1), so a node with twice the disk owns twice the chunks.
inline double CapacityWeight(uint64_t capacity_bytes) {
  const uint64_t mib = capacity_bytes >> 20;
  return mib == 0 ? 1.0 : static_cast<double>(mib);
}

// A member's weight in the placement every party (coordinator, nodes, mounts)
// computes from the map: 0 when out (down past --out-after) or draining, so
// their chunks have new owners (until the node is back or taken back), else
// its weight. A node down but held keeps its weight: it still owns its
// chunks, and whoever reads them skips it (it is not `up`) for the next
// owner or the origin until it is back or out.
inline double PlacementWeight(const NodeInfo& n) { return (n.up || n.held) && !n.draining ? n.weight : 0; }

// What `hoard status` and the metrics call a member: "up" (heard from within
// the down timeout), "down" (silent, but keeping its placement for
// --out-after) or "out" (down past --out-after: its chunks have new owners).
inline const char* MemberState(const NodeInfo& n) { return n.up ? "up" : n.held ? "down" : "out"; }

// Dataset priorities (DatasetMeta::priority): eviction takes lower ones first.
inline constexpr uint8_t kPriorityLow = 0;
inline constexpr uint8_t kPriorityNormal = 1;
inline constexpr uint8_t kPriorityHigh = 2;
// "low", "normal", "high" (the CLI's words and --json's values).
inline const char* PriorityName(uint8_t p) {
  return p == kPriorityLow ? "low" : p == kPriorityHigh ? "high" : "normal";
}
// The priority named `name`; false for anything but the three words.
inline bool ParsePriority(const std::string& name, uint8_t* p) {
  for (uint8_t v : {kPriorityLow, kPriorityNormal, kPriorityHigh}) {
    if (name == PriorityName(v)) {
      *p = v;
      return true;
    }
  }
  return false;
}

struct DatasetMeta {
  std::string name;
  uint64_t uid = 0;          // unique per `dataset add`; seeds file keys
  uint32_t version = 0;      // manifest version, from 1
  std::string source;        // nfs://... or a local directory
  uint64_t chunk_size = 0;
  uint32_t replicas = 1;     // owners per chunk
  bool warm = false;         // every owner should hold all its chunks
  uint64_t manifest_bytes = 0;
  uint64_t manifest_checksum = 0;
  uint64_t file_count = 0;
  uint64_t total_bytes = 0;
  uint64_t total_chunks = 0;
  int64_t created_unix = 0;
  // Eviction (coordinator/eviction.h). When the cache needs room, whole
  // datasets are evicted: lowest priority first, then least recently read;
  // never a pinned one, one a job leases, or one of higher priority than the
  // dataset being admitted.
  uint8_t priority = kPriorityNormal;  // kPriorityLow/Normal/High
  bool pinned = false;
  int64_t ttl_s = 0;  // evicted when not read for this long; 0: never
  std::string tenant = "default";  // whose quota it counts against (QuotaSet)
  // False once evicted: nodes drop its chunks and do not warm it; the name,
  // manifest and settings stay, reads are served from the origin (not
  // stored), and `hoard warm` makes it resident again (with admission).
  bool resident = true;
  // When a mount last reported a read of it (Ping::read_datasets), coarse:
  // kept in memory and saved with the next change of the state (0: never).
  int64_t last_read_unix = 0;
  uint64_t evictions = 0;  // times evicted
  MSGPACK_DEFINE_MAP(name, uid, version, source, chunk_size, replicas, warm, manifest_bytes,
                     manifest_checksum, file_count, total_bytes, total_chunks, created_unix, priority, pinned, ttl_s,
                     tenant, resident, last_read_unix, evictions);
};

struct FileFailure {
  std::string path;
  std::string error;
  MSGPACK_DEFINE_MAP(path, error);
};

// What one node holds of one dataset, as of its last placement.
struct DatasetReport {
  uint64_t uid = 0;
  uint32_t version = 0;
  uint64_t placement_epoch = 0;  // the placement the owned set was computed at
  uint64_t owned_chunks = 0;
  uint64_t owned_bytes = 0;
  uint64_t cached_chunks = 0;  // of the owned ones
  uint64_t cached_bytes = 0;
  // The ordinals of the owned chunks that are cached (cached_chunks of them),
  // encoded by proto/ordinals.h. Lets the coordinator count copies per chunk
  // and whole files without computing anyone's placement.
  std::vector<char> cached_ordinals;
  std::vector<FileFailure> failures;  // most recent, at most 100
  MSGPACK_DEFINE_MAP(uid, version, placement_epoch, owned_chunks, owned_bytes, cached_chunks, cached_bytes,
                     cached_ordinals, failures);
};

// ---- requests and replies --------------------------------------------------

struct Pong {
  uint32_t protocol = kProtocolVersion;
  std::string role;  // "coordinator" or "node"
  std::string name;
  uint64_t epoch = 0;
  MSGPACK_DEFINE_MAP(protocol, role, name, epoch);
};
struct Ping {
  static constexpr MsgType kType = MsgType::kPing;
  using Reply = Pong;
  // A mount's periodic polls (cluster/cluster_view.h) name it, so the
  // coordinator can list the live mounts and their builds; empty otherwise
  // (and from a mount before this field), and ignored by node agents.
  MountInfo mount;
  // The uids of the datasets this mount served reads (or opens) of since
  // its last poll, at most kMaxReadDatasets: the coordinator's last-read
  // times (DatasetMeta::last_read_unix), which eviction goes by.
  std::vector<uint64_t> read_datasets;
  MSGPACK_DEFINE_MAP(mount, read_datasets);
};
inline constexpr size_t kMaxReadDatasets = 64;  // keeps a Ping under kSmallHeaderBytes

// The key of a data channel (proto/data_channel.h): asked over the CURVE
// connection, whose encryption is what keeps `key` secret. A server without a
// data channel answers InvalidArgument ("not served"): the client then stays
// on CURVE.
struct DataChannel {
  uint64_t session = 0;
  std::string key;    // 32 raw bytes, AES-256-GCM
  uint32_t port = 0;  // the data socket's TCP port, on the host the client dialed
  // What the client presents at the data socket's handshake (ZMTP PLAIN:
  // user = the session id in decimal, password = this): the server admits
  // no connection without a live session's token, so a stranger cannot make
  // it hold a single message. Not the key: it crosses the wire in clear.
  std::string token;
  MSGPACK_DEFINE_MAP(session, key, port, token);
};
struct OpenDataChannel {
  static constexpr MsgType kType = MsgType::kOpenDataChannel;
  using Reply = DataChannel;
  HOARD_EMPTY_BODY
};

struct RegisterNodeReply {
  uint64_t epoch = 0;
  MSGPACK_DEFINE_MAP(epoch);
};
struct RegisterNode {
  static constexpr MsgType kType = MsgType::kRegisterNode;
  using Reply = RegisterNodeReply;
  std::string name;
  std::string endpoint;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // every kind on the node's disk (NodeInfo)
  Build build;  // the node agent's (OwnBuild)
  uint64_t used_dataset_bytes = 0;  // used_bytes by kind, as NodeInfo
  uint64_t used_read_tier_bytes = 0;
  uint64_t used_checkpoint_bytes = 0;
  MSGPACK_DEFINE_MAP(name, endpoint, capacity_bytes, used_bytes, build, used_dataset_bytes, used_read_tier_bytes,
                     used_checkpoint_bytes);
};

// A dataset version every chunk of which is on all its owners at a
// placement: nodes may then drop the copies they hold but no longer own.
struct SettledDataset {
  uint64_t uid = 0;
  uint32_t version = 0;
  uint64_t placement_epoch = 0;
  MSGPACK_DEFINE_MAP(uid, version, placement_epoch);
};

struct HeartbeatReply {
  uint64_t epoch = 0;      // fetch the cluster map when this is newer
  bool registered = true;  // false: the coordinator forgot us; register again
  // The coordinator has no reports from this node (it restarted): send them.
  bool need_reports = false;
  std::vector<SettledDataset> settled;
  MSGPACK_DEFINE_MAP(epoch, registered, need_reports, settled);
};
struct Heartbeat {
  static constexpr MsgType kType = MsgType::kHeartbeat;
  using Reply = HeartbeatReply;
  std::string name;
  uint64_t epoch = 0;  // the map epoch the node acts on
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // every kind on the node's disk (NodeInfo)
  uint64_t chunks = 0;
  // Sent when changed since the last acknowledged heartbeat; empty otherwise.
  std::vector<DatasetReport> datasets;
  bool datasets_included = false;
  std::map<std::string, uint64_t> counters;  // node metrics
  int64_t scrub_last_pass_unix = 0;  // as NodeInfo
  uint64_t scrub_corrupt = 0;
  Build build;  // the node agent's (OwnBuild)
  uint64_t used_dataset_bytes = 0;  // used_bytes by kind, as NodeInfo
  uint64_t used_read_tier_bytes = 0;
  uint64_t used_checkpoint_bytes = 0;
  MSGPACK_DEFINE_MAP(name, epoch, capacity_bytes, used_bytes, chunks, datasets, datasets_included,
                     counters, scrub_last_pass_unix, scrub_corrupt, build, used_dataset_bytes, used_read_tier_bytes,
                     used_checkpoint_bytes);
};

// Cluster-wide limits on what the nodes together ask of the central storage,
// set on the coordinator (--origin-max-connections, --origin-max-rate). Each
// node takes a share in proportion to its placement weight (at least one
// connection), and gives reads a reader waits for priority over warm-up
// within it (origin/origin_gate.h). 0 = unlimited.
struct OriginLimits {
  uint32_t max_connections = 0;  // origin reads in flight, all nodes together
  uint64_t max_bytes_per_s = 0;  // all nodes together
  MSGPACK_DEFINE_MAP(max_connections, max_bytes_per_s);
};

struct ClusterMap {
  uint64_t epoch = 0;            // bumps on any change below
  uint64_t placement_epoch = 0;  // bumps when the members or their weights change
  // Every member, up or down, sorted by name. Chunks are placed over all of
  // them (striping/placement.h); readers skip owners that are down.
  std::vector<NodeInfo> nodes;
  std::vector<DatasetMeta> datasets;  // sorted by name
  OriginLimits origin_limits;  // from the coordinator's flags; not part of the epoch
  // Checkpoints (issue 6), from the coordinator's flags: how many nodes a
  // committed chunk must be on counting the writer (K), and the chunk size
  // mounts split checkpoint files into.
  uint32_t ckpt_replicas = 2;
  uint64_t ckpt_chunk_size = 4u << 20;
  MSGPACK_DEFINE_MAP(epoch, placement_epoch, nodes, datasets, origin_limits, ckpt_replicas, ckpt_chunk_size);
};
struct GetClusterMap {
  static constexpr MsgType kType = MsgType::kGetClusterMap;
  using Reply = ClusterMap;
  HOARD_EMPTY_BODY
};

// Reply payload: manifest bytes [offset, offset + length).
struct ManifestPart {
  uint64_t total_bytes = 0;
  uint64_t offset = 0;
  MSGPACK_DEFINE_MAP(total_bytes, offset);
};
struct GetManifest {
  static constexpr MsgType kType = MsgType::kGetManifest;
  using Reply = ManifestPart;
  static constexpr uint64_t kMaxPart = 8u << 20;
  std::string name;
  uint32_t version = 0;
  uint64_t offset = 0;
  uint64_t length = kMaxPart;  // clamped to kMaxPart
  MSGPACK_DEFINE_MAP(name, version, offset, length);
};

// One node's part of a dataset: the stripe assignment, and what it reports.
struct NodeShare {
  std::string node;
  // As last reported on the current placement; all 0 and reported = false
  // until the node reports (a member that owns nothing reports zeros).
  uint64_t owned_chunks = 0;
  uint64_t owned_bytes = 0;
  uint64_t cached_bytes = 0;
  bool reported = false;
  MSGPACK_DEFINE_MAP(node, owned_chunks, owned_bytes, cached_bytes, reported);
};

struct DatasetStatus {
  DatasetMeta meta;
  uint64_t cached_bytes = 0;   // summed over owners (counts each replica)
  uint64_t cached_chunks = 0;
  uint64_t files_cached = 0;   // files with every chunk on all its owners
  uint64_t expected_bytes = 0;  // total_bytes * replicas (what 100% means)
  bool complete = false;       // every node reported on the current epoch, all cached
  uint64_t nodes_reporting = 0;
  std::vector<FileFailure> failures;
  std::vector<NodeShare> shares;  // per member, in member order
  // Bytes landing in caches per second over the last 10 s (coordinator/fill_rate.h),
  // and the seconds left at that rate (-1: unknown, nothing is moving).
  double fill_rate = 0;
  int64_t eta_seconds = -1;
  MSGPACK_DEFINE_MAP(meta, cached_bytes, cached_chunks, files_cached, expected_bytes, complete,
                     nodes_reporting, failures, shares, fill_rate, eta_seconds);
};
// Coordinators in high availability (coordinator/ha_coordinator.h), as the
// leader sees them: itself, its term, and each etcd member's health.
struct EtcdMemberInfo {
  std::string name;
  std::string endpoint;  // the client URL the coordinator uses
  bool healthy = false;
  bool leader = false;  // etcd's own (raft) leader
  int64_t db_size_bytes = 0;
  std::string error;  // why not healthy
  MSGPACK_DEFINE_MAP(name, endpoint, healthy, leader, db_size_bytes, error);
};
struct HaStatus {
  std::string leader;  // the leading coordinator's advertised endpoint; "" without HA
  int64_t term = 0;    // the etcd revision its term began at
  std::vector<EtcdMemberInfo> etcd;
  std::string etcd_error;  // the member list could not be read
  MSGPACK_DEFINE_MAP(leader, term, etcd, etcd_error);
};

// A tenant's cache quota (QuotaSet) and what its resident datasets hold of
// it: their total_bytes * replicas, summed (what they hold once warm).
struct TenantQuota {
  std::string tenant;
  uint64_t quota_bytes = 0;  // 0: no quota
  uint64_t used_bytes = 0;
  uint64_t datasets = 0;  // resident ones
  MSGPACK_DEFINE_MAP(tenant, quota_bytes, used_bytes, datasets);
};

// Who a CLI or hook says it is: claims, not proofs (only the key class is
// proven, by the connection's key: proto/access.h). The coordinator's audit
// log records them as such. uid -1: not said.
struct Caller {
  int64_t uid = -1;
  std::string job;   // the scheduler's job id, when a hook runs for a job
  std::string host;  // the caller's hostname
  MSGPACK_DEFINE_MAP(uid, job, host);
};

// A job's lease on a dataset (coordinator/leases.h): while it holds, the
// dataset is never evicted. `holder` is the key class that took it and what
// the caller claimed.
struct Lease {
  std::string dataset;
  std::string job;
  std::string key_class;  // "client", "member", "admin", "insecure"
  Caller holder;
  int64_t taken_unix = 0;    // first taken (a renewal keeps it)
  int64_t renewed_unix = 0;  // last taken or renewed
  int64_t expires_unix = 0;
  MSGPACK_DEFINE_MAP(dataset, job, key_class, holder, taken_unix, renewed_unix, expires_unix);
};
struct ClusterStatusReply {
  uint64_t epoch = 0;
  std::vector<NodeInfo> nodes;
  std::vector<DatasetStatus> datasets;
  OriginLimits origin_limits;
  std::vector<CkptJobStatus> ckpt_jobs;  // every checkpoint job, by name
  CkptOriginHealth ckpt_origin;          // whether the checkpoint origin takes the drain
  // The mounts heard from within the last minute (their polls: Ping::mount),
  // by node and mountpoint, and the coordinator's own build.
  std::vector<MountInfo> mounts;
  Build build;
  HaStatus ha;
  std::vector<TenantQuota> quotas;  // every tenant with a quota or a dataset, by name
  std::string quota_policy;         // "evict" or "reject" (--quota-policy)
  std::vector<Lease> leases;  // unexpired job leases (coordinator/leases.h)
  MSGPACK_DEFINE_MAP(epoch, nodes, datasets, origin_limits, ckpt_jobs, ckpt_origin, mounts, build, ha, quotas,
                     quota_policy, leases);
};
struct ClusterStatus {
  static constexpr MsgType kType = MsgType::kClusterStatus;
  using Reply = ClusterStatusReply;
  std::string dataset;  // only this one; empty = all
  MSGPACK_DEFINE_MAP(dataset);
};

struct DatasetAddReply {
  DatasetMeta meta;
  uint64_t walk_ms = 0;
  MSGPACK_DEFINE_MAP(meta, walk_ms);
};
struct DatasetAdd {
  static constexpr MsgType kType = MsgType::kDatasetAdd;
  using Reply = DatasetAddReply;
  std::string name;
  std::string source;
  uint64_t chunk_size = 0;  // 0 = default (4 MiB)
  uint32_t replicas = 1;
  bool retry = false;  // a resend: the dataset there with this source and layout is ours
  // Eviction settings, as DatasetMeta's (DatasetSet changes them later).
  uint8_t priority = kPriorityNormal;
  bool pinned = false;
  int64_t ttl_s = 0;
  std::string tenant = "default";
  MSGPACK_DEFINE_MAP(name, source, chunk_size, replicas, retry, priority, pinned, ttl_s, tenant);
};

// One file a refresh found added, changed (a new size or mtime) or removed.
struct FileChange {
  std::string path;
  std::string change;  // "added", "changed" or "removed"
  uint64_t size = 0;   // in the new version; the old size for "removed"
  MSGPACK_DEFINE_MAP(path, change, size);
};

struct DatasetRefreshReply {
  // The dataset as now recorded: the new version, or the current one when
  // nothing changed (then no version was made).
  DatasetMeta meta;
  bool changed = false;
  uint32_t previous_version = 0;
  uint64_t files_added = 0;
  uint64_t files_changed = 0;
  uint64_t files_removed = 0;
  uint64_t other_changes = 0;  // directories, symlinks, modes, owners: nothing to fetch
  // The added and changed files: what owners fetch again (once per replica).
  // Unchanged files keep their chunks, and their owners.
  uint64_t fetch_bytes = 0;
  uint64_t fetch_chunks = 0;
  // Of fetch_bytes, the changed files': each is fetched again whole, since
  // a new size or mtime says nothing of which bytes changed.
  uint64_t changed_bytes = 0;
  std::vector<FileChange> files;  // the first 100 file changes
  uint64_t walk_ms = 0;
  // The first 1,000 of the other_changes: `change` says what ("directory
  // added", "mode, owner or mtime changed"...), `size` is 0.
  std::vector<FileChange> others;
  MSGPACK_DEFINE_MAP(meta, changed, previous_version, files_added, files_changed, files_removed, other_changes,
                     fetch_bytes, fetch_chunks, files, walk_ms, others, changed_bytes);
};
// Walks the dataset's source again and, if anything changed, records it as
// the next version (same uid, replicas, chunk size and warm flag). Mounts
// switch to it, nodes fetch the new chunks and drop the ones it no longer has.
struct DatasetRefresh {
  static constexpr MsgType kType = MsgType::kDatasetRefresh;
  using Reply = DatasetRefreshReply;
  std::string name;
  MSGPACK_DEFINE_MAP(name);
};

struct DatasetListReply {
  std::vector<DatasetMeta> datasets;
  MSGPACK_DEFINE_MAP(datasets);
};
struct DatasetList {
  static constexpr MsgType kType = MsgType::kDatasetList;
  using Reply = DatasetListReply;
  HOARD_EMPTY_BODY
};

struct DatasetRemoveReply {
  HOARD_EMPTY_BODY
};
struct DatasetRemove {
  static constexpr MsgType kType = MsgType::kDatasetRemove;
  using Reply = DatasetRemoveReply;
  std::string name;
  bool retry = false;  // a resend: no such dataset is done
  MSGPACK_DEFINE_MAP(name, retry);
};

struct WarmReply {
  DatasetMeta meta;
  // The datasets evicted to make room for it (admission: coordinator/eviction.h).
  std::vector<std::string> evicted;
  MSGPACK_DEFINE_MAP(meta, evicted);
};
struct Warm {
  static constexpr MsgType kType = MsgType::kWarm;
  using Reply = WarmReply;
  std::string name;
  Caller caller;  // for the audit log
  MSGPACK_DEFINE_MAP(name, caller);
};

// Takes a lease of `job` on `dataset`, or renews it: expires = now + ttl_s.
// Idempotent (taking twice is renewing).
struct LeaseTakeReply {
  Lease lease;
  MSGPACK_DEFINE_MAP(lease);
};
struct LeaseTake {
  static constexpr MsgType kType = MsgType::kLeaseTake;
  using Reply = LeaseTakeReply;
  std::string dataset;
  std::string job;
  uint32_t ttl_s = 0;  // 0: the coordinator's default
  Caller caller;
  MSGPACK_DEFINE_MAP(dataset, job, ttl_s, caller);
};
// Releases the job's lease on `dataset`, or every lease of the job when
// `dataset` is empty. Releasing what is not held is done (released 0).
struct LeaseReleaseReply {
  uint32_t released = 0;
  MSGPACK_DEFINE_MAP(released);
};
struct LeaseRelease {
  static constexpr MsgType kType = MsgType::kLeaseRelease;
  using Reply = LeaseReleaseReply;
  std::string dataset;  // empty: all of the job's
  std::string job;
  Caller caller;
  MSGPACK_DEFINE_MAP(dataset, job, caller);
};
struct LeaseListReply {
  std::vector<Lease> leases;  // unexpired, by dataset then job
  int64_t now_unix = 0;       // the coordinator's clock
  MSGPACK_DEFINE_MAP(leases, now_unix);
};
struct LeaseList {
  static constexpr MsgType kType = MsgType::kLeaseList;
  using Reply = LeaseListReply;
  HOARD_EMPTY_BODY
};

// Changes a dataset's eviction settings: only the fields whose has_* is
// set. Setting a value twice is setting it once (idempotent).
struct DatasetSetReply {
  DatasetMeta meta;
  MSGPACK_DEFINE_MAP(meta);
};
struct DatasetSet {
  static constexpr MsgType kType = MsgType::kDatasetSet;
  using Reply = DatasetSetReply;
  std::string name;
  bool has_priority = false;
  uint8_t priority = kPriorityNormal;
  bool has_pinned = false;
  bool pinned = false;
  bool has_ttl = false;
  int64_t ttl_s = 0;
  bool has_tenant = false;
  std::string tenant;
  MSGPACK_DEFINE_MAP(name, has_priority, priority, has_pinned, pinned, has_ttl, ttl_s, has_tenant, tenant);
};

// Sets a tenant's cache quota to `bytes` (0: removes it). Idempotent.
struct QuotaSetReply {
  TenantQuota quota;
  MSGPACK_DEFINE_MAP(quota);
};
struct QuotaSet {
  static constexpr MsgType kType = MsgType::kQuotaSet;
  using Reply = QuotaSetReply;
  std::string tenant;
  uint64_t bytes = 0;
  MSGPACK_DEFINE_MAP(tenant, bytes);
};
struct QuotaListReply {
  std::vector<TenantQuota> quotas;  // as ClusterStatusReply's
  std::string policy;               // "evict" or "reject"
  MSGPACK_DEFINE_MAP(quotas, policy);
};
struct QuotaList {
  static constexpr MsgType kType = MsgType::kQuotaList;
  using Reply = QuotaListReply;
  HOARD_EMPTY_BODY
};

struct NodeDrainReply {
  NodeInfo node;
  uint64_t epoch = 0;  // the map epoch that carries the change
  MSGPACK_DEFINE_MAP(node, epoch);
};
// Drain (drain = true) or take back (false) a node. Draining makes its
// placement weight 0: its chunks get new owners, which copy them from it.
struct NodeDrain {
  static constexpr MsgType kType = MsgType::kNodeDrain;
  using Reply = NodeDrainReply;
  std::string name;
  bool drain = true;
  MSGPACK_DEFINE_MAP(name, drain);
};

// Drops a node from the membership. Only a node that owns nothing (down, or
// drained) unless `force`; a node agent still running joins again at its
// next heartbeat.
struct NodeRemoveReply {
  uint64_t epoch = 0;
  MSGPACK_DEFINE_MAP(epoch);
};
struct NodeRemove {
  static constexpr MsgType kType = MsgType::kNodeRemove;
  using Reply = NodeRemoveReply;
  std::string name;
  bool force = false;
  bool retry = false;  // a resend: no such node is done (epoch 0)
  MSGPACK_DEFINE_MAP(name, force, retry);
};

// Reply payload: chunk bytes [offset, offset + returned length).
struct ChunkData {
  uint64_t chunk_length = 0;
  uint64_t offset = 0;
  std::string source;  // "cache" or "origin": where the node got the bytes
  // The placement epoch of the node's map: a requester that is behind learns
  // it should refresh its own.
  uint64_t placement_epoch = 0;
  MSGPACK_DEFINE_MAP(chunk_length, offset, source, placement_epoch);
};
struct GetChunk {
  static constexpr MsgType kType = MsgType::kGetChunk;
  using Reply = ChunkData;
  std::string dataset;
  uint64_t uid = 0;
  uint32_t version = 0;
  uint32_t entry = 0;       // file's entry index in that manifest version
  uint32_t index = 0;       // chunk index within the file
  uint64_t key_lo = 0;      // the chunk's FileKey, checked against the manifest
  uint64_t key_hi = 0;
  uint64_t offset = 0;      // within the chunk
  uint64_t length = 0;      // 0 = to the end of the chunk
  bool fill = true;         // on a miss, fetch from the origin, cache and serve
  // The placement epoch of the requester's map (0: unknown). A node whose own
  // map is older refreshes it before deciding whether it owns the chunk.
  uint64_t placement_epoch = 0;
  // With fill: on a miss, read only [offset, offset + length) from the
  // origin and answer with it, storing nothing (a random reader's range: a
  // whole chunk would cost it the transfer of 4 MiB for 16 KiB). A node that
  // does not know the field fills the whole chunk and answers the range.
  bool range_only = false;
  MSGPACK_DEFINE_MAP(dataset, uid, version, entry, index, key_lo, key_hi, offset, length, fill, placement_epoch,
                     range_only);
};

// A node's scrubber (node/scrubber.h): the pass running or the last one.
struct ScrubStatus {
  uint64_t pass = 0;
  bool running = false;
  uint64_t files = 0;  // in the pass
  uint64_t files_done = 0;
  uint64_t bytes = 0;
  uint64_t bytes_done = 0;
  int64_t started_unix = 0;
  int64_t last_pass_unix = 0;  // when the last full pass ended; 0 = never
  uint64_t corrupt = 0;        // corrupt files found since the node was set up
  MSGPACK_DEFINE_MAP(pass, running, files, files_done, bytes, bytes_done, started_unix, last_pass_unix, corrupt);
};

struct NodeStatusReply {
  NodeInfo node;
  std::map<std::string, uint64_t> counters;
  ScrubStatus scrub;
  MSGPACK_DEFINE_MAP(node, counters, scrub);
};
struct NodeStatus {
  static constexpr MsgType kType = MsgType::kNodeStatus;
  using Reply = NodeStatusReply;
  HOARD_EMPTY_BODY
};

// Starts a scrub pass now, unless one is running. The reply names the pass
// that covers the request; NodeStatus shows its progress.
struct ScrubReply {
  uint64_t pass = 0;
  MSGPACK_DEFINE_MAP(pass);
};
struct Scrub {
  static constexpr MsgType kType = MsgType::kScrub;
  using Reply = ScrubReply;
  HOARD_EMPTY_BODY
};

// The type a body struct travels as, and whether it is a request or a reply:
// one struct per row of HOARD_MESSAGE_TYPES (a second row naming the same
// struct does not compile).
template <typename Body> struct TypeOfBody;
#define HOARD_TYPE_OF_BODY(name, number, body, kind, ...)      \
  template <> struct TypeOfBody<body> {                        \
    static constexpr MsgType kType = MsgType::k##name;         \
    static constexpr MsgKind kKind = MsgKind::kind;            \
  };
HOARD_MESSAGE_TYPES(HOARD_TYPE_OF_BODY)
#undef HOARD_TYPE_OF_BODY

// Reply types, for the envelope encoder.
template <typename Body> struct ReplyType {
  static_assert(TypeOfBody<Body>::kKind == MsgKind::kReply, "a Reply must be a reply row's struct");
  static constexpr MsgType kType = TypeOfBody<Body>::kType;
};

}  // namespace hoard::proto
