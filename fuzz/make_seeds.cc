// Writes the seed corpus of every fuzz target (fuzz/README.md) from real
// encoders: each message type as the envelope encoder packs it, manifests
// from ManifestBuilder, state and journal files as StateStore and CkptTable
// write them. Deterministic, so running it again rewrites the same files.
//
//   build/bin/make_fuzz_seeds fuzz/corpus
//
// Seeds are named seed-*; inputs the fuzzers found are kept beside them
// under other names (regressions), and this program leaves those alone.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "checkpoint/ckpt_table.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/testing.h"
#include "common/msgpack_codec.h"
#include "coordinator/state_store.h"
#include "fuzz/fuzz_util.h"
#include "store/chunk_file.h"
#include "proto/data_channel.h"
#include "proto/wire_frames.h"
#include "proto/envelope.h"
#include "proto/ordinals.h"
#include "striping/manifest.h"

namespace hoard {
namespace {

using namespace proto;

std::string g_out;
int g_files = 0;

void Seed(const std::string& target, const std::string& name, std::string_view bytes) {
  const std::string dir = JoinPath(g_out, target);
  if (!MakeDirs(dir).ok()) std::abort();
  fuzz::WriteOrDie(JoinPath(dir, "seed-" + name), bytes);
  ++g_files;
}

std::string ReadOrDie(const std::string& path) {
  Result<std::string> r = ReadFile(path);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    std::abort();
  }
  return *r;
}

template <typename T>
T OrDie(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    std::abort();
  }
  return std::move(*r);
}
void OrDie(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::abort();
  }
}

// ---- messages --------------------------------------------------------------

NodeInfo Node(const std::string& name) {
  return {.name = name, .endpoint = "tcp://10.0.0.1:7001", .capacity_bytes = 1ull << 40, .used_bytes = 1 << 30,
          .chunks = 256, .weight = 1048576, .last_seen_unix = 1800000000};
}
DatasetMeta Dataset() {
  return {.name = "imagenet", .uid = 0x1234abcd, .version = 2, .source = "nfs://nas/imagenet",
          .chunk_size = 4u << 20, .replicas = 2, .warm = true, .manifest_bytes = 4096, .manifest_checksum = 99,
          .file_count = 3, .total_bytes = 10u << 20, .total_chunks = 4, .created_unix = 1800000000};
}
CkptEntry Entry() {
  return {.path = "job/step1/model.pt", .id = 7, .mode = 0644, .mtime_ns = 5, .gen = 2, .size = 5000,
          .level = 2, .chunk_size = 4096, .checksums = {1, 2}, .writer = "n1", .replicas = {{"n2"}, {"n3"}},
          .replicas_wanted = 2, .committed_unix_ms = 1800000000000};
}
DatasetReport Report() {
  OrdinalEncoder enc;
  for (uint64_t o : {0, 1, 3}) enc.Add(o);
  return {.uid = 0x1234abcd, .version = 2, .placement_epoch = 3, .owned_chunks = 4, .owned_bytes = 1 << 20,
          .cached_chunks = 3, .cached_bytes = 3 << 18, .cached_ordinals = enc.Finish(),
          .failures = {{.path = "a/b", .error = "EIO"}}};
}

