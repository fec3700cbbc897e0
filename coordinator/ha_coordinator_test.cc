// Coordinators in high availability, in one process: three HaCoordinators on
// loopback sharing one in-memory etcd (MemKv), each through its own FaultyKv so
// that a test can cut one off (a pause, a partition) while the others go on.
#include "coordinator/ha_coordinator.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/testing.h"
#include "consensus/faulty_kv.h"
#include "consensus/mem_kv.h"
#include "origin/ckpt_origin.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"
#include "testing/forwarding_origin.h"
#include "testing/mem_origin.h"

namespace hoard {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;

// A loopback port nobody listens on now (the coordinator binds it next).
int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

class HaCoordinatorTest : public ::testing::Test {
 protected:
  struct Member {
    std::string endpoint;
    std::unique_ptr<FaultyKv> kv;
    std::unique_ptr<HaCoordinator> ha;
  };

  void SetUp() override {
    origin_->AddFile("a.bin", std::string(10000, 'a'));
    origin_->AddFile("dir/b.bin", std::string(20000, 'b'));
    for (int i = 0; i < 3; ++i) StartMember(i);
  }
  void TearDown() override {
    for (Member& m : members_) {
      if (m.ha) m.ha->Stop();
    }
  }

  void StartMember(int i) {
    if (members_.size() <= static_cast<size_t>(i)) members_.resize(i + 1);
    Member& m = members_[i];
    if (m.endpoint.empty()) m.endpoint = "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    m.kv = std::make_unique<FaultyKv>(&store_);
    Coordinator::Options co{.data_dir = tmp_.Sub("coord" + std::to_string(i)), .logger = log_};
    co.open_origin = [this](const std::string&) -> Result<std::unique_ptr<Origin>> {
      return std::unique_ptr<Origin>(std::make_unique<ForwardingOrigin>(origin_));
    };
    co.shared_store = tmp_.Sub("shared");
    co.ckpt.origin = tmp_.Sub("ckpt-origin");
    co.ckpt.open_origin = [](const std::string& source) { return OpenCkptOrigin(source); };
    m.ha = std::make_unique<HaCoordinator>(HaCoordinator::Options{.coordinator = co,
                                                                   .listen = m.endpoint,
                                                                   .advertise = m.endpoint,
                                                                   .prefix = "/hoard/t/",
                                                                   .lease_ttl = std::chrono::seconds(1),
                                                                   .kv = m.kv.get(),
                                                                   .context = &zmq_,
                                                                   .logger = log_});
    ASSERT_TRUE(m.ha->Start().ok());
  }

  std::string Endpoints() const {
    std::string list;
    for (const Member& m : members_) list += (list.empty() ? "" : ",") + m.endpoint;
    return list;
  }
  // The member that leads, once one does (-1 if none within 10 s).
  int Leader() {
    int who = -1;
    Eventually([&] {
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].ha && members_[i].ha->leading()) who = static_cast<int>(i);
      }
      return who >= 0;
    });
    return who;
  }
  // Kills member i as kill -9 would: it stops answering, and it neither
  // resigns nor renews (its lease runs out at etcd).
  void Kill(int i) {
    members_[i].kv->set_cut(true);
    members_[i].ha->Stop();
    members_[i].ha.reset();
  }

  testing::TempDir tmp_{"hoard-ha"};
  // HOARD_TEST_LOG=1 shows what the coordinators say.
  std::shared_ptr<spdlog::logger> log_ =
      std::getenv("HOARD_TEST_LOG") != nullptr
          ? std::make_shared<spdlog::logger>("ha", std::make_shared<spdlog::sinks::stderr_color_sink_mt>())
          : std::make_shared<spdlog::logger>("ha", std::make_shared<spdlog::sinks::null_sink_mt>());
  std::shared_ptr<MemOrigin> origin_ = std::make_shared<MemOrigin>("mem://data");
  MemKv store_;
  zmq::context_t zmq_;
  std::vector<Member> members_;
};

