#include "proto/data_channel.h"

#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <zmq_addon.hpp>

#include "common/mutex.h"
#include "common/testing.h"
#include "proto/curve.h"
#include "proto/rpc_client.h"
#include "proto/rpc_server.h"
#include "proto/wire_frames.h"

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
  EXPECT_EQ(Seal(TestKey(1, 1), SealDirection::kRequest, 1, std::vector<SealIo>{}).status().code(),
            Code::kInvalidArgument)
      << "a seal over no frame";
  std::string frame = "x";
  std::string seal = *Seal(TestKey(1, 1), SealDirection::kRequest, 1, std::vector<SealIo>{SealInPlace(frame)});
  EXPECT_TRUE(ParseSeal(seal).ok());
  EXPECT_EQ(ParseSeal(seal + "x").status().code(), Code::kInvalidArgument) << "tags do not match the count";
  std::string none = seal.substr(0, kSealPrefixBytes);
  none[18] = 0;
  EXPECT_EQ(ParseSeal(none).status().code(), Code::kInvalidArgument) << "a seal over no frame";
  seal[18] = 9;
  EXPECT_EQ(ParseSeal(seal).status().code(), Code::kInvalidArgument) << "too many frames";
  seal[1] = 2;
  EXPECT_EQ(ParseSeal(seal).status().code(), Code::kInvalidArgument) << "unknown version";
}

