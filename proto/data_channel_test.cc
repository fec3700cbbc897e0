#include "proto/data_channel.h"

#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <zmq_addon.hpp>

#include "common/testing.h"
#include "proto/curve.h"
#include "proto/rpc_client.h"
#include "proto/rpc_server.h"

namespace hoard::proto {
namespace {

using namespace std::chrono_literals;

std::span<uint8_t> Bytes(std::string& s) { return {reinterpret_cast<uint8_t*>(s.data()), s.size()}; }

DataKey TestKey(uint64_t session, uint8_t fill) {
  DataKey k{.session = session};
  k.key.fill(fill);
  return k;
}

TEST(SealTest, FramesOpenOnlyWithTheirKeyDirectionSeqAndOrder) {
  const DataKey key = TestKey(42, 7);
  const std::string header = "a header", payload = testing::PseudoRandomBytes(3 << 20, 1);
  std::string h = header, p = payload;
  Result<std::string> seal = Seal(key, SealDirection::kRequest, 9, std::vector<SealIo>{SealInPlace(h), SealInPlace(p)});
  ASSERT_TRUE(seal.ok()) << seal.status().ToString();
  EXPECT_EQ(h.size(), header.size());
  EXPECT_NE(h, header);
  EXPECT_NE(p.substr(0, 4096), payload.substr(0, 4096)) << "encrypted in place";
  Result<SealInfo> info = ParseSeal(*seal);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->session, 42u);
  EXPECT_EQ(info->seq, 9u);
  EXPECT_EQ(info->frames, 2u);

  auto open = [&](const DataKey& k, SealDirection d, std::string s, std::string f0, std::string f1) {
    std::vector<std::span<uint8_t>> frames = {Bytes(f0), Bytes(f1)};
    Status st = Open(k, d, s, frames);
    return st.ok() && f0 == header && f1 == payload ? Status::Ok() : (st.ok() ? Status::Internal("bytes") : st);
  };
  EXPECT_TRUE(open(key, SealDirection::kRequest, *seal, h, p).ok());
  EXPECT_EQ(open(key, SealDirection::kReply, *seal, h, p).code(), Code::kPermissionDenied) << "reflected";
  EXPECT_EQ(open(TestKey(42, 8), SealDirection::kRequest, *seal, h, p).code(), Code::kPermissionDenied);
  EXPECT_EQ(open(key, SealDirection::kRequest, *seal, p, h).code(), Code::kPermissionDenied) << "swapped";
  std::string flipped = p;
  flipped[1 << 20] ^= 1;
  EXPECT_EQ(open(key, SealDirection::kRequest, *seal, h, flipped).code(), Code::kPermissionDenied);
  std::string other_seq = *seal;
  other_seq[10] ^= 1;
  EXPECT_EQ(open(key, SealDirection::kRequest, other_seq, h, p).code(), Code::kPermissionDenied);
  std::string other_session = *seal;
  other_session[2] ^= 1;
  EXPECT_EQ(open(key, SealDirection::kRequest, other_session, h, p).code(), Code::kPermissionDenied);