// Each message type's seed is its struct's defaults unless a sample below
// fills it in: a body with values reaches more of its decoder.
template <typename Body>
struct Tag {};
template <typename Body>
Body Sample(Tag<Body>) {
  return Body{};
}
Pong Sample(Tag<Pong>) { return {.role = "node", .name = "n1", .epoch = 5}; }
DataChannel Sample(Tag<DataChannel>) { return {.session = 7, .key = std::string(32, '\x5a'), .port = 7102}; }
RegisterNode Sample(Tag<RegisterNode>) { return {.name = "n1", .endpoint = "tcp://h:1", .capacity_bytes = 1 << 30}; }
RegisterNodeReply Sample(Tag<RegisterNodeReply>) { return {.epoch = 3}; }
Heartbeat Sample(Tag<Heartbeat>) {
  return {.name = "n1",
          .epoch = 3,
          .chunks = 9,
          .datasets = {Report()},
          .datasets_included = true,
          .counters = {{"reads", 5}}};
}
HeartbeatReply Sample(Tag<HeartbeatReply>) { return {.epoch = 4, .need_reports = true, .settled = {{1, 2, 3}}}; }
ClusterMap Sample(Tag<ClusterMap>) {
  return {.epoch = 9,
          .placement_epoch = 4,
          .nodes = {Node("n1"), Node("n2")},
          .datasets = {Dataset()},
          .origin_limits = {.max_connections = 8, .max_bytes_per_s = 1 << 30}};
}
GetManifest Sample(Tag<GetManifest>) { return {.name = "imagenet", .version = 2, .offset = 8}; }
ManifestPart Sample(Tag<ManifestPart>) { return {.total_bytes = 100, .offset = 8}; }
ClusterStatus Sample(Tag<ClusterStatus>) { return {.dataset = "imagenet"}; }
ClusterStatusReply Sample(Tag<ClusterStatusReply>) {
  const DatasetStatus ds{.meta = Dataset(),
                         .cached_bytes = 5,
                         .failures = {{"x", "y"}},
                         .shares = {{.node = "n1", .owned_chunks = 2, .reported = true}},
                         .fill_rate = 1.5,
                         .eta_seconds = 10};
  return {.epoch = 9,
          .nodes = {Node("n1")},
          .datasets = {ds},
          .ckpt_jobs = {{.job = "job", .files = 2, .files_by_level = {0, 1, 1, 0}}}};
}
DatasetAdd Sample(Tag<DatasetAdd>) {
  return {.name = "imagenet", .source = "/data", .chunk_size = 1 << 20, .replicas = 2};
}
DatasetAddReply Sample(Tag<DatasetAddReply>) { return {.meta = Dataset(), .walk_ms = 12}; }
DatasetListReply Sample(Tag<DatasetListReply>) { return {.datasets = {Dataset(), Dataset()}}; }
DatasetRemove Sample(Tag<DatasetRemove>) { return {.name = "imagenet"}; }
Warm Sample(Tag<Warm>) { return {.name = "imagenet"}; }
DatasetSet Sample(Tag<DatasetSet>) {
  return {.name = "imagenet", .has_priority = true, .priority = kPriorityHigh, .has_tenant = true, .tenant = "vision"};
}
QuotaSet Sample(Tag<QuotaSet>) { return {.tenant = "vision", .bytes = 1ull << 40}; }
QuotaListReply Sample(Tag<QuotaListReply>) {
  return {.quotas = {{.tenant = "vision", .quota_bytes = 1ull << 40, .used_bytes = 5, .datasets = 1}}, .policy = "evict"};
}
WarmReply Sample(Tag<WarmReply>) { return {.meta = Dataset()}; }
NodeDrain Sample(Tag<NodeDrain>) { return {.name = "n1"}; }
NodeDrainReply Sample(Tag<NodeDrainReply>) { return {.node = Node("n1"), .epoch = 3}; }
NodeRemove Sample(Tag<NodeRemove>) { return {.name = "n1", .force = true}; }
NodeRemoveReply Sample(Tag<NodeRemoveReply>) { return {.epoch = 3}; }
DatasetRefresh Sample(Tag<DatasetRefresh>) { return {.name = "imagenet"}; }
DatasetRefreshReply Sample(Tag<DatasetRefreshReply>) {
  return {.meta = Dataset(),
          .changed = true,
          .previous_version = 1,
          .files_added = 1,
          .files = {{.path = "a", .change = "added", .size = 5}}};
}
GetChunk Sample(Tag<GetChunk>) {
  return {.dataset = "imagenet",
          .uid = 1,
          .version = 2,
          .entry = 3,
          .index = 1,
          .key_lo = 5,
          .key_hi = 6,
          .offset = 0,
          .length = 4096,
          .placement_epoch = 4};
}
ChunkData Sample(Tag<ChunkData>) { return {.chunk_length = 4096, .source = "cache", .placement_epoch = 4}; }
NodeStatusReply Sample(Tag<NodeStatusReply>) {
  return {.node = Node("n1"), .counters = {{"hits", 3}}, .scrub = {.pass = 2, .running = true, .files = 9}};
}
ScrubReply Sample(Tag<ScrubReply>) { return {.pass = 3}; }
CkptLookup Sample(Tag<CkptLookup>) { return {.path = "job/step1"}; }
CkptEntryReply Sample(Tag<CkptEntryReply>) { return {.entry = Entry()}; }
CkptList Sample(Tag<CkptList>) { return {.path = "job"}; }
CkptListReply Sample(Tag<CkptListReply>) { return {.dir = Entry(), .children = {Entry()}}; }
CkptCreate Sample(Tag<CkptCreate>) { return {.path = "job/step2", .is_dir = true, .mode = 0755}; }
CkptRename Sample(Tag<CkptRename>) { return {.from = "job/a", .to = "job/b", .noreplace = true}; }
CkptRenameReply Sample(Tag<CkptRenameReply>) { return {.entry = Entry()}; }
CkptRemove Sample(Tag<CkptRemove>) { return {.path = "job/a"}; }
CkptRemoveReply Sample(Tag<CkptRemoveReply>) { return {.id = 7}; }
CkptCommit Sample(Tag<CkptCommit>) {
  return {.id = 7,
          .gen = 3,
          .size = 5000,
          .chunk_size = 4096,
          .checksums = {1, 2},
          .writer = "n1",
          .replicas = {{"n2"}, {"n3"}},
          .replicas_wanted = 2,
          .level = 2};
}
CkptSetAttr Sample(Tag<CkptSetAttr>) { return {.path = "job/a", .set_mode = true, .mode = 0600}; }
CkptStatus Sample(Tag<CkptStatus>) { return {.job = "job", .files = true}; }
CkptStatusReply Sample(Tag<CkptStatusReply>) {
  return {.jobs = {{.job = "job", .files = 1}}, .files = {Entry()}, .now_unix_ms = 1800000000000};
}
CkptFlush Sample(Tag<CkptFlush>) { return {.job = "job"}; }
CkptFlushReply Sample(Tag<CkptFlushReply>) { return {.status = {.job = "job", .undrained_bytes = 5}}; }
CkptWork Sample(Tag<CkptWork>) { return {.node = "n1", .rebuild = true}; }
CkptWorkReply Sample(Tag<CkptWorkReply>) {
  return {.drain = {{.entry = Entry(), .tmp_path = ".hoard-staging/7-2-n1"}},
          .keep_files = {7, 8},
          .max_drain_bytes_per_s = 100,
          .rebuild = {
              {.id = 7, .gen = 2, .index = 0, .checksum = 1, .length = 4096, .chunk_size = 4096, .holders = {"n2"}}}};
}
CkptDrained Sample(Tag<CkptDrained>) { return {.node = "n1", .id = 7, .gen = 2, .ok = false, .error = "EIO"}; }
CkptDrainedReply Sample(Tag<CkptDrainedReply>) { return {.level = 3}; }
PutCkptChunk Sample(Tag<PutCkptChunk>) { return {.id = 7, .gen = 2, .index = 1, .checksum = 9}; }
CkptPutReply Sample(Tag<CkptPutReply>) { return {.stored_bytes = 4096}; }
GetCkptChunk Sample(Tag<GetCkptChunk>) {
  return {.id = 7, .gen = 2, .index = 1, .checksum = 9, .chunk_size = 4096, .chunk_length = 4096};
}
CkptChunkData Sample(Tag<CkptChunkData>) { return {.chunk_length = 4096}; }
CkptSession Sample(Tag<CkptSession>) {
  return {.mount = 42,
          .node = "n1",
          .holds = {{.id = 7, .gen = 2}},
          .writing = {8},
          .reclaim = true,
          .locks = {{.id = 7, .owner = 3, .type = 2}}};
}
CkptSessionReply Sample(Tag<CkptSessionReply>) { return {.incarnation = 5}; }
CkptLock Sample(Tag<CkptLock>) { return {.mount = 42, .lock = {.id = 7, .owner = 3, .flock = true, .type = 1}}; }
CkptLockReply Sample(Tag<CkptLockReply>) { return {.granted = false, .conflict = {.id = 7, .owner = 4, .type = 2}}; }

