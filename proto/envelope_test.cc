#include "proto/envelope.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "common/alloc_budget.h"
#include "common/msgpack_budget.h"

namespace hoard::proto {
namespace {

std::vector<zmq::message_t> Frames(const std::string& header) {
  std::vector<zmq::message_t> f;
  f.emplace_back(header.data(), header.size());
  return f;
}

// Packs an envelope with arbitrary field values, to build bad headers.
template <typename V, typename T, typename B>
std::string RawHeader(V version, T type, uint64_t id, const B& body) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(6);
  pk.pack(version);
  pk.pack(type);
  pk.pack(id);
  pk.pack(0u);
  pk.pack(std::string());
  pk.pack(body);
  return std::string(buf.data(), buf.size());
}

TEST(EnvelopeTest, RoundTripKeepsEveryField) {
  DatasetAdd add{.name = "imagenet", .source = "nfs://10.0.0.1/export/imagenet", .chunk_size = 1 << 22,
                 .replicas = 2};
  auto frames = Frames(EncodeHeader(DatasetAdd::kType, 42, Status::Ok(), add));
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(id, 42u);
  EXPECT_EQ(env->type, MsgType::kDatasetAdd);
  EXPECT_TRUE(env->status.ok());
  EXPECT_FALSE(env->has_payload);
  Result<DatasetAdd> back = BodyAs<DatasetAdd>(*env);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->name, "imagenet");
  EXPECT_EQ(back->source, add.source);
  EXPECT_EQ(back->chunk_size, add.chunk_size);
  EXPECT_EQ(back->replicas, 2u);
}

TEST(EnvelopeTest, APayloadArrivesWithItsMessage) {
  auto frames = Frames(EncodeHeader(PutCkptChunk::kType, 9, Status::Ok(), PutCkptChunk{.id = 3, .index = 1}));
  const std::string payload = "chunk bytes";
  frames.emplace_back(payload.data(), payload.size());
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_TRUE(env->has_payload);
  EXPECT_EQ(env->payload_view(), payload);
}

// Each type gets what it needs and no more, checked before the header is
// decoded: a chunk request is a few dozen bytes and carries no payload.
TEST(EnvelopeTest, EachTypeIsHeldToItsOwnLimits) {
  uint64_t id = 0;
  auto big = Frames(EncodeHeader(GetChunk::kType, 1, Status::Ok(), GetChunk{.dataset = std::string(8000, 'd')}));
  Result<Envelope> env = DecodeMessage(big, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), Code::kInvalidArgument);
  EXPECT_NE(env.status().message().find("GetChunk header of"), std::string::npos) << env.status().ToString();

  auto with_payload = Frames(EncodeHeader(GetChunk::kType, 2, Status::Ok(), GetChunk{.dataset = "ds"}));
  with_payload.emplace_back(std::string(10, 'x').data(), 10);
  env = DecodeMessage(with_payload, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("GetChunk carries no payload"), std::string::npos);

  // A control request may be large (a node's status), a reply may carry a chunk.
  auto status = Frames(EncodeHeader(DatasetAdd::kType, 3, Status::Ok(), DatasetAdd{.name = std::string(8000, 'n')}));
  EXPECT_TRUE(DecodeMessage(status, &id).ok());
  auto reply = Frames(EncodeHeader(MsgType::kChunkData, 4, Status::Ok(), ChunkData{}));
  reply.emplace_back(std::string(1 << 20, 'c').data(), 1 << 20);
  EXPECT_TRUE(DecodeMessage(reply, &id).ok());
}

TEST(EnvelopeTest, ErrorReplyCarriesCodeAndMessage) {
  auto frames = Frames(EncodeError(7, Status::NotFound("dataset imagenet does not exist")));
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->type, MsgType::kError);
  EXPECT_EQ(env->status.code(), Code::kNotFound);
  EXPECT_EQ(env->status.message(), "dataset imagenet does not exist");
}