std::string Hex(std::string_view s) {
  std::string out;
  char b[3];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

// Known answers, computed with another AES-GCM implementation (Python's
// cryptography, AESGCM) from docs/data-channel.md's layout: the key 00..1f,
// session 0x0102030405060708, seq 42.
TEST(SealTest, KnownAnswers) {
  DataKey key{.session = 0x0102030405060708};
  for (size_t i = 0; i < key.key.size(); ++i) key.key[i] = uint8_t(i);
  std::string header = "hoard header", payload = "payload bytes!";
  Result<std::string> seal =
      Seal(key, SealDirection::kRequest, 42, std::vector<SealIo>{SealInPlace(header), SealInPlace(payload)});
  ASSERT_TRUE(seal.ok());
  EXPECT_EQ(Hex(*seal),
            "d50108070605040302012a000000000000000227ee971dfa86deb75e14e9ce076d2d7cbc60d8c04188647f4c91762a0b8b737c");
  EXPECT_EQ(Hex(header), "42e2aebdf6716717135243a5");
  EXPECT_EQ(Hex(payload), "add1ad63c0b6d9877bbf8dfa3e27");
  std::string reply = "reply";
  seal = Seal(key, SealDirection::kReply, 42, std::vector<SealIo>{SealInPlace(reply)});
  ASSERT_TRUE(seal.ok());
  EXPECT_EQ(Hex(*seal), "d50108070605040302012a0000000000000001a169e5a3ce3c352c83cb700809a1560c");
  EXPECT_EQ(Hex(reply), "8395aac205");
  std::vector<std::span<uint8_t>> frames = {Bytes(reply)};
  ASSERT_TRUE(Open(key, SealDirection::kReply, *seal, frames).ok());
  EXPECT_EQ(reply, "reply");
}

TEST(DataSessionsTest, AConnectionsNewSessionReplacesItsOwnAndNoOneElses) {
  DataSessions sessions(3);
  auto a = *sessions.Create(KeyClass::kMember, "conn-a");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(sessions.Create(KeyClass::kMember, "conn-b").ok());
  EXPECT_EQ(sessions.Find(a->key.session), a) << "another member's many sessions pushed this one out";
  EXPECT_EQ(sessions.size(), 2u);
  EXPECT_TRUE(sessions.CheckToken(a->key.session, a->token));
  EXPECT_FALSE(sessions.CheckToken(a->key.session, a->token.substr(1) + "0"));
  EXPECT_FALSE(sessions.CheckToken(a->key.session + 1, a->token));
  EXPECT_EQ(a->token.size(), 48u);
}

TEST(DataSessionsTest, AnUnusedSessionIsForgotten) {
  DataSessions sessions(4, std::chrono::milliseconds(0));
  auto a = *sessions.Create(KeyClass::kMember, "a");
  auto b = *sessions.Create(KeyClass::kMember, "b");
  EXPECT_EQ(sessions.Find(a->key.session), nullptr) << "idle for longer than 0 ms, swept at the next create";
  EXPECT_EQ(sessions.Find(b->key.session), b);
}

TEST(DataSessionsTest, IdsOnlyGoUpAndTheOldestSessionIsForgotten) {
  DataSessions sessions(2);
  auto a = *sessions.Create(KeyClass::kMember, "a");
  auto b = *sessions.Create(KeyClass::kAdmin, "b");
  EXPECT_NE(a->key.session, b->key.session);
  EXPECT_NE(a->key.key, b->key.key);
  EXPECT_TRUE(DataSessions::Accept(*a, 1));
  EXPECT_TRUE(DataSessions::Accept(*a, 5));
  EXPECT_FALSE(DataSessions::Accept(*a, 5));
  EXPECT_FALSE(DataSessions::Accept(*a, 3));
  EXPECT_TRUE(DataSessions::Accept(*b, 1)) << "each session counts on its own";
  auto c = *sessions.Create(KeyClass::kMember, "c");
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
                                                             .data_endpoint = data,
                                                             .data_handshake = data_handshake_});
    server_->Handle<GetChunk>([this](const GetChunk& req, const Envelope& env, std::string* payload) {
      ++calls_;
      *payload = chunk_.substr(0, req.length);
      return Result<ChunkData>(ChunkData{.chunk_length = req.length, .source = "cache"});
    });
    server_->Handle<PutCkptChunk>([this](const PutCkptChunk&, const Envelope& env, std::string*) {
      last_request_payload_ = std::string(env.payload_view());
      return Result<CkptPutReply>(CkptPutReply{});
    });
    server_->Handle<Ping>([this](const Ping&, const Envelope&, std::string*) {
      MutexLock lock(&ping_mu_);
      ++pings_taken_;
      ping_cv_.NotifyAll();
      while (block_pings_) ping_cv_.Wait(&ping_mu_);
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
    zmq::send_multipart(s, ToWire(std::move(frames), 1));
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
  std::chrono::milliseconds data_handshake_ = RpcServer::kDataHandshake;
  // Pings wait while blocked: a busy server.
  void BlockPings(bool block) {
    {
      MutexLock lock(&ping_mu_);
      block_pings_ = block;
    }
    ping_cv_.NotifyAll();
  }
  Mutex ping_mu_;
  CondVar ping_cv_;
  bool block_pings_ GUARDED_BY(ping_mu_) = false;
  int pings_taken_ GUARDED_BY(ping_mu_) = 0;  // Pings a worker has started on
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
    Result<ChunkData> r = c.Call(GetChunk{.dataset = "ds", .length = length}, 5s, &payload);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(std::string(static_cast<const char*>(payload.data()), payload.size()), chunk_.substr(0, length));
  }
  // A chunk the other way travels in pieces (proto/wire_frames.h) and
  // arrives whole and opened.
  Result<CkptPutReply> put_reply = c.Call(PutCkptChunk{.id = 1}, 5s, nullptr, &put_view);
  ASSERT_TRUE(put_reply.ok()) << put_reply.status().ToString();
  EXPECT_EQ(last_request_payload_, put) << "the request's payload arrives opened";
  EXPECT_TRUE(c.on_data_channel());
  EXPECT_EQ(server_->data_sessions(), 1u) << "one session for all of the client's calls";
  EXPECT_EQ(server_->rejected(), 0u);
}

// Clients come and go (a pool that opens more clients than it keeps idle,
// over and over, as a drain's transfers do): the server keeps about one
// session per client open at once, not one per client ever made (issue 30:
// 16 -> 1,990 sessions over six drain/undrain cycles). A closed client's
// routing id goes to the pool's next new client, whose session replaces its.
TEST_F(DataChannelTest, SessionsStayAtTheClientsOpenAtOnceHoweverManyComeAndGo) {
  StartServer();
  ClientPool pool(client_ctx_, /*max_idle_per_endpoint=*/4);
  constexpr size_t kAtOnce = 12;
  for (int round = 0; round < 20; ++round) {
    std::vector<ClientPool::Lease> leases;
    for (size_t i = 0; i < kAtOnce; ++i) {
      leases.push_back(pool.Acquire(server_->bound_endpoint()));
      zmq::message_t payload;
      Result<ChunkData> r = leases.back()->Call(GetChunk{.dataset = "ds", .length = 1}, 5s, &payload);
      ASSERT_TRUE(r.ok()) << "round " << round << ": " << r.status().ToString();
      ASSERT_TRUE(leases.back()->on_data_channel());
    }
    // Released here: 4 stay idle, 8 are closed.
  }
  EXPECT_EQ(pool.idle(server_->bound_endpoint()), 4u);
  EXPECT_LE(server_->data_sessions(), kAtOnce) << "one per client open at once, not one per client made";
  EXPECT_GE(server_->data_sessions(), 4u) << "the idle clients keep theirs";
}