  // Sealed out of place: the source is left alone, the result opens the same.
  std::string out(header.size(), '\0');
  Result<std::string> seal2 = Seal(key, SealDirection::kReply, 10,
                                   std::vector<SealIo>{{reinterpret_cast<const uint8_t*>(header.data()),
                                                        reinterpret_cast<uint8_t*>(out.data()), header.size()}});
  ASSERT_TRUE(seal2.ok());
  std::vector<std::span<uint8_t>> one = {Bytes(out)};
  EXPECT_TRUE(Open(key, SealDirection::kReply, *seal2, one).ok());
  EXPECT_EQ(out, header);
}

TEST(SealTest, MalformedSealFramesAreRejected) {
  EXPECT_FALSE(LooksSealed("\x96\x01"));  // a msgpack header
  EXPECT_EQ(ParseSeal("").status().code(), Code::kInvalidArgument);
  std::string seal = *Seal(TestKey(1, 1), SealDirection::kRequest, 1, std::vector<SealIo>{});
  EXPECT_TRUE(ParseSeal(seal).ok());
  EXPECT_EQ(ParseSeal(seal + "x").status().code(), Code::kInvalidArgument) << "tags do not match the count";
  seal[18] = 9;
  EXPECT_EQ(ParseSeal(seal).status().code(), Code::kInvalidArgument) << "too many frames";
  seal[1] = 2;
  EXPECT_EQ(ParseSeal(seal).status().code(), Code::kInvalidArgument) << "unknown version";
}

TEST(DataSessionsTest, IdsOnlyGoUpAndTheOldestSessionIsForgotten) {
  DataSessions sessions(2);
  auto a = *sessions.Create(false);
  auto b = *sessions.Create(true);
  EXPECT_NE(a->key.session, b->key.session);
  EXPECT_NE(a->key.key, b->key.key);
  EXPECT_TRUE(DataSessions::Accept(*a, 1));
  EXPECT_TRUE(DataSessions::Accept(*a, 5));
  EXPECT_FALSE(DataSessions::Accept(*a, 5));
  EXPECT_FALSE(DataSessions::Accept(*a, 3));
  EXPECT_TRUE(DataSessions::Accept(*b, 1)) << "each session counts on its own";
  auto c = *sessions.Create(false);
  EXPECT_EQ(sessions.Find(a->key.session), nullptr);
  EXPECT_EQ(sessions.Find(b->key.session), b);
  EXPECT_EQ(sessions.Find(c->key.session), c);
  EXPECT_EQ(sessions.size(), 2u);
}

// An RpcServer with CURVE keys and a data channel, and a client context with
// the member key, as in two processes.
class DataChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(GenerateKeys(tmp_.path()).ok());
    server_security_ = *CurveSecurity::Enable(server_ctx_, *LoadDaemonKeys(tmp_.path()), log_);
    client_security_ = *CurveSecurity::Enable(client_ctx_, *LoadDaemonKeys(tmp_.path()), log_);
  }
  void TearDown() override {
    server_.reset();
    server_security_.reset();
    client_security_.reset();
  }

  void StartServer(std::string endpoint = "tcp://127.0.0.1:0", std::string data = "tcp://127.0.0.1:0",
                   int workers = 2, size_t max_queue = 4096) {
    server_ = std::make_unique<RpcServer>(RpcServer::Options{.endpoint = endpoint, .name = "test-server",
                                                             .workers = workers, .max_queue = max_queue,
                                                             .logger = log_, .context = &server_ctx_,
                                                             .data_endpoint = data});
    server_->Handle<GetChunk>([this](const GetChunk& req, const Envelope& env, std::string* payload) {
      ++calls_;
      last_request_payload_ = std::string(env.payload_view());
      *payload = chunk_.substr(0, req.length);
      return Result<ChunkData>(ChunkData{.chunk_length = req.length, .source = "cache"});
    });
    server_->Handle<Ping>([this](const Ping&, const Envelope&, std::string*) {
      while (block_pings_.load()) std::this_thread::sleep_for(1ms);
      return Result<Pong>(Pong{.name = "s"});
    });
    Status started = server_->Start();
    // A restart on the same ports: ZeroMQ closes the old listeners in the
    // background, so the ports may still be taken for a moment.
    for (int i = 0; i < 100 && !started.ok(); ++i) {
      std::this_thread::sleep_for(20ms);
      started = server_->Start();
    }
    ASSERT_TRUE(started.ok()) << started.ToString();
  }

  // A sealed request sent by hand on a plain DEALER: the first reply's frames.
  std::vector<zmq::message_t> SendSealed(zmq::socket_t& s, const DataKey& key, uint64_t seq, std::string header) {
    Result<std::string> seal = Seal(key, SealDirection::kRequest, seq, std::vector<SealIo>{SealInPlace(header)});
    std::vector<zmq::message_t> frames;
    frames.emplace_back(seal->data(), seal->size());
    frames.emplace_back(header.data(), header.size());
    zmq::send_multipart(s, frames);
    std::vector<zmq::message_t> reply;
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 5000ms);
    if (item.revents & ZMQ_POLLIN) (void)zmq::recv_multipart(s, std::back_inserter(reply));
    return reply;
  }

  testing::TempDir tmp_{"hoard-datachannel"};
  std::shared_ptr<spdlog::logger> log_ = spdlog::null_logger_mt("dc-test-" + std::to_string(++n_));
  zmq::context_t server_ctx_, client_ctx_;
  std::unique_ptr<CurveSecurity> server_security_, client_security_;
  std::unique_ptr<RpcServer> server_;
  std::string chunk_ = testing::PseudoRandomBytes(8 << 20, 3);
  std::atomic<int> calls_{0};
  std::atomic<bool> block_pings_{false};  // Pings wait while set: a busy server
  std::string last_request_payload_;
  static inline int n_ = 0;
};