TEST(EnvelopeTest, UnknownFieldsAreIgnoredAndMissingOnesDefault) {
  std::map<std::string, msgpack::type::variant> body;
  body["name"] = std::string("mnist");
  body["from_the_future"] = uint64_t{99};
  auto frames = Frames(RawHeader(kProtocolVersion, uint16_t(MsgType::kWarm), 1, body));
  uint64_t id;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok());
  Result<Warm> w = BodyAs<Warm>(*env);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->name, "mnist");
}

TEST(EnvelopeTest, WrongVersionIsRejectedWithTheVersionInTheMessage) {
  auto frames = Frames(RawHeader(kProtocolVersion + 1, uint16_t(MsgType::kPing), 5, Ping{}));
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), Code::kInvalidArgument);
  EXPECT_NE(env.status().message().find("protocol version 2"), std::string::npos);
  EXPECT_EQ(id, 5u) << "the id is still echoed so the sender can match the error";
}

TEST(EnvelopeTest, UnknownTypeIsRejected) {
  auto frames = Frames(RawHeader(kProtocolVersion, uint16_t(999), 5, Ping{}));
  uint64_t id;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("unknown message type 999"), std::string::npos);
}

TEST(EnvelopeTest, WrongBodyTypeIsInvalidArgument) {
  auto frames = Frames(RawHeader(kProtocolVersion, uint16_t(MsgType::kDatasetAdd), 1, std::string("x")));
  uint64_t id;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok());
  Result<DatasetAdd> add = BodyAs<DatasetAdd>(*env);
  ASSERT_FALSE(add.ok());
  EXPECT_EQ(add.status().code(), Code::kInvalidArgument);
  EXPECT_NE(add.status().message().find("malformed DatasetAdd"), std::string::npos);

  std::map<std::string, std::string> wrong_field{{"replicas", "two"}};
  frames = Frames(RawHeader(kProtocolVersion, uint16_t(MsgType::kDatasetAdd), 1, wrong_field));
  env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(BodyAs<DatasetAdd>(*env).status().code(), Code::kInvalidArgument);
}

TEST(EnvelopeTest, SizeAndFrameLimits) {
  std::string big(kMaxHeaderBytes + 1, 'x');
  auto frames = Frames(big);
  uint64_t id;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("exceeds the limit"), std::string::npos);

  frames = Frames(EncodeHeader(MsgType::kPing, 1, Status::Ok(), Ping{}));
  frames.emplace_back(kMaxPayloadBytes + 1);
  EXPECT_FALSE(DecodeMessage(frames, &id).ok());

  frames = Frames(EncodeHeader(MsgType::kPing, 1, Status::Ok(), Ping{}));
  frames.emplace_back(1);
  frames.emplace_back(1);
  env = DecodeMessage(frames, &id);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("3 frames"), std::string::npos);

  std::vector<zmq::message_t> none;
  EXPECT_FALSE(DecodeMessage(none, &id).ok());
}

TEST(EnvelopeTest, HostileCountsDoNotAllocate) {
  // An array header claiming 2^31 elements, then nothing.
  std::string bomb = "\xdd\x80\x00\x00\x00";
  auto frames = Frames(bomb);
  uint64_t id;
  EXPECT_EQ(DecodeMessage(frames, &id).status().code(), Code::kInvalidArgument);
  // Deep nesting: 1,000 nested one-element arrays.
  std::string deep(1000, '\x91');
  deep += '\x00';
  frames = Frames(deep);
  EXPECT_EQ(DecodeMessage(frames, &id).status().code(), Code::kInvalidArgument);
  // A str claiming 4 GiB.
  frames = Frames(std::string("\xdb\xff\xff\xff\xff", 5));
  EXPECT_EQ(DecodeMessage(frames, &id).status().code(), Code::kInvalidArgument);
}

