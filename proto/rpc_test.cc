#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <zmq_addon.hpp>

#include "proto/rpc_client.h"
#include "proto/rpc_server.h"

namespace hoard::proto {
namespace {

using namespace std::chrono_literals;

class RpcTest : public ::testing::Test {
 protected:
  void StartServer(int workers = 2, size_t max_queue = 1024) {
    server_ = std::make_unique<RpcServer>(RpcServer::Options{
        .endpoint = "tcp://127.0.0.1:0", .name = "test-server", .workers = workers,
        .max_queue = max_queue, .logger = spdlog::null_logger_mt("rpc-test-" + std::to_string(++n_)),
        .context = &ctx_, .on_reply_sent = [this] {
          MutexLock lock(&replies_mu_);
          ++replies_sent_;
          replies_cv_.NotifyAll();
        }});
    server_->Handle<Ping>([](const Ping&, const Envelope&, std::string*) {
      return Result<Pong>(Pong{.role = "test", .name = "s1", .epoch = 3});
    });
    server_->Handle<GetChunk>([](const GetChunk& req, const Envelope&, std::string* payload) -> Result<ChunkData> {
      if (req.dataset == "missing") return Status::NotFound("dataset missing does not exist");
      if (req.dataset == "away") return Status::Unavailable("the origin is away");
      if (req.dataset == "slow") std::this_thread::sleep_for(300ms);
      payload->assign(req.length, static_cast<char>('a' + req.index));
      return ChunkData{.chunk_length = req.length, .offset = req.offset, .source = "cache"};
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  // Sends raw frames on a fresh DEALER and returns the decoded error reply.
  Result<Envelope> SendRaw(std::vector<zmq::message_t> frames) {
    RpcClient c(ctx_, server_->bound_endpoint());
    return c.CallRaw(std::move(frames), 0, 2000ms);
  }

  // Waits until the server has passed `n` replies on to its socket.
  void WaitForRepliesSent(int n) {
    MutexLock lock(&replies_mu_);
    while (replies_sent_ < n) replies_cv_.Wait(&replies_mu_);
  }

  Mutex replies_mu_;
  CondVar replies_cv_;
  int replies_sent_ GUARDED_BY(replies_mu_) = 0;
  zmq::context_t ctx_;
  std::unique_ptr<RpcServer> server_;
  static inline int n_ = 0;
};

TEST_F(RpcTest, TypedCallWithPayload) {
  StartServer();
  RpcClient c(ctx_, server_->bound_endpoint());
  Result<Pong> pong = c.Call(Ping{}, 2000ms);
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(pong->name, "s1");
  zmq::message_t payload;
  Result<ChunkData> data = c.Call(GetChunk{.dataset = "d", .index = 2, .length = 1 << 20}, 2000ms, &payload);
  ASSERT_TRUE(data.ok());
  ASSERT_EQ(payload.size(), 1u << 20);
  EXPECT_EQ(static_cast<const char*>(payload.data())[12345], 'c');
}

TEST_F(RpcTest, HandlerErrorsReachTheCallerWithTheirCode) {
  StartServer();
  RpcClient c(ctx_, server_->bound_endpoint());
  Result<ChunkData> r = c.Call(GetChunk{.dataset = "missing"}, 2000ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(r.status().message(), "dataset missing does not exist");
  EXPECT_EQ(server_->rejected(), 0u) << "a handler's answer is not malformed input";
}

TEST_F(RpcTest, GarbageGetsAnErrorReplyAndTheServerKeepsServing) {
  StartServer();
  std::vector<std::string> garbage = {
      std::string("\xc1\xc1\xc1", 3),                                   // never-used msgpack byte
      std::string("hello"),                                            // not an array
      EncodeHeader(MsgType::kPing, 1, Status::Ok(), Ping{}).substr(0, 3),  // truncated
  };
  for (const std::string& g : garbage) {
    std::vector<zmq::message_t> f;
    f.emplace_back(g.data(), g.size());
    Result<Envelope> r = SendRaw(std::move(f));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  }
  EXPECT_EQ(server_->rejected(), garbage.size());
  RpcClient c(ctx_, server_->bound_endpoint());
  EXPECT_TRUE(c.Call(Ping{}, 2000ms).ok());
}

TEST_F(RpcTest, OversizedWrongVersionUnknownAndUnservedTypes) {
  StartServer();
  std::string big(kMaxHeaderBytes + 10, '\x90');
  std::vector<zmq::message_t> f;
  f.emplace_back(big.data(), big.size());
  Result<Envelope> r = SendRaw(std::move(f));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the limit"), std::string::npos) << r.status().ToString();

  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(6).pack(kProtocolVersion + 5).pack(uint16_t(MsgType::kPing)).pack(uint64_t{77}).pack(0).pack(std::string()).pack_map(0);
  std::vector<zmq::message_t> f2;
  f2.emplace_back(buf.data(), buf.size());
  RpcClient c(ctx_, server_->bound_endpoint());
  r = c.CallRaw(std::move(f2), 77, 2000ms);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("protocol version"), std::string::npos);

  Result<DatasetListReply> unserved = c.Call(DatasetList{}, 2000ms);
  ASSERT_FALSE(unserved.ok());
  EXPECT_NE(unserved.status().message().find("DatasetList is not served by test-server"), std::string::npos);
}

TEST_F(RpcTest, ReqSocketWithDelimiterIsAnswered) {
  StartServer();
  zmq::socket_t req(ctx_, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  req.set(zmq::sockopt::rcvtimeo, 2000);
  req.connect(server_->bound_endpoint());
  std::string h = EncodeHeader(MsgType::kPing, 9, Status::Ok(), Ping{});
  req.send(zmq::buffer(h));
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(zmq::recv_multipart(req, std::back_inserter(frames)));
  uint64_t id;
  Result<Envelope> env = DecodeMessage(frames, &id);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->type, MsgType::kPong);
  EXPECT_EQ(id, 9u);
}

TEST_F(RpcTest, DeadPeerFailsWithinTheTimeout) {
  RpcClient c(ctx_, "tcp://127.0.0.1:1");  // nothing listens there
  auto start = std::chrono::steady_clock::now();
  Result<Pong> r = c.Call(Ping{}, 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_LT(took, 1500ms);
  // Never sent: not a slow server (the CLI tells the two apart).
  EXPECT_FALSE(c.last_call_answered());
  EXPECT_FALSE(c.last_call_timed_out());
}

TEST_F(RpcTest, LateRepliesAreNotMistakenForNewOnes) {
  StartServer();
  RpcClient c(ctx_, server_->bound_endpoint());
  Result<ChunkData> slow = c.Call(GetChunk{.dataset = "slow", .index = 0, .length = 10}, 100ms);
  ASSERT_EQ(slow.status().code(), Code::kUnavailable);
  // The server got it and is still working: timed out, not unreachable.
  EXPECT_TRUE(c.last_call_timed_out());
  EXPECT_FALSE(c.last_call_answered());
  // The slow reply is on its way before the next request goes out, so it
  // reaches the client first (one connection keeps the order) and waits in
  // its socket.
  WaitForRepliesSent(1);
  zmq::message_t payload;
  Result<ChunkData> fast = c.Call(GetChunk{.dataset = "fast", .index = 1, .length = 10}, 2000ms, &payload);
  ASSERT_TRUE(fast.ok());
  EXPECT_FALSE(c.last_call_timed_out());
  EXPECT_EQ(static_cast<const char*>(payload.data())[0], 'b');
}

TEST_F(RpcTest, FullQueueAnswersBusyInsteadOfQueueingForever) {
  StartServer(/*workers=*/1, /*max_queue=*/1);
  std::vector<std::thread> threads;
  std::atomic<int> busy{0}, ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      RpcClient c(ctx_, server_->bound_endpoint());
      Result<ChunkData> r = c.Call(GetChunk{.dataset = "slow", .length = 1}, 5000ms);
      EXPECT_EQ(c.last_call_busy(), !r.ok());
      if (r.ok()) ++ok;
      else if (r.status().code() == Code::kUnavailable && r.status().message().find("busy") != std::string::npos) ++busy;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(busy.load(), 1);
  EXPECT_EQ(ok.load() + busy.load(), 6);
  // A handler's own kUnavailable (say, its origin is away) is not "busy":
  // asking again at once would only repeat the handler's work.
  RpcClient c(ctx_, server_->bound_endpoint());
  Result<ChunkData> r = c.Call(GetChunk{.dataset = "away"}, 2000ms);
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_TRUE(c.last_call_answered());
  EXPECT_FALSE(c.last_call_busy());
}

TEST_F(RpcTest, AThrowingHandlerIsAnErrorReplyNotACrash) {
  server_ = std::make_unique<RpcServer>(RpcServer::Options{.endpoint = "tcp://127.0.0.1:0", .name = "thrower",
                                                           .logger = spdlog::null_logger_mt("rpc-throw"),
                                                           .context = &ctx_});
  server_->Handle<Ping>([](const Ping&, const Envelope&, std::string*) -> Result<Pong> {
    throw std::bad_alloc();
  });
  ASSERT_TRUE(server_->Start().ok());
  RpcClient c(ctx_, server_->bound_endpoint());
  for (int i = 0; i < 3; ++i) {
    Result<Pong> r = c.Call(Ping{}, 2000ms);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInternal);
  }
}

TEST_F(RpcTest, StartAndStopNeverHang) {
  // Stop used to lose its wakeup when a worker was between checking for work
  // and going to sleep; the join then waited forever.
  for (int i = 0; i < 300; ++i) {
    RpcServer s({.endpoint = "tcp://127.0.0.1:0", .name = "churn", .workers = 4,
                 .logger = spdlog::null_logger_mt("churn-" + std::to_string(i)), .context = &ctx_});
    ASSERT_TRUE(s.Start().ok());
    s.Stop();
  }
}

TEST_F(RpcTest, MalformedEndpointFailsCallsInsteadOfThrowing) {
  for (const char* bad : {"tcp://127.0.0.1", "nonsense", "tcp://:x"}) {
    RpcClient c(ctx_, bad);
    Result<Pong> r = c.Call(Ping{}, 500ms);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kUnavailable) << bad;
  }
}

TEST_F(RpcTest, PoolServesConcurrentCallers) {
  StartServer(4);
  ClientPool pool(ctx_);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto lease = pool.Acquire(server_->bound_endpoint());
        zmq::message_t payload;
        auto r = lease->Call(GetChunk{.dataset = "d", .index = uint32_t(t), .length = 100}, 2000ms, &payload);
        if (r.ok() && payload.size() == 100 && static_cast<const char*>(payload.data())[99] == 'a' + t) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 400);
}

// Idle clients are capped per endpoint and in all (each holds sockets of a
// context that has 1,023): past the cap the least recently used one closes.
TEST_F(RpcTest, PoolKeepsFewIdleClientsAndClosesTheLeastRecentlyUsed) {
  ClientPool pool(ctx_, /*max_idle_per_endpoint=*/2, 500ms, /*max_idle=*/3);
  const std::string e1 = "tcp://127.0.0.1:1", e2 = "tcp://127.0.0.1:2", e3 = "tcp://127.0.0.1:3",
                    e4 = "tcp://127.0.0.1:4";
  {
    auto a = pool.Acquire(e1);
    auto b = pool.Acquire(e1);
    auto c = pool.Acquire(e1);
  }
  EXPECT_EQ(pool.idle(e1), 2u);
  { auto x = pool.Acquire(e2); }
  EXPECT_EQ(pool.idle(), 3u);
  { auto y = pool.Acquire(e3); }
  EXPECT_EQ(pool.idle(), 3u);
  EXPECT_EQ(pool.idle(e1), 1u) << "e1's oldest was the least recently used";
  { auto z = pool.Acquire(e4); }
  EXPECT_EQ(pool.idle(e1), 0u);
  EXPECT_EQ(pool.idle(e2), 1u);
  EXPECT_EQ(pool.idle(e3), 1u);
  EXPECT_EQ(pool.idle(e4), 1u);
  {
    auto again = pool.Acquire(e2);  // reuses the idle one
    EXPECT_EQ(pool.idle(e2), 0u);
    EXPECT_EQ(pool.idle(), 2u);
  }
  // e2 is now the most recent: a new endpoint pushes out e3, the oldest.
  { auto w = pool.Acquire(e1); }
  EXPECT_EQ(pool.idle(e3), 0u);
  EXPECT_EQ(pool.idle(e2), 1u);
  EXPECT_EQ(pool.idle(e1), 1u);
}

// A peer in another process that takes one request and never answers it; the
// test then kills or stops that process while the call waits.
class SilentPeer {
 public:
  SilentPeer() {
    int to_parent[2];
    if (::pipe(to_parent) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_parent[0]);
      zmq::context_t ctx;  // never the parent's: its threads did not survive fork()
      zmq::socket_t router(ctx, zmq::socket_type::router);
      ConfigureSocket(router);
      router.bind("tcp://127.0.0.1:0");
      std::string ep = router.get(zmq::sockopt::last_endpoint);
      uint16_t port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
      (void)!::write(to_parent[1], &port, sizeof port);
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(router, std::back_inserter(frames));
      (void)!::write(to_parent[1], "r", 1);
      while (true) ::pause();
    }
    ::close(to_parent[1]);
    fd_ = to_parent[0];
    uint16_t port = 0;
    if (::read(fd_, &port, sizeof port) == sizeof port) endpoint_ = "tcp://127.0.0.1:" + std::to_string(port);
  }
  ~SilentPeer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& endpoint() const { return endpoint_; }
  // Sends `sig` to the peer once it holds a request.
  std::thread SignalWhenItHoldsARequest(int sig) {
    return std::thread([this, sig] {
      char c;
      if (::read(fd_, &c, 1) == 1) ::kill(pid_, sig);
    });
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string endpoint_;
};

// A caller waiting on a peer that dies must not wait out its timeout (meant
// for a slow but live peer): the mount then tries the next copy at once.
TEST(RpcDeadPeerTest, APeerKilledMidCallFailsTheCallAtOnce) {
  SilentPeer peer;
  ASSERT_FALSE(peer.endpoint().empty());
  zmq::context_t ctx;
  RpcClient c(ctx, peer.endpoint());
  std::thread killer = peer.SignalWhenItHoldsARequest(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  Result<Pong> r = c.Call(Ping{}, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  killer.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_LT(took, 1s);
}

// A TCP relay that passes the server's bytes on at `rate` bytes/s: a slow or
// congested link between two live hosts.
class SlowLink {
 public:
  SlowLink(std::string target, size_t rate) : target_(std::move(target)), rate_(rate) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listen_, 1) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowLink() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(listen_);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Run() {
    int client = ::accept(listen_, nullptr, nullptr);
    if (client < 0) return;
    const std::string hostport = target_.substr(target_.rfind('/') + 1);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(hostport.substr(hostport.rfind(':') + 1))));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int server = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    char buf[16 << 10];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      if (fds[0].revents & (POLLIN | POLLHUP)) {
        ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0 || ::write(server, buf, n) != n) break;
      }
      if (fds[1].revents & (POLLIN | POLLHUP)) {
        ssize_t n = ::read(server, buf, sizeof buf);
        if (n <= 0 || ::write(client, buf, n) != n) break;
        std::this_thread::sleep_for(std::chrono::microseconds(1'000'000 * n / rate_));
      }
    }
    ::close(client);
    ::close(server);
  }

