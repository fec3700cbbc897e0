// CURVE on a real coordinator and node agent (in this process): strangers get
// nothing, members read, the admin changes, and the bytes on the wire are not
// the bytes of the file.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <filesystem>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "common/testing.h"
#include "common/mutex.h"
#include "testing/test_cluster.h"
#include "proto/curve.h"
#include "proto/rpc_client.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

int PortOf(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

// A CURVE keypair nobody in the cluster knows.
std::pair<std::string, std::string> StrangerKeys() {
  char pub[41], secret[41];
  EXPECT_EQ(zmq_curve_keypair(pub, secret), 0);
  return {pub, secret};
}

// Sends one well-formed request from a plain cppzmq DEALER (no hoard code
// makes or configures the connection) and returns the first reply frame, or
// nothing after `wait`. `curve` = {server key, client public, client secret}.
std::optional<std::string> RawRequest(const std::string& endpoint, const std::string& request,
                                      const std::optional<std::array<std::string, 3>>& curve,
                                      std::chrono::milliseconds wait = 1000ms) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (curve) {
    s.set(zmq::sockopt::curve_serverkey, (*curve)[0]);
    s.set(zmq::sockopt::curve_publickey, (*curve)[1]);
    s.set(zmq::sockopt::curve_secretkey, (*curve)[2]);
  }
  s.connect(endpoint);
  s.send(zmq::buffer(request), zmq::send_flags::dontwait);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, wait);
  if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
  std::vector<zmq::message_t> frames;
  if (!zmq::recv_multipart(s, std::back_inserter(frames)) || frames.empty()) return std::nullopt;
  return frames[0].to_string();
}

// A TCP relay to 127.0.0.1:target_port that keeps every byte it passes on,
// both ways: what an eavesdropper on the link would see. It listens on
// 127.0.0.2 (still loopback), on `listen_port` if given: a client that dialed
// the node's port on 127.0.0.2 finds the data channel's port there too.
class TapProxy {
 public:
  explicit TapProxy(int target_port, int listen_port = 0) : target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
    a.sin_port = htons(listen_port);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_fd_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TapProxy() {
    stop_ = true;
    thread_.join();
    for (auto [c, t] : pairs_) {
      ::close(c);
      ::close(t);
    }
    ::close(listen_fd_);
  }
  std::string endpoint() const { return "tcp://127.0.0.2:" + std::to_string(port_); }
  std::string captured() {
    MutexLock lock(&mu_);
    return captured_;
  }

 private:
  void Run() {
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (auto [c, t] : pairs_) {
        fds.push_back({c, POLLIN, 0});
        fds.push_back({t, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) Accept();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [c, t] = pairs_[(i - 1) / 2];
        int from = (i % 2 == 1) ? c : t, to = (i % 2 == 1) ? t : c;
        char buf[65536];
        ssize_t n = ::read(from, buf, sizeof buf);
        if (n <= 0) {
          ::shutdown(to, SHUT_WR);
          continue;
        }
        {
          MutexLock lock(&mu_);
          captured_.append(buf, n);
        }
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::write(to, buf + off, n - off);
          if (w <= 0) break;
          off += w;
        }
      }
    }
  }
  void Accept() {
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    int t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_port_);
    if (::connect(t, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(c);
      ::close(t);
      return;
    }
    pairs_.push_back({c, t});
  }

  int target_port_, port_ = 0, listen_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<std::pair<int, int>> pairs_;  // the thread's (client, target)
  Mutex mu_;
  std::string captured_;  // guarded by mu_
};

class SecurityTest : public ::testing::Test {
 protected:
  // A cluster of a coordinator and one node, with keys unless `secure` is false.
  void StartCluster(bool secure = true) {
    ASSERT_FALSE(tmp_.path().empty());
    keys_ = tmp_.Sub("keys");
    ASSERT_TRUE(proto::GenerateKeys(keys_).ok());
    cluster_ = std::make_unique<testing::TestCluster>(tmp_.Sub("cluster"));
    if (secure) {
      Result<proto::CurveKeys> k = proto::LoadDaemonKeys(keys_);
      ASSERT_TRUE(k.ok()) << k.status().ToString();
      auto s = proto::CurveSecurity::Enable(cluster_->zmq(), *k, cluster_->logger());
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      security_ = std::move(*s);
    }
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_TRUE(cluster_->origin().AddFile("secret.bin", file_).ok());
    Result<NodeAgent*> a = cluster_->StartAgent("node1");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    node_ = *a;
    ASSERT_TRUE(Eventually([&] {
      auto st = cluster_->coordinator().GetStatus("");
      return st.ok() && st->nodes.size() == 1 && st->nodes[0].up;
    }));
  }