TEST(EnvelopeTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(12345);
  std::string valid = EncodeHeader(MsgType::kGetChunk, 9, Status::Ok(), GetChunk{.dataset = "d", .uid = 1});
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string buf;
    if (i % 2 == 0) {
      buf.resize(rng() % 64);
      for (char& c : buf) c = static_cast<char>(rng());
    } else {
      buf = valid;  // mutate a valid message: flips, truncation
      for (int k = 0; k < 3; ++k) buf[rng() % buf.size()] = static_cast<char>(rng());
      buf.resize(rng() % (buf.size() + 1));
    }
    auto frames = Frames(buf);
    uint64_t id;
    Result<Envelope> env = DecodeMessage(frames, &id);
    if (env.ok()) {
      ++accepted;
      (void)BodyAs<GetChunk>(*env);  // must not throw either
    }
  }
  EXPECT_LT(accepted, 20000);
}

// ---- the decode budget (common/alloc_budget.h) -----------------------------

// Peak resident memory, independent of the budget's own count: Linux resets
// VmHWM to the current RSS when "5" is written to clear_refs.
class PeakRss {
 public:
  PeakRss() {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5" << std::flush;
    ok_ = reset.good() && Read("VmHWM:") > 0;
    base_ = Read("VmRSS:");
  }
  bool ok() const { return ok_; }
  // Bytes by which the peak exceeded the RSS at construction.
  size_t growth() const { return Read("VmHWM:") - base_; }

 private:
  static size_t Read(const char* key) {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(key, 0) == 0) return std::stoull(line.substr(strlen(key))) << 10;
    }
    return 0;
  }
  bool ok_ = false;
  size_t base_ = 0;
};

// A header of `type` whose body holds `reports` arrays of 65,535 empty maps
// (1 byte each on the wire): under `key` in the body, each inside a
// one-entry map under `inner` if that is given. 250 of them are 16 MB, just
// under kMaxHeaderBytes, and within every per-array and per-map limit.
std::string EmptyMapsHeader(MsgType type, int reports, const std::string& key, const std::string& inner) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(6);
  pk.pack(kProtocolVersion);
  pk.pack(uint16_t(type));
  pk.pack(uint64_t{77});
  pk.pack(0u);
  pk.pack(std::string());
  pk.pack_map(1);
  pk.pack(key);
  pk.pack_array(reports);
  for (int r = 0; r < reports; ++r) {
    if (!inner.empty()) {
      pk.pack_map(1);
      pk.pack(inner);
    }
    pk.pack_array(65535);
    for (int i = 0; i < 65535; ++i) pk.pack_map(0);
  }
  return std::string(buf.data(), buf.size());
}

// The issue-28 message: a member's 16 MB Heartbeat whose 250 reports hold
// 65,535 empty `failures` maps each took the coordinator 1.4 GB while it
// decoded (peak RSS +1,375 MiB), on each of its 4 workers at once; a node's
// NodeStatus (empty body) took 363 MiB for the tree alone. Both are refused
// now, within their budget of 16x + 64 KiB (250 MiB), before their trees are
// built: the process's peak memory does not grow.
TEST(DecodeBudgetTest, SixteenMegabytesOfEmptyMapsAreRefusedWithinTheBudget) {
  struct Case {
    MsgType type;
    std::string key, inner;
  };
  for (const Case& c : {Case{MsgType::kHeartbeat, "datasets", "failures"}, Case{MsgType::kNodeStatus, "x", ""}}) {
    SCOPED_TRACE(TypeName(c.type));
    auto frames = Frames(EmptyMapsHeader(c.type, 250, c.key, c.inner));
    const size_t size = frames[0].size();
    ASSERT_LE(size, kMaxHeaderBytes);
    ASSERT_GT(size, 16'000'000u);
    const size_t budget = DecodeBudget(size);
    PeakRss peak;
    size_t charged = 0;
    Status status;
    {
      AllocBudget outer(SIZE_MAX);  // counts what the decode charges
      uint64_t id = 0;
      Result<Envelope> env = DecodeMessage(frames, &id);
      status = env.ok() ? Status::Ok() : env.status();
      if (env.ok()) status = c.type == MsgType::kHeartbeat ? BodyAs<Heartbeat>(*env).status()
                                                           : BodyAs<NodeStatus>(*env).status();
      charged = outer.peak();
    }
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("decoding would take more than " + std::to_string(budget) + " bytes"),
              std::string::npos)
        << status.ToString();
    EXPECT_LE(charged, budget);
    if (peak.ok()) {
      EXPECT_LT(peak.growth(), budget / 8) << "the process's peak memory while it decoded";
      printf("%s of %zu bytes: refused; charged %zu, peak RSS +%zu MiB (budget %zu MiB)\n", TypeName(c.type), size,
             charged, peak.growth() >> 20, budget >> 20);
    }
  }
}