template <typename Body>
void Msg(MsgType type, const Body& body) {
  // An error reply carries its status in the header.
  const Status status = type == MsgType::kError ? Status::InvalidArgument("bad") : Status::Ok();
  Seed("message", std::to_string(static_cast<int>(type)) + "-" + TypeName(type), EncodeHeader(type, 42, status, body));
}

void MessageSeeds() {
#define HOARD_SEED_MSG(name, number, body, ...) Msg(MsgType::k##name, Sample(Tag<body>{}));
  HOARD_MESSAGE_TYPES(HOARD_SEED_MSG)
#undef HOARD_SEED_MSG
  // What DecodeMessage must refuse: another version, an unknown type, a
  // header that is not an array.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(6);
  pk.pack(kProtocolVersion + 1);
  pk.pack(2);
  pk.pack(1);
  pk.pack(0);
  pk.pack(std::string());
  pk.pack_map(0);
  Seed("message", "bad-version", std::string_view(buf.data(), buf.size()));
  Seed("message", "bad-type", EncodeHeader(static_cast<MsgType>(999), 1, Status::Ok(), ErrorBody{}));
  Seed("message", "bad-not-array", PackState(std::string("hello")));
}

// ---- ordinals --------------------------------------------------------------

void OrdinalSeeds() {
  const std::vector<std::vector<uint64_t>> lists = {{}, {0}, {0, 1, 2, 3}, {5, 200, 70000, 1ull << 31}};
  int i = 0;
  for (const auto& list : lists) {
    OrdinalEncoder enc;
    for (uint64_t o : list) enc.Add(o);
    const std::vector<char> bytes = enc.Finish();
    std::string in;
    for (uint32_t v : {uint32_t{0xFFFFFFFF}, static_cast<uint32_t>(list.size())}) {
      for (int b = 0; b < 4; ++b) in.push_back(static_cast<char>(v >> (8 * b)));
    }
    in.append(bytes.begin(), bytes.end());
    Seed("ordinals", std::to_string(i++), in);
  }
}