  void TearDown() override {
    // Servers first, then their ZAP handler, then the context (in cluster_).
    if (cluster_) {
      cluster_->StopAgent("node1");
      cluster_->StopCoordinator();
    }
    security_.reset();
    cluster_.reset();
  }

  // Keys as the CLI would load them from a directory holding only `files`.
  proto::CurveKeys ClientKeys(const std::vector<std::string>& files) {
    const std::string dir = tmp_.Sub("client-" + std::to_string(++clients_));
    EXPECT_TRUE(MakeDirs(dir).ok());
    for (const std::string& f : files) {
      std::filesystem::copy_file(JoinPath(keys_, f), JoinPath(dir, f));
    }
    Result<proto::CurveKeys> k = proto::LoadClientKeys(dir);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    return k.ok() ? *k : proto::CurveKeys{};
  }

  std::string header(proto::MsgType type, const auto& body) { return proto::EncodeHeader(type, 7, Status::Ok(), body); }

  testing::TempDir tmp_{"hoard-security"};
  std::string keys_;
  std::string file_ = testing::PseudoRandomBytes(200000, 7);
  std::unique_ptr<testing::TestCluster> cluster_;
  std::unique_ptr<proto::CurveSecurity> security_;
  NodeAgent* node_ = nullptr;
  int clients_ = 0;
};

TEST_F(SecurityTest, AClientWithoutTheClusterKeyGetsNothing) {
  StartCluster();
  const std::string cluster_pub = security_->keys().server_public;
  const auto [stranger_pub, stranger_secret] = StrangerKeys();
  const proto::CurveKeys member = ClientKeys({"cluster.key"});
  struct Target {
    std::string name, endpoint, request;
  };
  const std::vector<Target> targets = {
      {"coordinator", cluster_->endpoint(), header(proto::MsgType::kPing, proto::Ping{})},
      {"coordinator", cluster_->endpoint(), header(proto::MsgType::kClusterStatus, proto::ClusterStatus{})},
      {"node", node_->endpoint(), header(proto::MsgType::kPing, proto::Ping{})},
      {"node", node_->endpoint(), header(proto::MsgType::kGetChunk, proto::GetChunk{.dataset = "ds"})},
  };
  for (const Target& t : targets) {
    SCOPED_TRACE(t.name);
    EXPECT_FALSE(RawRequest(t.endpoint, t.request, std::nullopt)) << "no CURVE at all";
    EXPECT_FALSE(RawRequest(t.endpoint, t.request, std::array{cluster_pub, stranger_pub, stranger_secret}))
        << "CURVE with a key the cluster does not know";
    EXPECT_FALSE(RawRequest(t.endpoint, t.request, std::array{stranger_pub, member.client_public,
                                                                member.client_secret}))
        << "the member key, but a server key that is not the cluster's";
    // The same raw client with the cluster key is answered: the refusals
    // above are the keys', not the raw client's.
    std::optional<std::string> ok =
        RawRequest(t.endpoint, t.request, std::array{cluster_pub, member.client_public, member.client_secret}, 10s);
    ASSERT_TRUE(ok.has_value());
    uint64_t id = 0;
    std::vector<zmq::message_t> frames;
    frames.emplace_back(ok->data(), ok->size());
    EXPECT_TRUE(proto::DecodeMessage(frames, &id).ok());
    EXPECT_EQ(id, 7u);
  }
  EXPECT_GE(security_->refused(), 4u) << "the ZAP handler refused the strangers";
  // And the servers still serve members.
  proto::RpcClient c(cluster_->zmq(), node_->endpoint());
  EXPECT_TRUE(c.Call(proto::Ping{}, 2s).ok());
  proto::RpcClient coord(cluster_->zmq(), cluster_->endpoint());
  EXPECT_TRUE(coord.Call(proto::ClusterStatus{}, 2s).ok());
}