// A message whose msgpack tree fits its budget but whose structs do not:
// 65,535 reports of one field each ({"uid": 0}, 6 bytes) are 13x as msgpack
// objects and 17x more as DatasetReports. BodyAs refuses it.
TEST(DecodeBudgetTest, TheStructsAreChargedToo) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1);
  pk.pack(std::string("datasets"));
  pk.pack_array(65535);
  for (int i = 0; i < 65535; ++i) {
    pk.pack_map(1);
    pk.pack(std::string("uid"));
    pk.pack(0);
  }
  const msgpack::object_handle body = msgpack::unpack(buf.data(), buf.size());
  auto frames = Frames(RawHeader(kProtocolVersion, uint16_t(MsgType::kHeartbeat), 3, body.get()));
  const size_t budget = DecodeBudget(frames[0].size());
  ASSERT_LT(MsgpackTreeCharge(static_cast<const char*>(frames[0].data()), frames[0].size(),
                              msgpack::unpack_limit()),
            budget);
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_LT(env->body_budget, budget / 4) << "the tree took most of the budget";
  Result<Heartbeat> hb = BodyAs<Heartbeat>(*env);
  ASSERT_FALSE(hb.ok());
  EXPECT_EQ(hb.status().code(), Code::kInvalidArgument);
  EXPECT_NE(hb.status().message().find("refused Heartbeat body: decoding would take more than"), std::string::npos)
      << hb.status().ToString();
  // What the tree left is the body's, again at each call.
  EXPECT_FALSE(BodyAs<Heartbeat>(*env).ok());
  EXPECT_TRUE(BodyAs<NodeStatus>(*env).ok()) << "an empty body allocates nothing";
}

// Decodes `header` as a server does (DecodeMessage, BodyAs<T>) and returns
// what that charged, as a multiple of the header's size; fails the test if it
// does not decode.
template <typename T>
double ChargeRatio(const std::string& what, const std::string& header, const std::string& payload = {}) {
  auto frames = Frames(header);
  if (!payload.empty()) frames.emplace_back(payload.data(), payload.size());
  size_t charged = 0;
  {
    AllocBudget outer(SIZE_MAX);
    uint64_t id = 0;
    Result<Envelope> env = DecodeMessage(frames, &id);
    EXPECT_TRUE(env.ok()) << what << ": " << env.status().ToString();
    if (!env.ok()) return 0;
    Result<T> body = BodyAs<T>(*env);
    EXPECT_TRUE(body.ok()) << what << ": " << body.status().ToString();
    charged = outer.peak();
  }
  const double ratio = double(charged) / double(header.size());
  const double spare = double(DecodeBudget(header.size())) / double(charged);
  printf("%s: %zu header bytes, charged %zu (%.1fx), %.2fx to spare\n", what.c_str(), header.size(), charged, ratio,
         spare);
  return spare;
}

std::string NodeName(int i) { return "node-" + std::to_string(i) + ".rack" + std::to_string(i % 40) + ".cluster"; }

