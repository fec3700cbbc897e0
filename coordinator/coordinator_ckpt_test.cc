// The coordinator's checkpoint wiring: node liveness reaches drain
// scheduling, the map and status carry the checkpoint fields, and the
// namespace is served over RPC.
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/testing.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
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

  testing::TempDir tmp_{"hoard-coord-ckpt"};
  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  static inline int n_ = 0;
};

TEST_F(CoordinatorCkptTest, DrainGoesToAnUpHolderAndStatusShowsTheJob) {
  CkptTable& t = coord_->checkpoints();
  ASSERT_TRUE(t.Create({.path = "job", .is_dir = true}).ok());
  auto f = t.Create({.path = "job/model.pt"});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(t.Commit({.id = f->id, .gen = 1, .size = 10, .chunk_size = 1u << 20, .checksums = {7},
                        .writer = "node1", .replicas = {{"node2"}}, .replicas_wanted = 2, .level = 2})
                  .ok());
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

}  // namespace
}  // namespace hoard