TEST_F(SecurityTest, MembersReadAndOnlyTheAdminChangesTheCluster) {
  StartCluster();
  ASSERT_TRUE(cluster_->coordinator()
                  .AddDataset({.name = "ds", .source = cluster_->source(), .chunk_size = 65536})
                  .ok());
  // A separate process's view: its own context, its own keys.
  zmq::context_t member_ctx, admin_ctx;
  auto member = proto::CurveSecurity::Enable(member_ctx, ClientKeys({"cluster.key", "cluster.pub"}),
                                             cluster_->logger());
  auto admin = proto::CurveSecurity::Enable(admin_ctx, ClientKeys({"cluster.pub", "admin.key"}), cluster_->logger());
  ASSERT_TRUE(member.ok() && admin.ok());
  EXPECT_FALSE((*member)->keys().admin_client);
  EXPECT_TRUE((*admin)->keys().admin_client);
  {
    proto::RpcClient m(member_ctx, cluster_->endpoint());
    Result<proto::ClusterStatusReply> st = m.Call(proto::ClusterStatus{}, 2s);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(st->datasets.size(), 1u);
    Result<proto::DatasetRemoveReply> rm = m.Call(proto::DatasetRemove{.name = "ds"}, 2s);
    EXPECT_EQ(rm.status().code(), Code::kPermissionDenied);
    EXPECT_EQ(rm.status().message(), "DatasetRemove needs the admin key; this connection has the member key");
    Result<proto::NodeDrainReply> drain = m.Call(proto::NodeDrain{.name = "node1", .drain = true}, 2s);
    EXPECT_EQ(drain.status().code(), Code::kPermissionDenied);
    EXPECT_EQ(m.Call(proto::DatasetRefresh{.name = "ds"}, 2s).status().code(), Code::kPermissionDenied);
    // Warming is a member's (job hooks pre-warm without the admin key).
    Result<proto::WarmReply> warmed = m.Call(proto::Warm{.name = "ds"}, 2s);
    EXPECT_TRUE(warmed.ok()) << warmed.status().ToString();
    EXPECT_FALSE(cluster_->coordinator().GetStatus("")->nodes[0].draining) << "nothing changed";
    // The node agent serves members (mounts and peers are members).
    proto::RpcClient n(member_ctx, node_->endpoint());
    EXPECT_TRUE(n.Call(proto::NodeStatus{}, 2s).ok());

    proto::RpcClient a(admin_ctx, cluster_->endpoint());
    // The admin passes the access check; the cluster's one node, though,
    // cannot be drained while it holds a dataset (a refusal, not a denial).
    Result<proto::NodeDrainReply> drained = a.Call(proto::NodeDrain{.name = "node1", .drain = true}, 2s);
    EXPECT_EQ(drained.status().code(), Code::kInvalidArgument) << drained.status().ToString();
    EXPECT_TRUE(a.Call(proto::NodeDrain{.name = "node1", .drain = false}, 2s).ok());
    Result<proto::DatasetRemoveReply> removed = a.Call(proto::DatasetRemove{.name = "ds"}, 2s);
    EXPECT_TRUE(removed.ok()) << removed.status().ToString();
    EXPECT_TRUE(a.Call(proto::ClusterStatus{}, 2s).ok()) << "the admin reads too";
  }
  member->reset();
  admin->reset();
}

// The client key (job hooks, users): reads, warm-ups and leases; never a
// node's or an operator's requests, whatever the request says.
TEST_F(SecurityTest, TheClientKeyWarmsLeasesAndReadsOnly) {
  StartCluster();
  ASSERT_TRUE(cluster_->coordinator()
                  .AddDataset({.name = "ds", .source = cluster_->source(), .chunk_size = 65536})
                  .ok());
  zmq::context_t client_ctx;
  proto::CurveKeys keys = ClientKeys({"cluster.pub", "client.key"});
  EXPECT_EQ(keys.key_class, proto::KeyClass::kClient);
  auto client = proto::CurveSecurity::Enable(client_ctx, keys, cluster_->logger());
  ASSERT_TRUE(client.ok());
  {
    proto::RpcClient c(client_ctx, cluster_->endpoint());
    EXPECT_TRUE(c.Call(proto::ClusterStatus{}, 2s).ok());
    EXPECT_TRUE(c.Call(proto::DatasetList{}, 2s).ok());
    EXPECT_TRUE(c.Call(proto::Warm{.name = "ds"}, 2s).ok());
    Result<proto::LeaseTakeReply> lease = c.Call(proto::LeaseTake{.dataset = "ds", .job = "42", .ttl_s = 60}, 2s);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ(lease->lease.key_class, "client");
    EXPECT_TRUE(c.Call(proto::LeaseRelease{.job = "42"}, 2s).ok());

    Result<proto::RegisterNodeReply> reg =
        c.Call(proto::RegisterNode{.name = "intruder", .endpoint = "tcp://127.0.0.1:1"}, 2s);
    EXPECT_EQ(reg.status().code(), Code::kPermissionDenied);
    EXPECT_EQ(reg.status().message(),
              "RegisterNode needs a member key (cluster.key) or the admin key; this connection has the client key");
    EXPECT_EQ(c.Call(proto::Heartbeat{.name = "node1"}, 2s).status().code(), Code::kPermissionDenied);
    EXPECT_EQ(c.Call(proto::CkptCommit{}, 2s).status().code(), Code::kPermissionDenied);
    EXPECT_EQ(c.Call(proto::CkptCreate{}, 2s).status().code(), Code::kPermissionDenied);
    EXPECT_EQ(c.Call(proto::DatasetAdd{.name = "x", .source = cluster_->source()}, 2s).status().code(),
              Code::kPermissionDenied);
    EXPECT_EQ(c.Call(proto::DatasetRemove{.name = "ds"}, 2s).status().code(), Code::kPermissionDenied);
    EXPECT_EQ(cluster_->coordinator().GetStatus("")->nodes.size(), 1u) << "no node was registered";
    // The node agent: status yes, chunks no (a client is no mount or peer).
    proto::RpcClient n(client_ctx, node_->endpoint());
    EXPECT_TRUE(n.Call(proto::NodeStatus{}, 2s).ok());
    EXPECT_EQ(n.Call(proto::GetChunk{.dataset = "ds"}, 2s).status().code(), Code::kPermissionDenied);
  }
  client->reset();
}