// A client made with a closed client's routing id (as ClientPool makes
// them; a reconnect keeps the id too) replaces that client's session; a
// client with a fresh id adds its own.
TEST_F(DataChannelTest, ANewClientWithAnOldRoutingIdReplacesItsSession) {
  StartServer();
  auto get = [&](RpcClient& c) {
    zmq::message_t payload;
    Result<ChunkData> r = c.Call(GetChunk{.dataset = "ds", .length = 1}, 5s, &payload);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(c.on_data_channel());
  };
  std::string id;
  {
    RpcClient a(client_ctx_, server_->bound_endpoint());
    get(a);
    id = a.routing_id();
  }
  EXPECT_EQ(id.size(), 16u);
  EXPECT_NE(id[0], '\0') << "ZeroMQ reserves routing ids starting with 0";
  RpcClient b(client_ctx_, server_->bound_endpoint(), id);
  get(b);
  EXPECT_EQ(server_->data_sessions(), 1u) << "b's session replaced a's";
  RpcClient c(client_ctx_, server_->bound_endpoint());
  EXPECT_NE(c.routing_id(), id);
  get(c);
  EXPECT_EQ(server_->data_sessions(), 2u);
}

// After a restart, a call that races the client's noticing the old
// connection close fails like any call to a server going away (Unavailable:
// "connection ... lost"), and callers retry such a call. So the test does
// not wait for the client to notice (nothing outside libzmq's I/O thread can
// see that); it retries an Unavailable call, as the daemons do, and asserts
// that one retry is enough and no wrong byte or stuck call comes back.
TEST_F(DataChannelTest, AServerThatForgotTheSessionIsAskedForANewOne) {
  StartServer();
  const std::string control = server_->bound_endpoint(), data = server_->data_endpoint();
  RpcClient c(client_ctx_, control);
  ASSERT_TRUE(c.Call(GetChunk{.length = 100}, 5s).ok());
  // Calls GetChunk{length} until it is not Unavailable (at most twice);
  // returns how many calls failed so.
  zmq::message_t payload;
  Result<ChunkData> r = Status::Internal("not called");
  auto call = [&](uint64_t length) {
    int lost = 0;
    for (;;) {
      r = c.Call(GetChunk{.length = length}, 5s, &payload);
      if (r.ok() || r.status().code() != Code::kUnavailable || lost == 1) return lost;
      ++lost;
    }
  };
  server_.reset();  // a restart: the same ports, no sessions
  StartServer(control, data);
  ASSERT_EQ(server_->data_sessions(), 0u);
  int lost = call(1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 1000));
  EXPECT_GE(server_->data_sessions(), 1u);
  EXPECT_LE(server_->data_sessions(), 1u + lost);
  EXPECT_GE(calls_.load(), 2);
  EXPECT_LE(calls_.load(), 2 + lost);

  // A restart on the same CURVE port but another data port (--data-port 0):
  // the old data port is dead, the CURVE one answers, so a new session.
  server_.reset();
  StartServer(control, "tcp://127.0.0.1:0");
  ASSERT_NE(server_->data_endpoint(), data);
  const int before = calls_.load();
  const auto started = std::chrono::steady_clock::now();
  lost = call(2000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 2000));
  EXPECT_TRUE(c.on_data_channel());
  EXPECT_GE(server_->data_sessions(), 1u);
  EXPECT_LE(server_->data_sessions(), 1u + lost);
  EXPECT_GE(calls_.load(), before + 1);
  EXPECT_LE(calls_.load(), before + 1 + lost);
}