TEST_F(HaCoordinatorTest, ATakeoverKeepsEveryAcknowledgedChange) {
  const int first = Leader();
  ASSERT_GE(first, 0);
  proto::LeaderClient client(zmq_, Endpoints());
  Result<proto::DatasetAddReply> added =
      client.Call(proto::DatasetAdd{.name = "ds", .source = "mem://data"}, milliseconds(10000));
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  for (const char* node : {"node1", "node2"}) {
    Result<proto::RegisterNodeReply> r =
        client.Call(proto::RegisterNode{.name = node, .endpoint = std::string("tcp://127.0.0.1:1") + node[4]},
                    milliseconds(5000));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  Result<proto::ClusterMap> before = client.Call(proto::GetClusterMap{}, milliseconds(5000));
  ASSERT_TRUE(before.ok());

  Kill(first);
  const int second = Leader();
  ASSERT_GE(second, 0);
  ASSERT_NE(second, first);

  // Everything acknowledged is there, manifest included (fetched from the
  // shared store by a coordinator that never made it).
  Result<proto::ClusterMap> after = client.Call(proto::GetClusterMap{}, milliseconds(15000));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->datasets.size(), 1u);
  EXPECT_EQ(after->datasets[0].name, "ds");
  EXPECT_EQ(after->datasets[0].manifest_checksum, before->datasets[0].manifest_checksum);
  EXPECT_EQ(after->nodes.size(), 2u);
  EXPECT_GE(after->epoch, before->epoch);
  zmq::message_t manifest;
  Result<proto::ManifestPart> part =
      client.Call(proto::GetManifest{.name = "ds", .version = 1}, milliseconds(5000), &manifest);
  EXPECT_TRUE(part.ok()) << part.status().ToString();
  // And the new leader takes writes.
  Result<proto::DatasetRemoveReply> removed = client.Call(proto::DatasetRemove{.name = "ds"}, milliseconds(5000));
  EXPECT_TRUE(removed.ok()) << removed.status().ToString();
}

TEST_F(HaCoordinatorTest, AStandbyNamesTheLeader) {
  const int leader = Leader();
  ASSERT_GE(leader, 0);
  const int standby = (leader + 1) % 3;
  proto::RpcClient direct(zmq_, members_[standby].endpoint);
  Result<proto::ClusterMap> r = direct.Call(proto::GetClusterMap{}, milliseconds(5000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotLeader);
  EXPECT_EQ(r.status().message(), members_[leader].endpoint);
}

TEST_F(HaCoordinatorTest, ALeaderCutOffFromEtcdChangesNothingOnceAnotherLeads) {
  const int a = Leader();
  ASSERT_GE(a, 0);
  proto::LeaderClient client(zmq_, Endpoints());
  ASSERT_TRUE(client.Call(proto::DatasetAdd{.name = "ds", .source = "mem://data"}, milliseconds(10000)).ok());

  // A is paused away from etcd: its lease runs out, another takes over.
  members_[a].kv->set_cut(true);
  int b = -1;
  ASSERT_TRUE(Eventually([&] {
    for (int i = 0; i < 3; ++i) {
      if (i != a && members_[i].ha->leading()) b = i;
    }
    return b >= 0;
  }));
  // A, asked directly, cannot remove the dataset: its write never lands.
  proto::RpcClient direct(zmq_, members_[a].endpoint);
  auto removed = std::async(std::launch::async, [&] {
    return direct.Call(proto::DatasetRemove{.name = "ds"}, milliseconds(15000));
  });
  members_[a].kv->set_cut(false);  // back, as a process resumed after SIGCONT
  EXPECT_FALSE(removed.get().ok());
  Result<proto::DatasetListReply> list = client.Call(proto::DatasetList{}, milliseconds(5000));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->datasets.size(), 1u) << "the cut-off leader's removal must not be applied";
  EXPECT_FALSE(members_[a].ha->leading());
}

}  // namespace
}  // namespace hoard