// ---- data channel ----------------------------------------------------------

// fuzz/data_channel_fuzz.cc's input: flags, direction, seq, the frames, then
// the offset and mask of the byte it alters (flag 2).
std::string SealedInput(uint8_t flags, uint8_t direction, uint32_t seq, const std::vector<std::string>& frames,
                        uint32_t offset = 0, uint8_t mask = 0) {
  std::string in{static_cast<char>(flags), static_cast<char>(direction)};
  auto u32 = [&](uint32_t v) {
    for (int b = 0; b < 4; ++b) in.push_back(static_cast<char>(v >> (8 * b)));
  };
  u32(seq);
  in.push_back(static_cast<char>(frames.size()));
  for (const std::string& f : frames) in += fuzz::EncodePart(f);
  u32(offset);
  in.push_back(static_cast<char>(mask));
  return in;
}

void DataChannelSeeds() {
  // A GetCkptChunk request and a reply with a payload, as they travel:
  // frame 0 is replaced by the seal (flag 1).
  const std::string request = EncodeHeader(MsgType::kGetCkptChunk, 7, Status::Ok(),
                                           GetCkptChunk{.id = 3, .gen = 1, .index = 0, .checksum = 42,
                                                        .chunk_size = 4096, .chunk_length = 100});
  const std::string reply = EncodeHeader(MsgType::kCkptChunkData, 7, Status::Ok(), CkptChunkData{.chunk_length = 100});
  Seed("data_channel", "request", SealedInput(1, 0, 7, {"", request}));
  Seed("data_channel", "reply", SealedInput(1, 1, 7, {"", reply, std::string(100, 'x')}));
  Seed("data_channel", "altered-tag", SealedInput(3, 1, 9, {"", reply, std::string(100, 'y')}, 30, 0x40));
  Seed("data_channel", "altered-payload", SealedInput(3, 0, 9, {"", request, "zz"}, 200, 0x01));
  Seed("data_channel", "no-frames", SealedInput(1, 0, 1, {""}));
  // As an attacker without the key sends it: a seal frame of its own.
  std::string forged(kSealPrefixBytes + kSealTagBytes, '\0');
  forged[0] = static_cast<char>(0xD5);
  forged[1] = 1;
  forged[18] = 1;
  Seed("data_channel", "forged", SealedInput(0, 0, 0, {forged, request}));
  Seed("data_channel", "plain", SealedInput(0, 0, 0, {request}));
}