// "Busy" (a full request queue) is an answer to retry, not a server without
// a data channel nor one that forgot the session: the client keeps using
// (or asking for) its data channel.
TEST_F(DataChannelTest, ABusyServerKeepsTheClientOnItsDataChannel) {
  StartServer("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", /*workers=*/1, /*max_queue=*/1);
  // One Ping in the only worker, one in the queue: every other request is busy.
  auto fill = [&] {
    BlockPings(true);
    int taken = 0;
    {
      MutexLock lock(&ping_mu_);
      taken = pings_taken_;
    }
    std::vector<std::thread> pingers;
    for (int i = 0; i < 2; ++i) {
      pingers.emplace_back([&] {
        RpcClient p(client_ctx_, server_->bound_endpoint());
        EXPECT_TRUE(p.Call(Ping{}, 10s).ok());
      });
      if (i == 0) {  // the first is taken by the worker before the second queues
        MutexLock lock(&ping_mu_);
        EXPECT_TRUE(ping_cv_.WaitFor(&ping_mu_, 10s, [&] {
          ping_mu_.AssertHeld();
          return pings_taken_ > taken;
        }));
      }
    }
    EXPECT_TRUE(testing::Eventually([&] { return server_->queued() == 1; }));
    return pingers;
  };
  RpcClient c(client_ctx_, server_->bound_endpoint());
  std::vector<std::thread> pingers = fill();
  Result<ChunkData> r = c.Call(GetChunk{.length = 100}, 5s);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << "the channel's opening was answered busy";
  BlockPings(false);
  for (auto& t : pingers) t.join();
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 100}, 5s, &payload).ok());
  EXPECT_TRUE(c.on_data_channel()) << "busy once is no reason to stay on CURVE";
  EXPECT_EQ(server_->data_sessions(), 1u);

  pingers = fill();
  r = c.Call(GetChunk{.length = 200}, 5s);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << "a sealed request answered busy";
  BlockPings(false);
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
  // Admitted with this session's token (as RpcClient does).
  s.set(zmq::sockopt::plain_username, std::to_string(channel->session));
  s.set(zmq::sockopt::plain_password, channel->token);
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

  // Sealed for another session than the one this connection was admitted
  // with (one nobody opened).
  reply = SendSealed(s, TestKey(key.session + 1, 1), 1, get);
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
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
  zmq::send_multipart(s, ToWire(std::move(tampered), 1));
  reply.clear();
  ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)));
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  // Sealed right but without the frame layout that must follow a seal.
  header = get;
  seal = Seal(key, SealDirection::kRequest, 7, std::vector<SealIo>{SealInPlace(header)});
  std::vector<zmq::message_t> bare;
  bare.emplace_back(seal->data(), seal->size());
  bare.emplace_back(header.data(), header.size());
  zmq::send_multipart(s, bare);
  reply.clear();
  ASSERT_TRUE(zmq::recv_multipart(s, std::back_inserter(reply)));
  EXPECT_EQ(error_of(reply), Code::kInvalidArgument);
  // A member's session cannot make an admin's request.
  reply = SendSealed(s, key, 8, EncodeHeader(MsgType::kDatasetRemove, 8, Status::Ok(), DatasetRemove{.name = "x"}));
  EXPECT_EQ(error_of(reply), Code::kPermissionDenied);
  // OpenDataChannel is answered over CURVE only.
  reply = SendSealed(s, key, 9, EncodeHeader(MsgType::kOpenDataChannel, 9, Status::Ok(), OpenDataChannel{}));
  ASSERT_EQ(reply.size(), 2u);
  EXPECT_EQ(error_of(reply), Code::kInvalidArgument);

  EXPECT_EQ(calls_.load(), 1);
  // The server still serves the real client.
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 10}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 10));
}

// Resident memory of this process, bytes.
uint64_t Rss() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) << 10;
  }
  return 0;
}