TEST_F(DataChannelTest, ChunksGoSealedOverTheDataChannelAndTheRestOverCurve) {
  StartServer();
  ASSERT_FALSE(server_->data_endpoint().empty());
  RpcClient c(client_ctx_, server_->bound_endpoint());
  ASSERT_TRUE(c.Call(Ping{}, 2s).ok());
  EXPECT_FALSE(c.on_data_channel()) << "a Ping moves no chunk";
  EXPECT_EQ(server_->data_sessions(), 0u);
  const std::string put = testing::PseudoRandomBytes(5 << 20, 9);
  const std::string_view put_view = put;
  for (uint64_t length : {uint64_t{8} << 20, uint64_t{1}, uint64_t{0}}) {
    zmq::message_t payload;
    Result<ChunkData> r = c.Call(GetChunk{.dataset = "ds", .length = length}, 5s, &payload, &put_view);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(std::string(static_cast<const char*>(payload.data()), payload.size()), chunk_.substr(0, length));
    EXPECT_EQ(last_request_payload_, put) << "the request's payload arrives opened";
  }
  EXPECT_TRUE(c.on_data_channel());
  EXPECT_EQ(server_->data_sessions(), 1u) << "one session for all of the client's calls";
  EXPECT_EQ(server_->rejected(), 0u);
}

TEST_F(DataChannelTest, AServerThatForgotTheSessionIsAskedForANewOne) {
  StartServer();
  const std::string control = server_->bound_endpoint(), data = server_->data_endpoint();
  RpcClient c(client_ctx_, control);
  ASSERT_TRUE(c.Call(GetChunk{.length = 100}, 5s).ok());
  server_.reset();  // a restart: the same ports, no sessions
  StartServer(control, data);
  ASSERT_EQ(server_->data_sessions(), 0u);
  std::this_thread::sleep_for(300ms);  // the client has seen the old connections close
  zmq::message_t payload;
  Result<ChunkData> r = c.Call(GetChunk{.length = 1000}, 5s, &payload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 1000));
  EXPECT_EQ(server_->data_sessions(), 1u);
  EXPECT_EQ(calls_.load(), 2);

  // A restart on the same CURVE port but another data port (--data-port 0):
  // the old data port is dead, the CURVE one answers, so a new session.
  server_.reset();
  StartServer(control, "tcp://127.0.0.1:0");
  ASSERT_NE(server_->data_endpoint(), data);
  // As long as a real restart takes: the client's sockets have seen their
  // connections close (a call racing the close fails like any call to a
  // server that is going away).
  std::this_thread::sleep_for(300ms);
  const auto started = std::chrono::steady_clock::now();
  r = c.Call(GetChunk{.length = 2000}, 5s, &payload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 2000));
  EXPECT_TRUE(c.on_data_channel());
  EXPECT_EQ(server_->data_sessions(), 1u);
  EXPECT_EQ(calls_.load(), 3);
}

// "Busy" (a full request queue) is an answer to retry, not a server without
// a data channel nor one that forgot the session: the client keeps using
// (or asking for) its data channel.
TEST_F(DataChannelTest, ABusyServerKeepsTheClientOnItsDataChannel) {
  StartServer("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", /*workers=*/1, /*max_queue=*/1);
  // One Ping in the only worker, one in the queue: every other request is busy.
  auto fill = [&] {
    block_pings_ = true;
    std::vector<std::thread> pingers;
    for (int i = 0; i < 2; ++i) {
      pingers.emplace_back([&] {
        RpcClient p(client_ctx_, server_->bound_endpoint());
        EXPECT_TRUE(p.Call(Ping{}, 10s).ok());
      });
      std::this_thread::sleep_for(200ms);  // the first is taken before the second queues
    }
    return pingers;
  };
  RpcClient c(client_ctx_, server_->bound_endpoint());
  std::vector<std::thread> pingers = fill();
  Result<ChunkData> r = c.Call(GetChunk{.length = 100}, 5s);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << "the channel's opening was answered busy";
  block_pings_ = false;
  for (auto& t : pingers) t.join();
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 100}, 5s, &payload).ok());
  EXPECT_TRUE(c.on_data_channel()) << "busy once is no reason to stay on CURVE";
  EXPECT_EQ(server_->data_sessions(), 1u);

  pingers = fill();
  r = c.Call(GetChunk{.length = 200}, 5s);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << "a sealed request answered busy";
  block_pings_ = false;
  for (auto& t : pingers) t.join();
  ASSERT_TRUE(c.Call(GetChunk{.length = 300}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 300));
  EXPECT_TRUE(c.on_data_channel());
  EXPECT_EQ(server_->data_sessions(), 1u) << "the session was kept, not replaced";
}