// ---- wire frames -----------------------------------------------------------

// fuzz/wire_frames_fuzz.cc's input: flags, the frame count, the frames.
std::string WireInput(uint8_t flags, const std::vector<std::string>& frames) {
  std::string in{static_cast<char>(flags), static_cast<char>(frames.size())};
  for (const std::string& f : frames) in += fuzz::EncodePart(f);
  return in;
}

// A recipe part (flag 2): a frame of `size` bytes of `fill`.
std::string Recipe(uint32_t size, char fill) {
  std::string r;
  for (int b = 0; b < 4; ++b) r.push_back(static_cast<char>(size >> (8 * b)));
  r.push_back(fill);
  return r;
}

void WireFramesSeeds() {
  const std::string header = EncodeHeader(MsgType::kPutCkptChunk, 7, Status::Ok(), PutCkptChunk{.id = 3});
  // A chunk that goes in pieces, plain and after a seal.
  std::vector<zmq::message_t> msg;
  msg.emplace_back(header.data(), header.size());
  const std::string chunk(70u << 10, 'c');
  msg.emplace_back(chunk.data(), chunk.size());
  std::vector<std::string> wire;
  for (const zmq::message_t& f : ToWire(std::move(msg))) wire.emplace_back(f.to_string());
  Seed("wire_frames", "pieces", WireInput(0, wire));
  Seed("wire_frames", "whole", WireInput(0, {header}));
  Seed("wire_frames", "recipe", WireInput(2, {Recipe(40, 'h'), Recipe(150u << 10, 'p')}));
  Seed("wire_frames", "recipe-sealed", WireInput(3, {Recipe(35, 's'), Recipe(10, 'h'), Recipe(70u << 10, 'p')}));
}

// ---- manifests and chunk files ---------------------------------------------

std::string SmallManifest(uint64_t uid, uint32_t version) {
  ManifestBuilder b(uid, version, 64 << 10);
  b.SetRoot(S_IFDIR | 0755, 0, 0, 1);
  b.Add("train", S_IFDIR | 0750, 1000, 1000, 0, 2);
  b.Add("train/a.jpg", S_IFREG | 0644, 1000, 1000, 5, 3);
  b.Add("train/b.jpg", S_IFREG | 0644, 1000, 1000, 3 * (64 << 10) + 7, 4);
  b.Add("train/sub", S_IFDIR | 0755, 0, 0, 0, 5);
  b.Add("train/sub/empty", S_IFREG | 0600, 0, 0, 0, 6);
  b.Add("latest", S_IFLNK | 0777, 0, 0, 5, 7, "train");
  b.Add("val", S_IFDIR | 0755, 0, 0, 0, 8);
  return OrDie(b.Finish(1800000000));
}