// A raw TCP client speaking just enough ZMTP 3.0 to announce one frame of
// `frame_bytes` and then stream its bytes: what an attacker without a session
// does. With `mechanism` "NULL" (a plain ZeroMQ socket) the frame is a
// message after READY; with "PLAIN" or "CURVE" it is the HELLO command itself.
// Returns the bytes it got to send before the server closed the connection.
uint64_t FloodWithOneFrame(uint16_t port, uint64_t frame_bytes, const char* mechanism = "NULL") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string out(64, '\0');  // greeting: signature, version 3.0, mechanism, as-server 0
  out[0] = char(0xFF);
  out[9] = 0x7F;
  out[10] = 3;
  std::memcpy(out.data() + 12, mechanism, std::strlen(mechanism));
  if (std::string_view(mechanism) == "NULL") {
    const std::string ready = std::string("\x05READY") + std::string("\x0bSocket-Type", 12) +
                              std::string("\0\0\0\x06" "DEALER", 10);
    out += std::string("\x04", 1) + char(ready.size()) + ready;
    out += std::string("\x02", 1);  // a long message frame: its size, then its bytes
  } else {
    out += std::string("\x06", 1);  // a long command frame
  }
  for (int i = 7; i >= 0; --i) out += char((frame_bytes >> (8 * i)) & 0xFF);
  if (std::string_view(mechanism) != "NULL") out += "\x05HELLO";
  uint64_t sent = 0;
  if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) != ssize_t(out.size())) {
    ::close(fd);
    return 0;
  }
  const std::string block(1 << 20, 'x');
  while (sent < frame_bytes) {
    const ssize_t n = ::send(fd, block.data(), std::min<uint64_t>(block.size(), frame_bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += uint64_t(n);
  }
  ::close(fd);
  return sent;
}

// Nothing is buffered for a client that has not proven it holds a session:
// the data socket admits a connection only at its handshake, with a live
// session's token, and no server socket takes a frame above
// kMaxWireFrameBytes, not even a handshake command. Before, twelve
// connections each sending a 92 MiB frame made a node hold about 1.1 GB, and
// a HELLO of any mechanism of up to 96 MiB was read in whole.
TEST_F(DataChannelTest, AStrangerCannotMakeAServerHoldItsBytes) {
  StartServer();
  RpcClient c(client_ctx_, server_->bound_endpoint());
  Result<DataChannel> channel = c.Call(OpenDataChannel{}, 2s);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  const std::string control = server_->bound_endpoint();
  const auto control_port = uint16_t(std::stoul(control.substr(control.rfind(':') + 1)));
  const uint64_t before = Rss();
  std::vector<std::thread> attackers;
  std::atomic<uint64_t> delivered{0};
  for (int i = 0; i < 12; ++i) {
    // Every mechanism at the data port, and a CURVE HELLO at the control port.
    const char* mechanism = i % 4 == 0 ? "NULL" : i % 4 == 1 ? "PLAIN" : "CURVE";
    const uint16_t port = i % 4 == 3 ? control_port : uint16_t(channel->port);
    attackers.emplace_back([&, mechanism, port] { delivered += FloodWithOneFrame(port, 92ull << 20, mechanism); });
  }
  for (auto& t : attackers) t.join();
  const uint64_t grown = Rss() > before ? Rss() - before : 0;
  EXPECT_LT(grown, 16ull << 20) << "the server holds what strangers sent";
  // What the kernel's socket buffers took before the server hung up.
  EXPECT_LT(delivered.load(), 12 * (8ull << 20)) << "strangers streamed their frames into the server";

  // Nor with a PLAIN handshake that guesses: a wrong token, another session.
  zmq::context_t raw;
  for (const auto& [user, pass] : std::vector<std::pair<std::string, std::string>>{
           {std::to_string(channel->session), std::string(channel->token.size(), '0')},
           {std::to_string(channel->session + 1), channel->token}}) {
    zmq::socket_t s(raw, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::plain_username, user);
    s.set(zmq::sockopt::plain_password, pass);
    s.set(zmq::sockopt::immediate, 1);
    s.connect("tcp://127.0.0.1:" + std::to_string(channel->port));
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, 500ms);
    EXPECT_FALSE(item.revents & ZMQ_POLLOUT) << "admitted with " << user;
  }
  // The real client goes on.
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 10}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 10));
  EXPECT_TRUE(c.on_data_channel());
}

