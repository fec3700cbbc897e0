// The coordinator's checkpoint wiring: node liveness reaches drain
// scheduling, the map and status carry the checkpoint fields, and the
// namespace is served over RPC.
#include <atomic>
#include <optional>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/testing.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

class CoordinatorCkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Coordinator::Open({.data_dir = tmp_.path(),
                                .down_after = 5s,
                                .logger = spdlog::null_logger_mt("coord-ckpt-" + std::to_string(++n_)),
                                .clock = &clock_,
                                .ckpt = {.replicas = 3, .chunk_size = 1u << 20, .drain_max_bytes_per_s = 900}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(*c);
    for (const char* n : {"node1", "node2", "node3"}) {
      ASSERT_TRUE(coord_->RegisterNode({.name = n, .endpoint = std::string("tcp://127.0.0.1:1") + n[4]}).ok());
    }
  }

  // job/model.pt: one chunk, written by node1, held by node2 too (K=2).
  void CommitModel() {
    CkptTable& t = coord_->checkpoints();
    ASSERT_TRUE(t.Create({.path = "job", .is_dir = true}).ok());
    auto f = t.Create({.path = "job/model.pt"});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(t.Commit({.id = f->id, .gen = 1, .size = 10, .chunk_size = 1u << 20, .checksums = {7},
                          .writer = "node1", .replicas = {{"node2"}}, .replicas_wanted = 2, .level = 2})
                    .ok());
  }

  testing::TempDir tmp_{"hoard-coord-ckpt"};
  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  static inline int n_ = 0;
};

TEST_F(CoordinatorCkptTest, DrainGoesToAnUpHolderAndStatusShowsTheJob) {
  ASSERT_NO_FATAL_FAILURE(CommitModel());
  auto first = coord_->CkptWork("node1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->drain.size(), 1u);
  EXPECT_EQ(first->max_drain_bytes_per_s, 300u);
  // node1 and node3 go silent: node2, the replica holder, drains once the lease is over.
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(500ms);
    ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
    coord_->CheckLiveness();
  }
  clock_.Advance(200s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  auto work = coord_->CkptWork("node2");
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  ASSERT_EQ(work->drain.size(), 1u);
  EXPECT_EQ(work->drain[0].entry.path, "job/model.pt");
  EXPECT_EQ(work->max_drain_bytes_per_s, 900u);

  auto status = coord_->GetStatus("");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->ckpt_jobs.size(), 1u);
  EXPECT_EQ(status->ckpt_jobs[0].job, "job");
  EXPECT_EQ(status->ckpt_jobs[0].undrained_bytes, 10u);
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_EQ(map.ckpt_replicas, 3u);
  EXPECT_EQ(map.ckpt_chunk_size, 1u << 20);
}

// A replica holder that stays silent: down after down_after, and its
// checkpoint chunks get a new holder only once it is lost (ckpt.lost_after,
// 120 s by default), who is then sent the chunk to fetch, unasked.
TEST_F(CoordinatorCkptTest, ALostHoldersChunksGetANewHolderAfterTheLossTimeout) {
  ASSERT_TRUE(coord_->RegisterNode({.name = "node4", .endpoint = "tcp://127.0.0.1:14"}).ok());
  CkptTable& t = coord_->checkpoints();
  ASSERT_NO_FATAL_FAILURE(CommitModel());
  auto silence_of_node2 = [&](std::chrono::milliseconds d) {
    for (auto left = d; left > 0ms; left -= 500ms) {
      clock_.Advance(500ms);
      for (const char* n : {"node1", "node3", "node4"}) ASSERT_TRUE(coord_->Heartbeat({.name = n}).ok());
      coord_->CheckLiveness();
    }
  };
  silence_of_node2(60s);
  EXPECT_FALSE(coord_->GetClusterMap().nodes[1].up) << "node2 is down";
  EXPECT_EQ(t.Lookup("job/model.pt")->replicas[0], std::vector<std::string>{"node2"}) << "down is not lost";
  silence_of_node2(61s);
  const std::vector<std::string> reps = t.Lookup("job/model.pt")->replicas[0];
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0], "node2");
  const std::string fresh = reps[1];
  EXPECT_TRUE(fresh == "node3" || fresh == "node4") << fresh;
  metrics::Registry registry;
  coord_->RegisterMetrics(&registry);
  EXPECT_NE(registry.Render().find("hoard_ckpt_rereplicated_chunks_total 1\n"), std::string::npos);
  auto work = coord_->CkptWork(fresh);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->rebuild.size(), 1u);
  EXPECT_EQ(work->rebuild[0].holders, (std::vector<std::string>{"node1", "node2"}));
}