void ManifestSeeds() {
  ManifestBuilder empty(1, 1, 4 << 20);
  Seed("manifest", "empty", OrDie(empty.Finish(1800000000)));
  Seed("manifest", "small", SmallManifest(2, 3));
  ManifestBuilder flat(3, 1, 1 << 20);
  for (int i = 0; i < 20; ++i) flat.Add("f" + std::to_string(100 + i), S_IFREG | 0644, 0, 0, i * 300000, i);
  Seed("manifest", "flat", OrDie(flat.Finish(1800000000)));
}

void ChunkFileSeeds() {
  for (const std::string& data : {std::string(), std::string("hello chunk"), std::string(300, 'x')}) {
    char trailer[kChunkMetaSize];
    EncodeChunkMeta({.length = data.size(), .checksum = Checksum64(data.data(), data.size()), .dataset_uid = 7},
                       trailer);
    std::string file = data + std::string(trailer, sizeof trailer);
    Seed("chunk_file", std::to_string(data.size()), file);
  }
}

// ---- durable state ---------------------------------------------------------

std::string StateInput(uint8_t flags, std::string_view snapshot, std::string_view log) {
  return std::string(1, static_cast<char>(flags)) + fuzz::EncodePart(snapshot) + std::string(log);
}

// The format-1 state.msgpack of older coordinators (state_store.h).
struct LegacyState {
  uint32_t format = 1;
  uint64_t epoch = 0;
  uint64_t placement_epoch = 0;
  std::vector<NodeInfo> nodes;
  std::vector<DatasetMeta> datasets;
  MSGPACK_DEFINE_MAP(format, epoch, placement_epoch, nodes, datasets);
};

void StateStoreSeeds() {
  testing::TempDir dir("hoard-seeds");
  const auto quiet = std::make_shared<spdlog::logger>("seeds");
  StateStore::Options options{.snapshot_every_records = 4, .logger = quiet};
  CoordinatorState state;
  {
    StateStore store(dir.path(), options);
    state = OrDie(store.Open());
    state.nodes = {Node("n1")};
    state.epoch = 1;
    OrDie(store.Save(state));
    state.nodes.push_back(Node("n2"));
    state.datasets = {Dataset()};
    state.epoch = 2;
    state.placement_epoch = 1;
    OrDie(store.Save(state));
  }
  const std::string log1 = ReadOrDie(dir.Sub("state.log"));
  const std::string snap1 = ReadOrDie(dir.Sub("state.msgpack"));
  Seed("state_store", "log-only", StateInput(2 | 4, "", log1));
  Seed("state_store", "snapshot-and-log", StateInput(1 | 2 | 4 | 8, snap1, log1));
  {
    StateStore store(dir.path(), options);
    state = OrDie(store.Open());
    for (int i = 0; i < 4; ++i) {  // past snapshot_every_records: a snapshot, then a new log
      state.nodes[0].draining = i % 2 == 0;
      state.epoch++;
      OrDie(store.Save(state));
    }
    state.datasets.clear();
    state.epoch++;
    OrDie(store.Save(state));
  }
  Seed("state_store", "after-snapshot",
       StateInput(1 | 2 | 4 | 8, ReadOrDie(dir.Sub("state.msgpack")), ReadOrDie(dir.Sub("state.log"))));
  Seed("state_store", "snapshot-only", StateInput(1 | 8, ReadOrDie(dir.Sub("state.msgpack")), ""));
  LegacyState legacy{.epoch = 5, .placement_epoch = 2, .nodes = {Node("n1")}, .datasets = {Dataset()}};
  Seed("state_store", "legacy-format-1", StateInput(1, PackState(legacy), ""));
  Seed("state_store", "torn-tail", StateInput(2 | 4, "", log1.substr(0, log1.size() - 3)));
}