  std::string target_;
  size_t rate_;
  int listen_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A large reply that takes seconds to arrive over a slow link comes from a
// live peer: the connection must not be dropped as if the peer were gone
// (libzmq's own heartbeats would do that: they count only whole frames).
TEST_F(RpcTest, ALargeReplyOverASlowLinkArrives) {
  StartServer();
  SlowLink link(server_->bound_endpoint(), 1 << 20);  // 1 MiB/s
  ASSERT_FALSE(link.endpoint().empty());
  RpcClient c(ctx_, link.endpoint());
  zmq::message_t payload;
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Call(GetChunk{.dataset = "d", .index = 2, .length = 4 << 20}, 30s, &payload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(payload.size(), 4u << 20);
  EXPECT_EQ(static_cast<const char*>(payload.data())[(4 << 20) - 1], 'c');
  EXPECT_GT(std::chrono::steady_clock::now() - start, 3s) << "the link was not slow";
}

// A live peer that takes its time (reading through from a slow origin) keeps
// its connection: heartbeats are answered by its I/O thread.
TEST_F(RpcTest, ASlowButLivePeerIsWaitedFor) {
  server_ = std::make_unique<RpcServer>(RpcServer::Options{
      .endpoint = "tcp://127.0.0.1:0", .name = "slow", .workers = 1,
      .logger = spdlog::null_logger_mt("rpc-test-slow"), .context = &ctx_});
  server_->Handle<Ping>([](const Ping&, const Envelope&, std::string*) {
    std::this_thread::sleep_for(3s);
    return Result<Pong>(Pong{.role = "test"});
  });
  ASSERT_TRUE(server_->Start().ok());
  RpcClient c(ctx_, server_->bound_endpoint());
  Result<Pong> r = c.Call(Ping{}, 10s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->role, "test");
}

}  // namespace
}  // namespace hoard::proto