// Half-open handshakes cannot pile up: past the cap the oldest unfinished
// ones are cut, and a member still gets in.
TEST_F(DataChannelTest, StrangersCannotKeepMoreThanACapOfUnfinishedHandshakes) {
  data_handshake_ = 60s;
  StartServer();
  RpcClient c(client_ctx_, server_->bound_endpoint());
  Result<DataChannel> channel = c.Call(OpenDataChannel{}, 2s);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  constexpr size_t kStrangers = 400;
  constexpr size_t kCap = 256;  // RpcServer::Options::max_pending_handshakes
  std::vector<int> fds;
  for (size_t i = 0; i < kStrangers; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(channel->port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const char signature[10] = {char(0xFF), 0, 0, 0, 0, 0, 0, 0, 0, 0x7F};  // and then nothing
    ASSERT_EQ(::send(fd, signature, sizeof signature, MSG_NOSIGNAL), ssize_t(sizeof signature));
  }
  EXPECT_TRUE(testing::Eventually([&] { return server_->handshakes_cut() >= kStrangers - kCap; }, 5s))
      << server_->handshakes_cut() << " cut";
  EXPECT_LE(server_->handshakes_pending(), kCap);
  // The cut connections are closed, and only by the cut: ZeroMQ's own
  // handshake timeout is a minute in this test. (Which strangers were cut
  // depends on the order the listener accepted them in, not connect's.)
  size_t ended = 0;
  std::vector<bool> done(fds.size(), false);
  char buf[256];
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ended < kStrangers - kCap && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> polls;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!done[i]) polls.push_back(pollfd{.fd = fds[i], .events = POLLIN, .revents = 0});
    }
    if (::poll(polls.data(), polls.size(), 1000) <= 0) continue;
    for (const pollfd& p : polls) {
      if (p.revents == 0) continue;
      // The server's greeting first (sent at once), then the end.
      if (::recv(p.fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) {
        done[size_t(std::find(fds.begin(), fds.end(), p.fd) - fds.begin())] = true;
        ++ended;
      }
    }
  }
  EXPECT_GE(ended, kStrangers - kCap) << "cut handshakes are still open";
  // A member connecting now still gets its chunks over the data channel.
  zmq::message_t payload;
  ASSERT_TRUE(c.Call(GetChunk{.length = 10}, 5s, &payload).ok());
  EXPECT_EQ(payload.to_string(), chunk_.substr(0, 10));
  EXPECT_TRUE(c.on_data_channel());
  for (int fd : fds) ::close(fd);
}

// An unsealed reply on the data channel may come from anyone: a client never
// takes its error (EACCES, ENOSPC for a reader) as the answer, only as "start
// over" (and after a second one, as the call failing for now).
TEST_F(DataChannelTest, AnUnsealedErrorIsNeverTheAnswer) {
  // A fake server: OpenDataChannel over CURVE points at a data socket that
  // admits the token and answers everything unsealed with "permission
  // denied".
  zmq::socket_t control(server_ctx_, zmq::socket_type::router);
  ASSERT_TRUE(ApplyServerKeys(server_ctx_, control).ok());
  control.bind("tcp://127.0.0.1:0");
  const std::string domain = "fake-data-" + std::to_string(::getpid());
  RegisterPlainDomain(domain, [](std::string_view, std::string_view password) {
    return password == "t0ken" ? std::string("data:7") : std::string();
  });
  zmq::socket_t data(server_ctx_, zmq::socket_type::router);
  data.set(zmq::sockopt::plain_server, 1);
  data.set(zmq::sockopt::zap_domain, domain);
  data.bind("tcp://127.0.0.1:0");
  const std::string data_ep = data.get(zmq::sockopt::last_endpoint);
  const uint32_t data_port = uint32_t(std::stoul(data_ep.substr(data_ep.rfind(':') + 1)));
  std::atomic<bool> stop{false};
  std::thread fake([&] {
    while (!stop) {
      zmq::pollitem_t items[] = {{control.handle(), 0, ZMQ_POLLIN, 0}, {data.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, 50ms);
      for (int k = 0; k < 2; ++k) {
        if (!(items[k].revents & ZMQ_POLLIN)) continue;
        zmq::socket_t& s = k == 0 ? control : data;
        std::vector<zmq::message_t> in;
        (void)zmq::recv_multipart(s, std::back_inserter(in));
        std::vector<zmq::message_t> out;
        out.push_back(std::move(in[0]));
        in.erase(in.begin());
        uint64_t id = 0;
        Result<Envelope> env = DecodeMessage(in, &id);
        const std::string h =
            k == 0 ? EncodeHeader(MsgType::kDataChannel, id, Status::Ok(),
                                  DataChannel{.session = 7, .key = std::string(32, 'k'), .port = data_port,
                                              .token = "t0ken"})
                   : EncodeError(0, Status::PermissionDenied("forged"));
        out.emplace_back(h.data(), h.size());
        zmq::send_multipart(s, out);
      }
    }
  });
  RpcClient c(client_ctx_, control.get(zmq::sockopt::last_endpoint));
  Result<ChunkData> r = c.Call(GetChunk{.length = 10}, 5s);
  stop = true;
  fake.join();
  UnregisterPlainDomain(domain);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
}

}  // namespace
}  // namespace hoard::proto