TEST_F(CoordinatorCkptTest, NamespaceIsServedOverRpc) {
  zmq::context_t context;
  CoordinatorService service(coord_.get(), {.endpoint = "tcp://127.0.0.1:*",
                                            .logger = spdlog::null_logger_mt("svc-ckpt-" + std::to_string(++n_)),
                                            .context = &context});
  ASSERT_TRUE(service.Start().ok());
  proto::RpcClient client(context, service.endpoint());
  auto dir = client.Call(proto::CkptCreate{.path = "job", .is_dir = true}, 5s);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_TRUE(client.Call(proto::CkptCreate{.path = "job/a"}, 5s).ok());
  auto renamed = client.Call(proto::CkptRename{.from = "job/a", .to = "job/b"}, 5s);
  ASSERT_TRUE(renamed.ok());
  EXPECT_EQ(renamed->entry.path, "job/b");
  auto rm = client.Call(proto::CkptRemove{.path = "job", .is_dir = true}, 5s);
  EXPECT_EQ(rm.status().code(), Code::kNotEmpty);
  auto list = client.Call(proto::CkptList{.path = "job"}, 5s);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->children.size(), 1u);
  EXPECT_EQ(list->children[0].path, "job/b");
  auto work = client.Call(proto::CkptWork{.node = "node1"}, 5s);
  ASSERT_TRUE(work.ok());
  EXPECT_EQ(work->keep_files, std::vector<uint64_t>{list->children[0].id});
  auto flush = client.Call(proto::CkptFlush{.job = "job"}, 5s);
  ASSERT_TRUE(flush.ok());
  EXPECT_EQ(flush->status.files, 1u);
  service.Stop();
}

// A standby (Options::standby names a leader) answers every request
// kNotLeader with the leader's endpoint and changes nothing, Ping included;
// a LeaderClient given only the standby reaches the leader through it; and a
// standby that takes over serves.
TEST_F(CoordinatorCkptTest, AStandbyAnswersNotLeaderAndClientsFollowTheLeader) {
  zmq::context_t context;
  CoordinatorService leader(coord_.get(), {.endpoint = "tcp://127.0.0.1:*",
                                           .logger = spdlog::null_logger_mt("svc-lead-" + std::to_string(++n_)),
                                           .context = &context});
  ASSERT_TRUE(leader.Start().ok());
  std::atomic<bool> took_over{false};
  CoordinatorService standby(
      coord_.get(), {.endpoint = "tcp://127.0.0.1:*",
                     .logger = spdlog::null_logger_mt("svc-standby-" + std::to_string(++n_)),
                     .context = &context,
                     .standby = [&]() -> std::optional<std::string> {
                       if (took_over.load()) return std::nullopt;
                       return leader.endpoint();
                     }});
  ASSERT_TRUE(standby.Start().ok());
  proto::RpcClient direct(context, standby.endpoint());
  auto create = direct.Call(proto::CkptCreate{.path = "job", .is_dir = true}, 5s);
  EXPECT_EQ(create.status().code(), Code::kNotLeader);
  EXPECT_EQ(create.status().message(), leader.endpoint());
  EXPECT_EQ(coord_->checkpoints().Lookup("job").status().code(), Code::kNotFound) << "a standby changes nothing";
  auto ping = direct.Call(proto::Ping{.mount = {.node = "node1", .mountpoint = "/mnt/hoard"}}, 5s);
  EXPECT_EQ(ping.status().code(), Code::kNotLeader);
  auto status = coord_->GetStatus("");
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->mounts.empty()) << "a standby records no mount";

  proto::LeaderClient client(context, standby.endpoint());
  auto followed = client.Call(proto::CkptCreate{.path = "job", .is_dir = true}, 5s);
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(client.endpoint(), leader.endpoint());
  EXPECT_TRUE(coord_->checkpoints().Lookup("job").ok());

  took_over.store(true);
  auto lookup = direct.Call(proto::CkptLookup{.path = "job"}, 5s);
  EXPECT_TRUE(lookup.ok()) << lookup.status().ToString();
  standby.Stop();
  leader.Stop();
}

}  // namespace
}  // namespace hoard