TEST(DecodeBudgetTest, LargeRealMessagesDecodeWithRoomToSpare) {
  std::mt19937_64 rng(28);
  {
    // The largest reply there is: a manifest part rides in the payload
    // frame, which is adopted, never decoded.
    const std::string header =
        EncodeHeader(MsgType::kManifestPart, 1, Status::Ok(), ManifestPart{.total_bytes = 1ull << 30, .offset = 8u << 20});
    const std::string part(GetManifest::kMaxPart, 'm');
    auto frames = Frames(header);
    frames.emplace_back(part.data(), part.size());
    AllocBudget outer(SIZE_MAX);
    uint64_t id = 0;
    Result<Envelope> env = DecodeMessage(frames, &id);
    ASSERT_TRUE(env.ok());
    ASSERT_TRUE(BodyAs<ManifestPart>(*env).ok());
    EXPECT_EQ(env->payload.size(), GetManifest::kMaxPart);
    EXPECT_LT(outer.peak(), kDecodeBudgetFloor / 4) << "8 MiB of payload cost nothing";
  }
  {
    CkptWorkReply w;
    for (uint32_t i = 0; i < 16384; ++i) {
      w.rebuild.push_back(CkptChunkRef{.id = 100000 + i / 16, .gen = 1 + i % 7, .index = i % 16,
                                       .checksum = rng(), .length = 4u << 20, .chunk_size = 4u << 20,
                                       .holders = {NodeName(i % 97), NodeName(i % 89)}});
    }
    for (uint64_t id = 1; id < 50000; id += 3) w.keep_files.push_back(id);
    w.rebuild_seq = 12;
    EXPECT_GE(ChargeRatio<CkptWorkReply>("CkptWorkReply, 16,384 rebuild entries",
                                         EncodeHeader(MsgType::kCkptWorkReply, 1, Status::Ok(), w)),
              2.0);
  }
  {
    // The worst shape a real message has: tiny maps of small numbers, here
    // a whole drop page of {id, gen} (12 bytes each: ids need 3 bytes once
    // there are more than 127 of them; 10 bytes, 14x, for those few).
    CkptWorkReply w;
    for (uint64_t i = 0; i < 4096; ++i) w.drop_files.push_back({.id = 1000 + i, .gen = 1 + i % 5});
    EXPECT_GE(ChargeRatio<CkptWorkReply>("CkptWorkReply, 4,096 drop_files",
                                         EncodeHeader(MsgType::kCkptWorkReply, 1, Status::Ok(), w)),
              1.3);
    w.drop_files.resize(127);
    for (uint64_t i = 0; i < 127; ++i) w.drop_files[i] = {.id = i, .gen = 1};
    EXPECT_GE(ChargeRatio<CkptWorkReply>("CkptWorkReply, 127 drop_files of 1-byte ids",
                                         EncodeHeader(MsgType::kCkptWorkReply, 1, Status::Ok(), w)),
              2.0);
  }
  {
    ClusterStatusReply r;
    for (int n = 0; n < 64; ++n) {
      r.nodes.push_back(NodeInfo{.name = NodeName(n), .endpoint = "tcp://10.0.0." + std::to_string(n) + ":7101",
                                 .capacity_bytes = 4ull << 40, .used_bytes = rng() >> 24, .chunks = rng() >> 40});
    }
    for (int d = 0; d < 1000; ++d) {
      DatasetStatus s;
      s.meta = DatasetMeta{.name = "dataset-" + std::to_string(d), .uid = rng(), .version = 3,
                           .source = "nfs://10.1.0.1/export/datasets/" + std::to_string(d), .chunk_size = 4u << 20,
                           .replicas = 2, .warm = true, .manifest_bytes = rng() >> 40, .manifest_checksum = rng(),
                           .file_count = rng() >> 44, .total_bytes = rng() >> 20, .total_chunks = rng() >> 40,
                           .created_unix = 1700000000};
      s.cached_bytes = rng() >> 20;
      s.failures.push_back(FileFailure{.path = "train/shard-00017.tar", .error = "origin: EIO"});
      for (int n = 0; n < 64; ++n) {
        s.shares.push_back(NodeShare{.node = NodeName(n), .owned_chunks = rng() >> 48, .owned_bytes = rng() >> 24,
                                     .cached_bytes = rng() >> 24, .reported = true});
      }
      r.datasets.push_back(std::move(s));
    }
    EXPECT_GE(ChargeRatio<ClusterStatusReply>("ClusterStatusReply, 1,000 datasets on 64 nodes",
                                              EncodeHeader(MsgType::kClusterStatusReply, 1, Status::Ok(), r)),
              2.0);
  }
  {
    CkptCommit c{.id = 123456, .gen = 9, .size = 256ull << 30};
    for (uint32_t i = 0; i < kMaxArrayEntries; ++i) c.checksums.push_back(rng());
    EXPECT_GE(ChargeRatio<CkptCommit>("CkptCommit, 65,536 checksums",
                                      EncodeHeader(MsgType::kCkptCommit, 1, Status::Ok(), c)),
              2.0);
  }
  {
    // A node's reports: 20 datasets of a million chunks, failures full.
    Heartbeat hb{.name = NodeName(3), .epoch = 99, .capacity_bytes = 4ull << 40, .datasets_included = true};
    for (int d = 0; d < 20; ++d) {
      OrdinalEncoder ordinals;
      uint64_t n = 0;
      for (uint64_t o = d; o < 1000000; o += 1 + rng() % 3, ++n) ordinals.Add(o);
      DatasetReport r{.uid = rng(), .version = 2, .placement_epoch = 40, .owned_chunks = n, .cached_chunks = n,
                      .cached_ordinals = ordinals.Finish()};
      for (int f = 0; f < 100; ++f) {
        r.failures.push_back({.path = "train/shard-" + std::to_string(f) + ".tar", .error = "origin: timed out"});
      }
      hb.datasets.push_back(std::move(r));
    }
    for (int k = 0; k < 200; ++k) hb.counters["hoard_node_counter_" + std::to_string(k)] = rng() >> 30;
    EXPECT_GE(ChargeRatio<Heartbeat>("Heartbeat, 20 reports of 1M chunks",
                                     EncodeHeader(MsgType::kHeartbeat, 1, Status::Ok(), hb)),
              2.0);
  }
  {
    CkptListReply l;
    for (int i = 0; i < 5000; ++i) {
      CkptEntry e{.path = "job-7/step-" + std::to_string(i) + "/rank-3.pt", .id = 5000u + i, .mode = 0644,
                  .mtime_ns = 1700000000000000000 + i, .gen = 4, .size = 300u << 20, .level = 2,
                  .chunk_size = 4u << 20, .writer = NodeName(i % 64)};
      for (int k = 0; k < 75; ++k) {
        e.checksums.push_back(rng());
        e.replicas.push_back({NodeName(k % 64)});
      }
      l.children.push_back(std::move(e));
    }
    EXPECT_GE(ChargeRatio<CkptListReply>("CkptListReply, 5,000 files of 75 chunks",
                                         EncodeHeader(MsgType::kCkptListReply, 1, Status::Ok(), l)),
              2.0);
  }
  EXPECT_GE(ChargeRatio<Pong>("Pong", EncodeHeader(MsgType::kPong, 1, Status::Ok(), Pong{.role = "node"})), 2.0);
}

}  // namespace
}  // namespace hoard::proto