// What crossed the wire for one chunk: on the node's port, on its data
// channel's (if it has one), and whether the client used the data channel.
struct Wire {
  std::string control, data;
  bool on_data_channel = false;
};

// Fetches the first chunk of secret.bin from the node through TapProxies.
Wire CaptureChunkTransfer(testing::TestCluster& cluster, NodeAgent* node, const std::string& file) {
  auto meta = cluster.coordinator().AddDataset({.name = "ds", .source = cluster.source(), .chunk_size = 65536});
  EXPECT_TRUE(meta.ok());
  EXPECT_TRUE(Eventually([&] { return node->view()->dataset("ds") != nullptr; }));
  auto view = node->view();
  const DatasetView* ds = view->dataset("ds");
  const uint32_t entry = *ds->manifest.Resolve("secret.bin");
  const ChunkKey key = ds->manifest.chunk_key(entry, 0);
  TapProxy tap(PortOf(node->endpoint()));
  std::unique_ptr<TapProxy> data_tap;
  if (!node->data_endpoint().empty()) {
    data_tap = std::make_unique<TapProxy>(PortOf(node->data_endpoint()), PortOf(node->data_endpoint()));
  }
  proto::RpcClient c(cluster.zmq(), tap.endpoint());
  zmq::message_t payload;
  auto r = c.Call(proto::GetChunk{.dataset = "ds", .uid = meta->meta.uid, .version = meta->meta.version,
                                  .entry = entry, .index = 0, .key_lo = key.file.lo, .key_hi = key.file.hi},
                  5s, &payload);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::string(static_cast<const char*>(payload.data()), payload.size()), file.substr(0, 65536))
      << "the proxy passes the bytes on unchanged";
  return {tap.captured(), data_tap ? data_tap->captured() : "", c.on_data_channel()};
}

// How many 32-byte slices of the chunk (one every 2 KiB) appear in `wire`.
int SlicesInClear(const std::string& wire, const std::string& file) {
  int found = 0;
  for (size_t off = 0; off + 32 <= 65536; off += 2048) found += wire.find(file.substr(off, 32)) != std::string::npos;
  return found;
}

TEST_F(SecurityTest, AChunkCrossesTheWireEncrypted) {
  StartCluster();
  const Wire wire = CaptureChunkTransfer(*cluster_, node_, file_);
  ASSERT_FALSE(node_->data_endpoint().empty());
  EXPECT_TRUE(wire.on_data_channel);
  ASSERT_GT(wire.data.size(), 65536u) << "the chunk went through the data channel's proxy";
  EXPECT_NE(wire.control.find("CURVE"), std::string::npos) << "the ZMTP greeting names the mechanism";
  EXPECT_EQ(wire.data.find("CURVE"), std::string::npos) << "the data channel is sealed, not CURVE";
  for (const std::string& w : {wire.control, wire.data}) {
    EXPECT_EQ(SlicesInClear(w, file_), 0);
    EXPECT_EQ(w.find("secret.bin"), std::string::npos);
  }
}

TEST_F(SecurityTest, WithoutKeysTheSameTransferIsInClear) {
  // The control for the test above: its check can fail.
  StartCluster(/*secure=*/false);
  const Wire wire = CaptureChunkTransfer(*cluster_, node_, file_);
  EXPECT_TRUE(node_->data_endpoint().empty()) << "plain sockets need no data channel";
  EXPECT_FALSE(wire.on_data_channel);
  EXPECT_EQ(wire.control.find("CURVE"), std::string::npos);
  EXPECT_EQ(SlicesInClear(wire.control, file_), 32);
}

}  // namespace
}  // namespace hoard