void CkptStoreSeeds() {
  testing::TempDir dir("hoard-seeds");
  int64_t now = 1800000000000;
  auto open = [&] {
    CkptTable::Options o{.dir = dir.path(), .logger = std::make_shared<spdlog::logger>("seeds"),
                         .store = {.snapshot_every_records = 12}};
    o.now_unix_ms = [&now] { return now += 10; };
    return OrDie(CkptTable::Open(std::move(o)));
  };
  auto seed = [&](const std::string& name) {
    Result<std::string> snap = ReadFile(dir.Sub("snapshot.msgpack"));
    const std::string journal = ReadOrDie(dir.Sub("journal.log"));
    Seed("ckpt_store", name, StateInput((snap.ok() ? 1 : 0) | 2 | 4, snap.ok() ? *snap : "", journal));
  };
  {
    std::unique_ptr<CkptTable> t = open();
    OrDie(t->Create({.path = "job", .is_dir = true, .mode = 0755}));
    OrDie(t->Create({.path = "job/step1", .is_dir = true, .mode = 0755}));
    const CkptEntry f = OrDie(t->Create({.path = "job/step1/model.pt", .mode = 0644}));
    OrDie(t->Create({.path = "job/step1/.metadata", .mode = 0644}));
    OrDie(t->Commit({.id = f.id, .gen = 1, .size = 100, .mtime_ns = 5, .chunk_size = 4096, .checksums = {42},
                     .writer = "n1", .replicas = {{"n2"}}, .replicas_wanted = 2,
                     .level = uint8_t(CkptLevel::kR)}));
    seed("namespace");
    CkptWorkReply work = t->Work("n1", {"n1", "n2"});
    for (const CkptDrainTask& task : work.drain) {
      OrDie(t->Drained({.node = "n1", .id = task.entry.id, .gen = task.entry.gen, .ok = true}));
    }
    OrDie(t->Rename({.from = "job/step1", .to = "job/step2"}));
    OrDie(t->Create({.path = "job/tmp", .mode = 0644}));
    OrDie(t->Remove({.path = "job/tmp"}));
    seed("drained-renamed");
    // Old generations kept for readers, an orphan, copies to drop, a symlink.
    OrDie(t->Commit({.id = f.id, .gen = 2, .size = 100, .mtime_ns = 6, .chunk_size = 4096, .checksums = {43},
                     .writer = "n2", .replicas = {{"n3"}}, .replicas_wanted = 2, .level = uint8_t(CkptLevel::kR),
                     .discard = {{.node = "n1", .id = f.id, .gen = 2, .index = 0, .checksum = 7}}}));
    OrDie(t->Create({.path = "job/latest", .uid = 1000, .gid = 100, .target = "step2"}));
    OrDie(t->Remove({.path = "job/step2/model.pt"}));
    seed("old-generations");
  }
  {
    std::unique_ptr<CkptTable> t = open();
    for (int i = 0; i < 12; ++i) OrDie(t->Create({.path = "job2-" + std::to_string(i), .is_dir = true}));
    seed("after-snapshot");
  }
}

void ClusterMapSeeds() {
  const std::string manifest = SmallManifest(0x1234abcd, 2);
  DatasetMeta meta = Dataset();
  meta.manifest_bytes = manifest.size();
  meta.manifest_checksum = OrDie(Manifest::Parse(manifest)).checksum();
  ClusterMap map{.epoch = 9, .placement_epoch = 4, .nodes = {Node("n1"), Node("n2"), Node("n3")},
                 .datasets = {meta}};
  map.nodes[1].up = false;
  map.nodes[2].draining = true;
  Seed("cluster_map", "with-manifest", fuzz::EncodePart(PackState(map)) + manifest);
  map.datasets.clear();
  Seed("cluster_map", "no-datasets", fuzz::EncodePart(PackState(map)));
}

}  // namespace
}  // namespace hoard

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  hoard::g_out = argv[1];
  hoard::MessageSeeds();
  hoard::OrdinalSeeds();
  hoard::ManifestSeeds();
  hoard::ChunkFileSeeds();
  hoard::StateStoreSeeds();
  hoard::CkptStoreSeeds();
  hoard::ClusterMapSeeds();
  hoard::DataChannelSeeds();
  hoard::WireFramesSeeds();
  std::printf("wrote %d seeds under %s\n", hoard::g_files, argv[1]);
  return 0;
}
