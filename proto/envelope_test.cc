#include "proto/envelope.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

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
