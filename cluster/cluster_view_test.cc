// ClusterWatcher against a coordinator that is slow to send its map.
#include "cluster/cluster_view.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/testing.h"
#include "proto/rpc_server.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

// A node's request path asking for a refresh while the background sync waits
// on a slow map (or manifest) download goes on at once with the view it has,
// rather than hold a worker for the whole download; a mount's lookup waits
// for that sync, which brings what it looks for.
TEST(ClusterWatcherTest, ARequestRefreshWaitsForASyncInProgressOnlyWhenAsked) {
  zmq::context_t ctx;
  auto log = spdlog::null_logger_mt("cluster-view-test");
  std::atomic<int> maps{0}, pings{0};
  // The first map download lasts until the lookup's refresh (the second
  // ping) asks: the request path's refresh comes while it is in progress.
  hoard::testing::Gate download_ends;
  proto::RpcServer server(proto::RpcServer::Options{
      .endpoint = "tcp://127.0.0.1:0", .name = "coordinator", .workers = 2, .logger = log, .context = &ctx});
  server.Handle<proto::Ping>([&](const proto::Ping&, const proto::Envelope&, std::string*) {
    if (pings.fetch_add(1) == 1) download_ends.Open();
    return Result<proto::Pong>(proto::Pong{.role = "coordinator", .name = "c", .epoch = 2});
  });
  server.Handle<proto::GetClusterMap>([&](const proto::GetClusterMap&, const proto::Envelope&, std::string*) {
    if (maps.fetch_add(1) == 0) EXPECT_TRUE(download_ends.WaitFor(10s));
    return Result<proto::ClusterMap>(proto::ClusterMap{.epoch = 2});
  });
  ASSERT_TRUE(server.Start().ok());
  hoard::testing::TempDir dir("hoard-cluster-view");
  ClusterWatcher watcher(ClusterWatcher::Options{
      .coordinator = server.bound_endpoint(), .cache_dir = dir.path(), .timeout = 10s, .logger = log,
      .context = &ctx});
  std::thread slow([&] { EXPECT_TRUE(watcher.Sync().ok()); });
  ASSERT_TRUE(hoard::testing::Eventually([&] { return maps.load() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  const Status s = watcher.RefreshForRequest(ClusterWatcher::SyncInProgress::kDontWait, 300ms, 0ms);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_LT(waited, 1s) << "waited for the other thread's sync";
  // A lookup's refresh waits, and finds the map that sync fetched.
  EXPECT_TRUE(watcher.RefreshForRequest(ClusterWatcher::SyncInProgress::kWait, 300ms, 0ms).ok());
  EXPECT_EQ(watcher.Current()->epoch(), 2u);
  EXPECT_EQ(maps.load(), 1) << "the waiting refresh needed no map of its own";
  slow.join();
  EXPECT_TRUE(watcher.RefreshForRequest(ClusterWatcher::SyncInProgress::kDontWait, 300ms, 0ms).ok());
}

// A mount's polls name it (node, mountpoint, this build): what the
// coordinator lists in `hoard status`. A node agent's name nothing.
TEST(ClusterWatcherTest, AMountsPollsNameItAndItsBuild) {
  zmq::context_t ctx;
  auto log = spdlog::null_logger_mt("cluster-view-mount-test");
  Mutex mu;
  std::vector<proto::MountInfo> heard;
  proto::RpcServer server(proto::RpcServer::Options{
      .endpoint = "tcp://127.0.0.1:0", .name = "coordinator", .workers = 1, .logger = log, .context = &ctx});
  server.Handle<proto::Ping>([&](const proto::Ping& p, const proto::Envelope&, std::string*) {
    MutexLock lock(&mu);
    heard.push_back(p.mount);
    return Result<proto::Pong>(proto::Pong{.role = "coordinator", .name = "c", .epoch = 0});
  });
  server.Handle<proto::GetClusterMap>([&](const proto::GetClusterMap&, const proto::Envelope&, std::string*) {
    return Result<proto::ClusterMap>(proto::ClusterMap{.epoch = 1});
  });
  ASSERT_TRUE(server.Start().ok());
  hoard::testing::TempDir dir("hoard-cluster-view");
  const std::string deep = "/mnt/" + std::string(2000, 'd');  // longer than a Ping may carry
  for (const proto::MountInfo& mount : {proto::MountInfo{.node = "node1", .mountpoint = "/mnt/hoard"},
                                        proto::MountInfo{.mountpoint = deep}, proto::MountInfo{}}) {
    ClusterWatcher watcher(ClusterWatcher::Options{.coordinator = server.bound_endpoint(),
                                                   .mount = mount,
                                                   .cache_dir = dir.path(),
                                                   .timeout = 10s,
                                                   .logger = log,
                                                   .context = &ctx});
    ASSERT_TRUE(watcher.Poll().ok());
  }
  MutexLock lock(&mu);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[0].node, "node1");
  EXPECT_EQ(heard[0].mountpoint, "/mnt/hoard");
  EXPECT_EQ(heard[0].build, proto::OwnBuild());
  EXPECT_FALSE(heard[0].build.version.empty());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(heard[1].node, host) << "a mount without a node name is named by its host";
  EXPECT_EQ(heard[1].mountpoint, deep.substr(deep.size() - proto::kMaxMountpointBytes));
  EXPECT_TRUE(heard[2].mountpoint.empty()) << "a node agent's poll names no mount";
  EXPECT_TRUE(heard[2].build.version.empty());
}

}  // namespace
}  // namespace hoard
