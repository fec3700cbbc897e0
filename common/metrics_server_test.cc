#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/testing.h"

namespace hoard::metrics {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A raw TCP client: the server must cope with whatever a socket can do.
class Conn {
 public:
  explicit Conn(const std::string& address) {
    std::string host;
    uint16_t port = 0;
    EXPECT_TRUE(SplitHostPort(address, &host, &port).ok());
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  }
  ~Conn() { ::close(fd_); }
  bool connected() const { return connected_; }
  void Send(const std::string& s) { (void)!::send(fd_, s.data(), s.size(), MSG_NOSIGNAL); }
  // Everything until the server closes, or until `limit` passes.
  std::string ReadAll(milliseconds limit = milliseconds(5000)) {
    std::string out;
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const int left = int(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 1)) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, size_t(n));
    }
    return out;
  }
  bool closed() const { return closed_; }
  // Whether the server has sent something (or closed) within `limit`, not
  // consuming it: the event a test waits for instead of sleeping.
  bool Readable(milliseconds limit = milliseconds(5000)) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, int(limit.count())) == 1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

// This process's open descriptors: the server's and the test's own.
size_t OpenFds() {
  const std::filesystem::directory_iterator fds("/proc/self/fd");
  return size_t(std::distance(std::filesystem::begin(fds), std::filesystem::end(fds)));
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void StartServer(milliseconds timeout = milliseconds(5000), size_t max_connections = 64) {
    registry_.AddCounter("hoard_test_total", "A test counter", {}, &counter_);
    auto s = MetricsServer::Start({.address = "127.0.0.1:0",
                                   .render = [this] { return registry_.Render(); },
                                   .logger = spdlog::default_logger(),
                                   .timeout = timeout,
                                   .max_request_bytes = 1024,
                                   .max_connections = max_connections});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  std::string Get(const std::string& request) {
    Conn c(server_->address());
    EXPECT_TRUE(c.connected());
    c.Send(request);
    return c.ReadAll();
  }

  Registry registry_;
  Counter counter_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesMetricsOnAFreePort) {
  StartServer();
  EXPECT_NE(server_->address(), "127.0.0.1:0");
  counter_.Add(42);
  const std::string r = Get("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\n# HELP hoard_test_total A test counter\n# TYPE hoard_test_total counter\n"
                   "hoard_test_total 42\n"),
            std::string::npos)
      << r;
  // A query string (some scrapers add one) is ignored.
  EXPECT_EQ(Get("GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
}

TEST_F(MetricsServerTest, AnythingElseIs404Or400) {
  StartServer();
  EXPECT_EQ(Get("GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  EXPECT_EQ(Get("GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  EXPECT_EQ(Get("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  EXPECT_EQ(Get("hello\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(Get(std::string("GET /metrics\0 HTTP/1.1\r\n\r\n", 26)).rfind("HTTP/1.1 404 ", 0), 0u);
}

TEST_F(MetricsServerTest, OversizedRequestGets431AndIsClosed) {
  StartServer();
  Conn c(server_->address());
  c.Send("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(4096, 'a'));
  const std::string r = c.ReadAll();
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r;
  EXPECT_TRUE(c.closed());
}

TEST_F(MetricsServerTest, SlowClientDoesNotBlockOthersAndIsCutOff) {
  StartServer(milliseconds(300));
  Conn slow(server_->address());
  slow.Send("GET /met");  // and then nothing
  const auto t0 = Clock::now();
  EXPECT_EQ(Get("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_LT(Clock::now() - t0, milliseconds(250));  // not behind the slow one
  EXPECT_EQ(slow.ReadAll(milliseconds(3000)), "");
  EXPECT_TRUE(slow.closed());  // by the deadline, not by the 3 s limit here
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
}

TEST_F(MetricsServerTest, AtTheLimitTheLongestWaitingConnectionMakesRoom) {
  StartServer(milliseconds(5000), /*max_connections=*/2);
  // One listen queue: a, b and c are accepted in this order, whenever that is.
  Conn a(server_->address()), b(server_->address());
  b.Send("GET /met");  // b has begun its request, a has sent nothing; a has waited longer
  Conn c(server_->address());
  c.Send("GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(c.ReadAll().rfind("HTTP/1.1 200 OK", 0), 0u);  // admitted at once, not after a deadline
  EXPECT_EQ(a.ReadAll(), "");
  EXPECT_TRUE(a.closed());  // closed to make room for c
  // b was kept: it finishes its request and is answered.
  b.Send("rics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(b.ReadAll().rfind("HTTP/1.1 200 OK", 0), 0u);
}

TEST_F(MetricsServerTest, ThousandIdleConnectionsDoNotStarveScrapes) {
  // The default deadline (5 s) and limit (64): idle connections that kept
  // their slots would refuse every scrape below for the whole test.
  StartServer();
  const size_t fds_before = OpenFds();
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<Conn>(server_->address()));
    ASSERT_TRUE(idle.back()->connected()) << i;
    if (i % 2 == 1) idle.back()->Send("GET /met");  // a request line that never ends; the others send nothing
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i) {
    const auto t = Clock::now();
    const std::string r = Get("GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u) << "scrape " << i << ": '" << r << "'";
    EXPECT_LT(Clock::now() - t, milliseconds(1000)) << "scrape " << i;
  }
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));  // 10 scrapes: well over a few a second
  // The oldest idle connections were closed to make room, so the server
  // holds at most 64 of the 1,000 (the test holds all 1,000 client ends).
  EXPECT_EQ(idle.front()->ReadAll(milliseconds(1000)), "");
  EXPECT_TRUE(idle.front()->closed());
  EXPECT_LE(OpenFds(), fds_before + 1000 + 64);
  // Once the clients go, so do the server's ends of their connections.
  idle.clear();
  EXPECT_TRUE(testing::Eventually([&] { return OpenFds() == fds_before; })) << OpenFds() << " vs " << fds_before;
  EXPECT_EQ(Get("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_TRUE(testing::Eventually([&] { return OpenFds() == fds_before; })) << OpenFds() << " vs " << fds_before;
}

TEST(MetricsServerLimitTest, AnAnswerInProgressMakesRoomOnlyWhenNoConnectionWaitsForItsRequest) {
  // An answer far larger than the socket buffers (the server's send buffer
  // grows to 4 MiB at most here) stays in progress while its client reads
  // nothing.
  const size_t body = 16 << 20;
  auto s = MetricsServer::Start({.address = "127.0.0.1:0",
                                 .render = [body] { return std::string(body, 'x'); },
                                 .logger = spdlog::default_logger(),
                                 .timeout = milliseconds(10000),
                                 .max_connections = 2});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string address = (*s)->address();
  auto whole = [&](const std::string& r) { return r.rfind("HTTP/1.1 200 OK", 0) == 0 && r.size() > body; };
  {
    Conn slow(address);
    slow.Send("GET /metrics HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(slow.Readable());  // being answered
    Conn idle(address);
    Conn c(address);  // the idle one makes room, not the answer in progress
    c.Send("GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(whole(c.ReadAll()));
    EXPECT_EQ(idle.ReadAll(), "");
    EXPECT_TRUE(idle.closed());
    EXPECT_TRUE(whole(slow.ReadAll()));
  }
  {
    // Every slot held by a client that does not read its answer: the
    // oldest answer is cut off, so slow readers cannot refuse scrapes either.
    Conn slow1(address), slow2(address);
    slow1.Send("GET /metrics HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(slow1.Readable());
    slow2.Send("GET /metrics HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(slow2.Readable());
    Conn c(address);
    c.Send("GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(whole(c.ReadAll()));
    const std::string cut = slow1.ReadAll();
    EXPECT_TRUE(slow1.closed());
    EXPECT_LT(cut.size(), body);
    EXPECT_TRUE(whole(slow2.ReadAll()));
  }
}

TEST(MetricsServerStartTest, BadAddressesAreRefused) {
  auto start = [](const std::string& address) {
    return MetricsServer::Start({.address = address, .render = [] { return std::string(); },
                                 .logger = spdlog::default_logger()})
        .status();
  };
  EXPECT_EQ(start("127.0.0.1").code(), Code::kInvalidArgument);
  EXPECT_EQ(start("127.0.0.1:99999").code(), Code::kInvalidArgument);
  EXPECT_EQ(start("127.0.0.1:http").code(), Code::kInvalidArgument);
  EXPECT_EQ(start(":80").code(), Code::kInvalidArgument);
  EXPECT_EQ(start("no-such-host.invalid:0").code(), Code::kInvalidArgument);
  auto first = MetricsServer::Start({.address = "127.0.0.1:0", .render = [] { return std::string(); },
                                     .logger = spdlog::default_logger()});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(start((*first)->address()).code(), Code::kUnavailable);  // in use
}

TEST(ServeMetricsTest, EmptyAddressIsOffElseTheAddressIsWrittenDown) {
  Registry registry;
  auto off = ServeMetrics("", &registry, spdlog::default_logger(), "/nonexistent/x");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->get(), nullptr);
  testing::TempDir dir;
  auto on = ServeMetrics("127.0.0.1:0", &registry, spdlog::default_logger(), dir.Sub("metrics.addr"));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  Result<std::string> written = ReadFile(dir.Sub("metrics.addr"));
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, (*on)->address() + "\n");
}

}  // namespace
}  // namespace hoard::metrics