namespace hoard::proto {
namespace {

// keep_files goes as a count and ordinals in one bin: more ids than a
// message's arrays may hold (65,536) arrive whole, sorted; a count that its
// bytes cannot hold is refused, not allocated.
TEST(IdListTest, MoreIdsThanAnArrayMayHoldArriveWhole) {
  CkptWorkReply w;
  for (uint64_t id = 200000; id > 0; id -= 2) w.keep_files.push_back(id);
  w.keep_files.push_back(8);  // a duplicate
  const std::string header = EncodeHeader(MsgType::kCkptWorkReply, 9, Status::Ok(), w);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(header.data(), header.size());
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  Result<CkptWorkReply> got = BodyAs<CkptWorkReply>(*env);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->keep_files.size(), 100000u);
  EXPECT_TRUE(std::is_sorted(got->keep_files.begin(), got->keep_files.end()));
  EXPECT_EQ(got->keep_files.front(), 2u);
  EXPECT_EQ(got->keep_files.back(), 200000u);

  // A count no bin of that size can hold.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> p(buf);
  p.pack_array(2);
  p.pack(uint64_t(1) << 40);
  p.pack_bin(1);
  p.pack_bin_body("\x01", 1);
  msgpack::object_handle h = msgpack::unpack(buf.data(), buf.size());
  IdList ids;
  EXPECT_THROW(h.get().convert(ids), msgpack::type_error);
}

}  // namespace
}  // namespace hoard::proto