TEST_F(DataChannelTest, WithoutADataChannelChunksStayOnCurve) {
  StartServer("tcp://127.0.0.1:0", "");
  EXPECT_TRUE(server_->data_endpoint().empty());
  RpcClient c(client_ctx_, server_->bound_endpoint());
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 4096}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 4096));
  EXPECT_FALSE(c.on_data_channel());
  EXPECT_EQ(server_->rejected(), 0u) << "asking for a channel is not bad input";
}

TEST_F(DataChannelTest, UnsealedForgedReplayedAndTamperedRequestsGetNoData) {
  StartServer();
  RpcClient c(client_ctx_, server_->bound_endpoint());
  Result<DataChannel> channel = c.Call(OpenDataChannel{}, 2s);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  ASSERT_EQ(channel->key.size(), kDataKeyBytes);
  DataKey key{.session = channel->session};
  std::copy(channel->key.begin(), channel->key.end(), key.key.begin());

  zmq::context_t raw_ctx;  // no keys: the data socket has no CURVE
  zmq::socket_t s(raw_ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect("tcp://127.0.0.1:" + std::to_string(channel->port));
  // The error code of a reply, sealed (opened with `key`) or not.
  auto error_of = [&key](std::vector<zmq::message_t>& reply) {
    if (!reply.empty() && LooksSealed(reply[0].to_string_view()) &&
        !OpenMessage(key, SealDirection::kReply, reply).ok()) {
      return Code::kInternal;
    }
    uint64_t id = 0;
    Result<Envelope> env = DecodeMessage(reply, &id);
    return env.ok() && env->type == MsgType::kError ? env->status.code() : Code::kOk;
  };
  const std::string get = EncodeHeader(MsgType::kGetChunk, 5, Status::Ok(), GetChunk{.length = 64});

  // Plain, unsealed: an error, no data.
  std::vector<zmq::message_t> plain;
  plain.emplace_back(get.data(), get.size());
  zmq::send_multipart(s, plain);
  std::vector<zmq::message_t> reply;
  ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)));
  EXPECT_EQ(error_of(reply), Code::kInvalidArgument);

  // A session nobody opened.
  reply = SendSealed(s, TestKey(key.session + 1, 1), 1, get);
  EXPECT_EQ(error_of(reply), Code::kNotFound);
  // The right session, the wrong key (a forger who guessed the id).
  reply = SendSealed(s, DataKey{.session = key.session}, 1, get);
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  EXPECT_EQ(calls_.load(), 0);

  // Sealed right: a sealed answer with the chunk.
  reply = SendSealed(s, key, 5, get);
  ASSERT_EQ(reply.size(), 3u);
  ASSERT_TRUE(LooksSealed(reply[0].to_string_view()));
  std::vector<std::span<uint8_t>> frames = {{static_cast<uint8_t*>(reply[1].data()), reply[1].size()},
                                            {static_cast<uint8_t*>(reply[2].data()), reply[2].size()}};
  ASSERT_TRUE(Open(key, SealDirection::kReply, reply[0].to_string_view(), frames).ok());
  EXPECT_EQ(reply[2].to_string(), chunk_.substr(0, 64));
  EXPECT_EQ(calls_.load(), 1);

  // The same id again (a replay), then a lower one: refused.
  reply = SendSealed(s, key, 5, get);
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  reply = SendSealed(s, key, 4, get);
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  // A flipped bit in transit.
  std::string header = get;
  Result<std::string> seal = Seal(key, SealDirection::kRequest, 6, std::vector<SealIo>{SealInPlace(header)});
  header[3] ^= 0x10;
  std::vector<zmq::message_t> tampered;
  tampered.emplace_back(seal->data(), seal->size());
  tampered.emplace_back(header.data(), header.size());
  zmq::send_multipart(s, tampered);
  reply.clear();
  ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)));
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  // A member's session cannot make an admin's request.
  reply = SendSealed(s, key, 7, EncodeHeader(MsgType::kDatasetRemove, 7, Status::Ok(), DatasetRemove{.name = "x"}));
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  // OpenDataChannel is answered over CURVE only.
  reply = SendSealed(s, key, 8, EncodeHeader(MsgType::kOpenDataChannel, 8, Status::Ok(), OpenDataChannel{}));
  ASSERT_EQ(reply.size(), 2u);
  EXPECT_EQ(error_of(reply), Code::kInvalidArgument);

  EXPECT_EQ(calls_.load(), 1);
  // The server still serves the real client.
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 10}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 10));
}

}  // namespace
}  // namespace hoard::proto
