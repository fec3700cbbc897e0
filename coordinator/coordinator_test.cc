#include "coordinator/coordinator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "testing/forwarding_origin.h"
#include "testing/mem_origin.h"
#include "proto/ordinals.h"
#include "striping/assignment.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    origin_ = std::make_shared<MemOrigin>("mem://data");
    ASSERT_TRUE(origin_->AddFile("train/a.jpg", std::string(5000, 'a')).ok());
    ASSERT_TRUE(origin_->AddFile("train/b.jpg", std::string(7000, 'b')).ok());
    ASSERT_TRUE(origin_->AddFile("big.bin", std::string(3 * 65536 + 1, 'c')).ok());
    ASSERT_TRUE(origin_->AddFile("empty", "").ok());
    Reopen();
  }

  // `served`: the origin "mem://data" opens (default: origin_).
  void Reopen(std::shared_ptr<Origin> served = nullptr) {
    coord_.reset();
    auto c = Coordinator::Open({.data_dir = dir_,
                                .down_after = 5s,
                                .out_after = out_after_,
                                .logger = spdlog::null_logger_mt("coord-" + std::to_string(++n_)),
                                .clock = &clock_,
                                .open_origin = ForwardingOrigin::Opener("mem://data", served ? served : origin_),
                                .quota_policy = quota_policy_});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(*c);
  }

  proto::DatasetMeta Add(const std::string& name, uint64_t chunk = 65536, uint32_t replicas = 1) {
    auto r = coord_->AddDataset({.name = name, .source = "mem://data", .chunk_size = chunk, .replicas = replicas});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->meta : proto::DatasetMeta{};
  }

  // Moves time forward the way the service does: checking liveness every
  // 500 ms on the way.
  void Elapse(std::chrono::milliseconds d) {
    for (auto left = d; left.count() > 0; left -= 500ms) {
      clock_.Advance(std::min(left, std::chrono::milliseconds(500)));
      coord_->CheckLiveness();
    }
  }

  // Elapse, with the nodes `heard` heartbeating after every check (the
  // others silent).
  void ElapseHearing(std::chrono::milliseconds d, std::vector<std::string> heard) {
    for (auto left = d; left.count() > 0; left -= 500ms) {
      Elapse(std::min(left, std::chrono::milliseconds(500)));
      for (const std::string& name : heard) ASSERT_TRUE(coord_->Heartbeat({.name = name}).ok());
    }
  }

  // A node's report on a dataset of replicas 1: every chunk `member` owns
  // cached (`all`), or all but the last.
  static proto::DatasetReport Report(const proto::DatasetMeta& meta, const Manifest& m, const proto::ClusterMap& map,
                                     const Placement& placement, uint32_t member, bool all) {
    std::vector<ChunkRef> owned = OwnedChunks(m, placement, 1, member);
    proto::DatasetReport r{.uid = meta.uid, .version = 1, .placement_epoch = map.placement_epoch};
    r.owned_chunks = owned.size();
    proto::OrdinalEncoder cached;
    EXPECT_GE(owned.size(), 2u);
    for (size_t i = 0; i < owned.size(); ++i) {
      r.owned_bytes += owned[i].length;
      if (all || i + 1 < owned.size()) {
        cached.Add(owned[i].ordinal);
        ++r.cached_chunks;
        r.cached_bytes += owned[i].length;
      }
    }
    r.cached_ordinals = cached.Finish();
    return r;
  }

  // Two nodes and a dataset "imagenet" of replicas 1 with enough chunks
  // that each node surely owns several (the uid, and so the placement, is
  // random).
  struct Spread {
    proto::DatasetMeta meta;
    Manifest manifest;
    proto::ClusterMap map;
    Placement placement;
  };
  Spread AddSpreadDataset() {
    for (int i = 0; i < 40; ++i) EXPECT_TRUE(origin_->AddFile("more/" + std::to_string(i), "x").ok());
    Register("node1");
    Register("node2");
    proto::DatasetMeta meta = Add("imagenet", 65536, 1);
    std::string bytes;
    EXPECT_TRUE(coord_->GetManifest({.name = "imagenet", .version = 1}, &bytes).ok());
    return Spread{meta, *Manifest::Parse(bytes), coord_->GetClusterMap(), Placement({{"node1", 1}, {"node2", 1}})};
  }

  void Register(const std::string& name) {
    ASSERT_TRUE(coord_->RegisterNode({.name = name, .endpoint = "tcp://127.0.0.1:1" + name.substr(4)}).ok());
  }

  testing::TempDir tmp_{"hoard-coord"};
  std::string dir_;
  std::chrono::seconds out_after_{60};  // --out-after
  FakeClock clock_;
  std::shared_ptr<MemOrigin> origin_;
  std::unique_ptr<Coordinator> coord_;
  eviction::QuotaPolicy quota_policy_ = eviction::QuotaPolicy::kEvict;
  static inline int n_ = 0;
};

TEST_F(CoordinatorTest, AddRecordsTheManifest) {
  proto::DatasetMeta m = Add("imagenet");
  EXPECT_EQ(m.file_count, 4u);
  EXPECT_EQ(m.total_bytes, 5000u + 7000 + 3 * 65536 + 1);
  EXPECT_EQ(m.total_chunks, 1u + 1 + 4 + 0);
  EXPECT_EQ(m.version, 1u);
  std::string bytes;
  while (bytes.size() < m.manifest_bytes) {
    std::string part;
    auto r = coord_->GetManifest({.name = "imagenet", .version = 1, .offset = bytes.size(), .length = 100}, &part);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(part.size(), 100u);
    bytes += part;
  }
  Result<Manifest> manifest = Manifest::Parse(bytes);
  ASSERT_TRUE(manifest.ok());
  auto b = manifest->Resolve("train/b.jpg");
  ASSERT_TRUE(b);
  EXPECT_EQ(manifest->entry(*b).size, 7000u);
  EXPECT_EQ(manifest->entry(*b).mode, S_IFREG | 0644u);
}

TEST_F(CoordinatorTest, AddRejectsBadRequestsWithClearErrors) {
  Add("one");
  auto dup = coord_->AddDataset({.name = "one", .source = "mem://data"});
  EXPECT_EQ(dup.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(coord_->AddDataset({.name = "../x", .source = "mem://data"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(coord_->AddDataset({.name = "x", .source = "mem://data", .chunk_size = 1000}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(coord_->AddDataset({.name = "x", .source = "mem://data", .replicas = 0}).status().code(),
            Code::kInvalidArgument);
  auto missing = coord_->AddDataset({.name = "x", .source = "mem://elsewhere"});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("dataset add x"), std::string::npos) << missing.status().ToString();
  origin_->FailPath("train", Status::Unavailable("nfs server not responding"));
  auto down = coord_->AddDataset({.name = "x", .source = "mem://data"});
  EXPECT_EQ(down.status().code(), Code::kUnavailable);
  EXPECT_EQ(coord_->ListDatasets().datasets.size(), 1u);
}

TEST_F(CoordinatorTest, ConcurrentAddsOfOneNameLetExactlyOneWin) {
  origin_->SetDelay(20ms);
  std::atomic<int> ok{0}, exists{0};
  std::vector<std::thread> t;
  for (int i = 0; i < 4; ++i) {
    t.emplace_back([&] {
      auto r = coord_->AddDataset({.name = "same", .source = "mem://data"});
      if (r.ok()) ++ok;
      else if (r.status().code() == Code::kAlreadyExists) ++exists;
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(exists.load(), 3);
}

TEST_F(CoordinatorTest, StateSurvivesARestart) {
  Register("node1");
  Register("node2");
  proto::DatasetMeta m = Add("imagenet");
  ASSERT_TRUE(coord_->Warm("imagenet").ok());
  const uint64_t epoch = coord_->epoch();
  Reopen();
  EXPECT_EQ(coord_->epoch(), epoch);
  proto::ClusterMap map = coord_->GetClusterMap();
  ASSERT_EQ(map.nodes.size(), 2u);
  EXPECT_EQ(map.nodes[1].name, "node2");
  ASSERT_EQ(map.datasets.size(), 1u);
  EXPECT_EQ(map.datasets[0].uid, m.uid);
  EXPECT_TRUE(map.datasets[0].warm);
  std::string part;
  EXPECT_TRUE(coord_->GetManifest({.name = "imagenet", .version = 1}, &part).ok());
  EXPECT_EQ(part.size(), m.manifest_bytes);
}

TEST_F(CoordinatorTest, UnreadableStateRefusesToStart) {
  Add("imagenet");
  coord_.reset();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, "state.msgpack"), "\xc1garbage").ok());
  auto c = Coordinator::Open({.data_dir = dir_, .logger = spdlog::null_logger_mt("coord-bad")});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kCorruption);
}

TEST_F(CoordinatorTest, RemoveDeletesTheManifestFile) {
  Add("imagenet");
  Add("mnist");
  ASSERT_TRUE(coord_->RemoveDataset("imagenet").ok());
  EXPECT_EQ(coord_->RemoveDataset("imagenet").code(), Code::kNotFound);
  EXPECT_EQ(coord_->Warm("imagenet").status().code(), Code::kNotFound);
  int manifests = 0;
  for (auto& e : std::filesystem::directory_iterator(JoinPath(dir_, "manifests"))) {
    ++manifests;
    EXPECT_NE(e.path().filename().string().find("mnist"), std::string::npos);
  }
  EXPECT_EQ(manifests, 1);
}

TEST_F(CoordinatorTest, SilentNodeIsMarkedDownAndComesBack) {
  Register("node1");
  Register("node2");
  const uint64_t e0 = coord_->epoch();
  Elapse(3s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1"}).ok());
  Elapse(3s);  // node2 silent 6 s, node1 3 s
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_TRUE(map.nodes[0].up);
  EXPECT_FALSE(map.nodes[1].up);
  EXPECT_GT(coord_->epoch(), e0) << "mounts must learn that node2 is down";
  EXPECT_EQ(map.placement_epoch, coord_->GetClusterMap().placement_epoch);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
}

// The coordinator itself stalled (SIGSTOP, swapped out): when it resumes,
// every node looks silent. That is not the nodes' fault.
TEST_F(CoordinatorTest, ACoordinatorStallDoesNotMarkEveryNodeDown) {
  Register("node1");
  Register("node2");
  Elapse(1s);
  const uint64_t e0 = coord_->epoch();
  clock_.Advance(30s);
  coord_->CheckLiveness();
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_TRUE(map.nodes[0].up);
  EXPECT_TRUE(map.nodes[1].up);
  EXPECT_EQ(coord_->epoch(), e0);
  // Silence after the stall still counts.
  Elapse(3s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1"}).ok());
  Elapse(3s);
  map = coord_->GetClusterMap();
  EXPECT_TRUE(map.nodes[0].up);
  EXPECT_FALSE(map.nodes[1].up);
}

TEST_F(CoordinatorTest, EndpointsMustBeDialable) {
  for (const char* bad : {"tcp://127.0.0.1", "tcp://:7000", "tcp://*:7000", "tcp://h:0", "tcp://h:70000",
                          "tcp://h:12a", "udp://h:1"}) {
    EXPECT_EQ(coord_->RegisterNode({.name = "n", .endpoint = bad}).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(coord_->RegisterNode({.name = "n", .endpoint = "tcp://10.0.0.7:7101"}).ok());
}

TEST_F(CoordinatorTest, TooManyChunksIsAClearError) {
  // 64 Mi chunks of 64 KiB is 4 TiB; a sparse-looking 5 TiB file exceeds it.
  ASSERT_TRUE(origin_->AddFile("huge", "").ok());
  auto big = std::make_shared<MemOrigin>("mem://big");
  ASSERT_TRUE(big->AddFile("x", "").ok());
  class Lying : public ForwardingOrigin {
   public:
    using ForwardingOrigin::ForwardingOrigin;
    Status Walk(const std::function<Status(const OriginEntry&)>& visit) override {
      OriginEntry e{.path = "huge", .type = EntryType::kFile, .mode = S_IFREG | 0644, .size = 5ull << 40};
      return visit(e);
    }
  };
  coord_.reset();
  auto c = Coordinator::Open({.data_dir = dir_,
                              .logger = spdlog::null_logger_mt("coord-huge"),
                              .open_origin = [big](const std::string&) -> Result<std::unique_ptr<Origin>> {
                                return std::unique_ptr<Origin>(new Lying(big));
                              }});
  ASSERT_TRUE(c.ok());
  auto r = (*c)->AddDataset({.name = "huge", .source = "mem://big", .chunk_size = 65536});
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("larger --chunk-size"), std::string::npos) << r.status().ToString();
}

TEST_F(CoordinatorTest, HeartbeatFromAnUnknownNodeAsksItToRegister) {
  auto r = coord_->Heartbeat({.name = "stranger"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->registered);
  EXPECT_EQ(coord_->RegisterNode({.name = "bad name!", .endpoint = "tcp://x:1"}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(coord_->RegisterNode({.name = "n", .endpoint = "http://x"}).status().code(), Code::kInvalidArgument);
}

// A rolling upgrade shows in the status: each node's build as it last
// heartbeat, each mount's as it last polled, and the coordinator's own.
TEST_F(CoordinatorTest, StatusShowsEveryPartysBuild) {
  ASSERT_TRUE(coord_->RegisterNode({.name = "n1", .endpoint = "tcp://127.0.0.1:1", .build = {"0.1.0", "aaaa"}}).ok());
  ASSERT_TRUE(coord_->Heartbeat({.name = "n1", .build = {"0.2.0", "bbbb"}}).ok());
  coord_->HeardMount({.node = "n1", .mountpoint = "/mnt/hoard", .build = {"0.1.0", "aaaa"}});
  Result<proto::ClusterStatusReply> st = coord_->GetStatus("");
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->nodes.size(), 1u);
  EXPECT_EQ(st->nodes[0].build, (proto::Build{"0.2.0", "bbbb"}));
  ASSERT_EQ(st->mounts.size(), 1u);
  EXPECT_EQ(st->mounts[0].mountpoint, "/mnt/hoard");
  EXPECT_EQ(st->mounts[0].build, (proto::Build{"0.1.0", "aaaa"}));
  EXPECT_EQ(st->build, proto::OwnBuild());
  clock_.Advance(61s);
  EXPECT_TRUE(coord_->GetStatus("")->mounts.empty()) << "a mount silent for a minute is forgotten";
}

// Nodes report the ordinals of the owned chunks they hold; the coordinator
// turns them into bytes, files and completeness.
TEST_F(CoordinatorTest, StatusCountsWholeFilesFromNodeReports) {
  Spread spread = AddSpreadDataset();
  const proto::DatasetMeta& meta = spread.meta;
  const Manifest& m = spread.manifest;
  const proto::ClusterMap& map = spread.map;
  const Placement& placement = spread.placement;

  auto report = [&](uint32_t member, bool all) { return Report(meta, m, map, placement, member, all); };
  auto status = [&] { return coord_->GetStatus("imagenet")->datasets.at(0); };

  EXPECT_EQ(status().cached_bytes, 0u);
  EXPECT_FALSE(status().complete);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1", .datasets = {report(0, true)}, .datasets_included = true}).ok());
  proto::DatasetStatus half = status();
  EXPECT_FALSE(half.complete) << "node2 has not reported";
  EXPECT_EQ(half.nodes_reporting, 1u);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2", .datasets = {report(1, false)}, .datasets_included = true}).ok());
  EXPECT_FALSE(status().complete);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2", .datasets = {report(1, true)}, .datasets_included = true}).ok());
  proto::DatasetStatus full = status();
  EXPECT_TRUE(full.complete);
  EXPECT_EQ(full.cached_bytes, meta.total_bytes);
  EXPECT_EQ(full.files_cached, meta.file_count);
  ASSERT_EQ(full.shares.size(), 2u);
  EXPECT_TRUE(full.shares[0].reported);
  EXPECT_EQ(full.shares[0].owned_chunks + full.shares[1].owned_chunks, meta.total_chunks);

  // Every chunk is on its owner: once that has held for a whole down timeout
  // (an owner that just died would be marked down within it), heartbeat
  // replies say so, and nodes may then drop copies they no longer own.
  auto both_beat = [&] {
    auto a = coord_->Heartbeat({.name = "node1"});
    auto b = coord_->Heartbeat({.name = "node2"});
    EXPECT_TRUE(a.ok() && b.ok());
    return *a;
  };
  auto keep_alive = [&](std::chrono::milliseconds d) {
    for (auto left = d; left.count() > 0; left -= 500ms) {
      both_beat();
      clock_.Advance(500ms);
      coord_->CheckLiveness();
    }
  };
  coord_->CheckLiveness();
  keep_alive(4500ms);
  EXPECT_TRUE(both_beat().settled.empty()) << "settled for less than the down timeout";
  keep_alive(1s);
  proto::HeartbeatReply hb = both_beat();
  ASSERT_EQ(hb.settled.size(), 1u);
  EXPECT_EQ(hb.settled[0].uid, meta.uid);
  EXPECT_EQ(hb.settled[0].placement_epoch, map.placement_epoch);

  // A report whose ordinals do not decode (a bug, or garbage) is not believed:
  // neither by progress nor by settling.
  proto::DatasetReport bad = report(1, true);
  bad.cached_ordinals.push_back(char(0x80));
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2", .datasets = {bad}, .datasets_included = true}).ok());
  EXPECT_FALSE(status().complete);
  EXPECT_FALSE(status().shares[1].reported);
  keep_alive(1s);
  EXPECT_TRUE(both_beat().settled.empty());
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2", .datasets = {report(1, true)}, .datasets_included = true}).ok());
  EXPECT_TRUE(status().complete);

  // A node that goes down takes its chunks out of "cached", and the dataset
  // is no longer settled: node2 keeps its share (held) but cannot serve it.
  Elapse(6s);
  auto after = coord_->Heartbeat({.name = "node1"});
  EXPECT_FALSE(status().complete);
  EXPECT_LT(status().cached_bytes, meta.total_bytes);
  EXPECT_TRUE(after->settled.empty());
}

TEST_F(CoordinatorTest, ANodeIsAskedForItsReportsUntilItSendsThem) {
  Register("node1");
  EXPECT_TRUE(coord_->Heartbeat({.name = "node1"})->need_reports);
  EXPECT_FALSE(coord_->Heartbeat({.name = "node1", .datasets_included = true})->need_reports);
  EXPECT_FALSE(coord_->Heartbeat({.name = "node1"})->need_reports);
  Reopen();  // reports are not state: a restarted coordinator asks again
  EXPECT_TRUE(coord_->Heartbeat({.name = "node1"})->need_reports);
}

// Placement weights follow the capacity a node registers with; they change
// only by a registration (a committed change), never by a heartbeat.
TEST_F(CoordinatorTest, PlacementWeightsFollowRegisteredCapacity) {
  ASSERT_TRUE(coord_->RegisterNode({.name = "small", .endpoint = "tcp://h:1", .capacity_bytes = 1ull << 30}).ok());
  ASSERT_TRUE(coord_->RegisterNode({.name = "large", .endpoint = "tcp://h:2", .capacity_bytes = 3ull << 30}).ok());
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_EQ(map.nodes[0].name, "large");
  EXPECT_EQ(map.nodes[0].weight, 3072);
  EXPECT_EQ(map.nodes[1].weight, 1024);
  const uint64_t pe = map.placement_epoch;
  ASSERT_TRUE(coord_->RegisterNode({.name = "small", .endpoint = "tcp://h:1", .capacity_bytes = 1ull << 30}).ok());
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, pe) << "a restart with the same disk moves nothing";
  ASSERT_TRUE(coord_->Heartbeat({.name = "small", .capacity_bytes = 9ull << 30}).ok());
  EXPECT_EQ(coord_->GetClusterMap().nodes[1].weight, 1024);
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, pe);
  ASSERT_TRUE(coord_->RegisterNode({.name = "small", .endpoint = "tcp://h:1", .capacity_bytes = 2ull << 30}).ok());
  EXPECT_EQ(coord_->GetClusterMap().nodes[1].weight, 2048);
  EXPECT_GT(coord_->GetClusterMap().placement_epoch, pe);
}

TEST_F(CoordinatorTest, DrainKeepsTheWeightAndTakesTheShareAway) {
  Register("node1");
  Register("node2");
  const uint64_t pe = coord_->GetClusterMap().placement_epoch;
  auto r = coord_->SetDraining("node2", true);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->node.draining);
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_EQ(map.placement_epoch, pe + 1);
  EXPECT_EQ(proto::PlacementWeight(map.nodes[1]), 0);
  EXPECT_EQ(map.nodes[1].weight, 1);
  ASSERT_TRUE(coord_->SetDraining("node2", true).ok());  // idempotent
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, pe + 1);
  Reopen();
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].draining) << "a drain is state";
  ASSERT_TRUE(coord_->SetDraining("node2", false).ok());
  EXPECT_EQ(proto::PlacementWeight(coord_->GetClusterMap().nodes[1]), 1);
  EXPECT_EQ(coord_->SetDraining("nobody", true).status().code(), Code::kNotFound);
}

TEST_F(CoordinatorTest, OnlyANodeThatOwnsNothingIsRemovedWithoutForce) {
  Register("node1");
  Register("node2");
  Register("node3");
  Register("node4");
  // Up: refused, even with --force: its agent would register again.
  for (bool force : {false, true}) {
    Result<proto::NodeRemoveReply> up = coord_->RemoveNode("node2", force);
    EXPECT_EQ(up.status().code(), Code::kInvalidArgument);
    EXPECT_NE(up.status().message().find("is up: its agent still heartbeats"), std::string::npos)
        << up.status().ToString();
    EXPECT_NE(up.status().message().find("drain it first"), std::string::npos);
  }
  ASSERT_TRUE(coord_->SetDraining("node2", true).ok());
  // node2, node3 and node4 stop; node1 heartbeats.
  ElapseHearing(6s, {"node1"});
  proto::ClusterMap map = coord_->GetClusterMap();
  ASSERT_FALSE(map.nodes[1].up);
  ASSERT_TRUE(map.nodes[2].held);
  const uint64_t pe = map.placement_epoch;
  ASSERT_TRUE(coord_->RemoveNode("node2", false).ok());
  EXPECT_EQ(coord_->GetClusterMap().nodes.size(), 3u);
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, pe) << "a drained node owned nothing: nothing moves";
  // Down but held: it still owns its share, which would move now.
  Result<proto::NodeRemoveReply> held = coord_->RemoveNode("node3", false);
  EXPECT_EQ(held.status().code(), Code::kInvalidArgument);
  EXPECT_NE(held.status().message().find("keeps its placement"), std::string::npos) << held.status().ToString();
  ASSERT_TRUE(coord_->RemoveNode("node3", true).ok());
  EXPECT_GT(coord_->GetClusterMap().placement_epoch, pe);
  EXPECT_EQ(coord_->RemoveNode("node3", false).status().code(), Code::kNotFound);
  // Out: it owns nothing any more.
  ElapseHearing(61s, {"node1"});
  ASSERT_STREQ(proto::MemberState(coord_->GetClusterMap().nodes[1]), "out");
  ASSERT_TRUE(coord_->RemoveNode("node4", false).ok());
  Reopen();
  ASSERT_EQ(coord_->GetClusterMap().nodes.size(), 1u);
  // A removed node whose agent still runs is a stranger: it registers again.
  EXPECT_FALSE(coord_->Heartbeat({.name = "node2"})->registered);
}

// The last node with a placement weight holds every dataset: draining or
// removing it is refused at once (a drain --wait would never end, and the
// datasets would have no owner), with or without --force. Without datasets
// there is nothing to hold, and both are allowed.
TEST_F(CoordinatorTest, TheLastNodeWithDataIsNeitherDrainedNorRemoved) {
  Register("node1");
  Register("node2");
  Add("imagenet");
  ASSERT_TRUE(coord_->SetDraining("node2", true).ok()) << "node1 still owns";
  Result<proto::NodeDrainReply> drain = coord_->SetDraining("node1", true);
  EXPECT_EQ(drain.status().code(), Code::kInvalidArgument);
  EXPECT_NE(drain.status().message().find("draining node node1 would leave the 1 dataset(s) no node to hold them"),
            std::string::npos)
      << drain.status().ToString();
  EXPECT_FALSE(coord_->GetClusterMap().nodes[0].draining);
  for (bool force : {false, true}) {
    Result<proto::NodeRemoveReply> rm = coord_->RemoveNode("node1", force);
    EXPECT_EQ(rm.status().code(), Code::kInvalidArgument);
    EXPECT_NE(rm.status().message().find("removing node node1 would leave"), std::string::npos)
        << rm.status().ToString();
  }
  // Taken back, node2 owns again: node1 may go.
  ASSERT_TRUE(coord_->SetDraining("node2", false).ok());
  ASSERT_TRUE(coord_->SetDraining("node1", true).ok());
  ASSERT_TRUE(coord_->SetDraining("node1", true).ok()) << "idempotent";
  EXPECT_EQ(coord_->SetDraining("node2", true).status().code(), Code::kInvalidArgument);
  // No datasets: nothing to hold.
  ASSERT_TRUE(coord_->RemoveDataset("imagenet").ok());
  ASSERT_TRUE(coord_->SetDraining("node2", true).ok());
}

// The map a restarted coordinator serves is the one it served before, at the
// same epochs: a node that was down is still down (parties holding the old
// map compute the same owners), and comes back by heartbeating.
TEST_F(CoordinatorTest, ARestartKeepsTheMapAtItsEpochs) {
  Register("node1");
  Register("node2");
  Elapse(3s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1"}).ok());
  Elapse(3s);
  proto::ClusterMap before = coord_->GetClusterMap();
  ASSERT_FALSE(before.nodes[1].up);
  Reopen();
  proto::ClusterMap after = coord_->GetClusterMap();
  EXPECT_EQ(after.epoch, before.epoch);
  EXPECT_EQ(after.placement_epoch, before.placement_epoch);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_TRUE(after.nodes[0].up) << "up nodes get a fresh timeout";
  EXPECT_FALSE(after.nodes[1].up);
  Elapse(3s);
  EXPECT_TRUE(coord_->GetClusterMap().nodes[0].up);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, before.placement_epoch) << "back within --out-after";
}

// A change that cannot be made durable is not made at all: the map stays as
// every party knows it (same epochs, same up/down), and the next liveness
// check or heartbeat tries again.
TEST_F(CoordinatorTest, AFailedCommitLeavesTheMapAsItWas) {
  Register("node1");
  Register("node2");
  Elapse(3s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1"}).ok());
  clock_.Advance(2500ms);  // node2 silent 5.5 s
  const proto::ClusterMap before = coord_->GetClusterMap();
  coord_->TEST_store().TEST_log().TEST_FailNextAppend(ENOSPC, 10);
  coord_->CheckLiveness();
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_EQ(map.epoch, before.epoch);
  EXPECT_TRUE(map.nodes[1].up) << "marked down in memory but not on disk";
  coord_->CheckLiveness();  // the next check succeeds
  map = coord_->GetClusterMap();
  EXPECT_FALSE(map.nodes[1].up);
  EXPECT_TRUE(map.nodes[1].held);
  EXPECT_EQ(map.placement_epoch, before.placement_epoch) << "held: nothing moves yet";

  // Back up: the same on a heartbeat.
  const uint64_t down_epoch = map.epoch;
  coord_->TEST_store().TEST_log().TEST_FailNextAppend(EIO, 0);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  EXPECT_FALSE(coord_->GetClusterMap().nodes[1].up);
  EXPECT_EQ(coord_->GetClusterMap().epoch, down_epoch);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
  Reopen();
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
}

// A node out (down past --out-after) that registers again (it restarted)
// owns its share again: that is a placement change, which parties must see
// as a new placement epoch.
TEST_F(CoordinatorTest, ANodeBackFromOutChangesThePlacementEpoch) {
  Register("node1");
  Register("node2");
  Elapse(6s);
  proto::ClusterMap down = coord_->GetClusterMap();
  ASSERT_FALSE(down.nodes[0].up);
  Elapse(61s);
  proto::ClusterMap out = coord_->GetClusterMap();
  ASSERT_STREQ(proto::MemberState(out.nodes[0]), "out");
  EXPECT_GT(out.placement_epoch, down.placement_epoch);
  Register("node1");
  proto::ClusterMap back = coord_->GetClusterMap();
  EXPECT_TRUE(back.nodes[0].up);
  EXPECT_GT(back.placement_epoch, out.placement_epoch);
}

// Down and out (Ceph's distinction): a node marked down keeps its placement
// for --out-after, so a reboot moves nothing away and back; past it, its
// chunks get new owners. The count is the wall clock's since it went down,
// saved with the node: a coordinator restart does not start it again.
TEST_F(CoordinatorTest, ADownNodeKeepsItsPlacementUntilOutAfter) {
  Register("node1");
  Register("node2");
  const proto::ClusterMap before = coord_->GetClusterMap();
  const int64_t went_down = clock_.WallSeconds() + 6;  // the check 5.5 s on, cut to the second
  ElapseHearing(6s, {"node1"});
  proto::ClusterMap down = coord_->GetClusterMap();
  ASSERT_FALSE(down.nodes[1].up);
  EXPECT_TRUE(down.nodes[1].held);
  EXPECT_STREQ(proto::MemberState(down.nodes[1]), "down");
  EXPECT_LE(std::abs(down.nodes[1].down_since_unix - went_down), 1);
  EXPECT_GT(down.epoch, before.epoch) << "mounts must learn that node2 is down";
  EXPECT_EQ(down.placement_epoch, before.placement_epoch);
  EXPECT_EQ(proto::PlacementWeight(down.nodes[1]), proto::PlacementWeight(before.nodes[1]));
  // Status: down, since when; metrics count it down, not out.
  Result<proto::ClusterStatusReply> st = coord_->GetStatus("");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->nodes[1].down_since_unix, down.nodes[1].down_since_unix);

  // A restart half-way keeps when it went down.
  ElapseHearing(30s, {"node1"});
  Reopen();
  proto::ClusterMap reopened = coord_->GetClusterMap();
  EXPECT_EQ(reopened.nodes[1].down_since_unix, down.nodes[1].down_since_unix);
  EXPECT_TRUE(reopened.nodes[1].held);
  // Out 60 s after it went down, not 60 s after the restart.
  while (clock_.WallSeconds() <= down.nodes[1].down_since_unix + 60) {
    EXPECT_TRUE(coord_->GetClusterMap().nodes[1].held) << "out before --out-after";
    Elapse(500ms);
    ASSERT_TRUE(coord_->Heartbeat({.name = "node1"}).ok());
  }
  EXPECT_LE(clock_.WallSeconds(), down.nodes[1].down_since_unix + 62) << "not out long after --out-after";
  proto::ClusterMap out = coord_->GetClusterMap();
  EXPECT_STREQ(proto::MemberState(out.nodes[1]), "out");
  EXPECT_EQ(out.placement_epoch, before.placement_epoch + 1) << "its chunks get new owners";
  EXPECT_EQ(proto::PlacementWeight(out.nodes[1]), 0);
}

TEST_F(CoordinatorTest, ANodeBackWithinOutAfterMovesNothing) {
  Register("node1");
  Register("node2");
  Add("imagenet");
  const proto::ClusterMap before = coord_->GetClusterMap();
  ElapseHearing(20s, {"node1"});  // node2 down, held
  ASSERT_FALSE(coord_->GetClusterMap().nodes[1].up);
  // It restarts: registers, as after a reboot.
  Register("node2");
  proto::ClusterMap back = coord_->GetClusterMap();
  EXPECT_TRUE(back.nodes[1].up);
  EXPECT_FALSE(back.nodes[1].held);
  EXPECT_EQ(back.nodes[1].down_since_unix, 0);
  EXPECT_STREQ(proto::MemberState(back.nodes[1]), "up");
  EXPECT_EQ(back.placement_epoch, before.placement_epoch) << "nothing moved";
  EXPECT_GT(back.epoch, before.epoch);
  // The same by a heartbeat (a host that was cut off, its agent running).
  ElapseHearing(6s, {"node1"});
  ASSERT_TRUE(coord_->GetClusterMap().nodes[1].held);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node2"}).ok());
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, before.placement_epoch);
  // And never out afterwards.
  ElapseHearing(75s, {"node1", "node2"});
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, before.placement_epoch);
}

// --out-after 0: out as soon as down (the behaviour before holds existed).
TEST_F(CoordinatorTest, OutAfterZeroMovesChunksAtOnce) {
  out_after_ = 0s;
  Reopen();
  Register("node1");
  Register("node2");
  const uint64_t pe = coord_->GetClusterMap().placement_epoch;
  ElapseHearing(6s, {"node1"});
  proto::ClusterMap map = coord_->GetClusterMap();
  EXPECT_STREQ(proto::MemberState(map.nodes[1]), "out");
  EXPECT_GT(map.nodes[1].down_since_unix, 0);
  EXPECT_EQ(map.placement_epoch, pe + 1);
  Register("node2");
  EXPECT_EQ(coord_->GetClusterMap().placement_epoch, pe + 2);
}

// A drained node (placement gives it nothing, up or down) that comes back
// from down: the map says so in a new epoch.
TEST_F(CoordinatorTest, ADrainedNodeBackFromDownIsUpInANewEpoch) {
  Register("node1");
  Register("node2");
  ASSERT_TRUE(coord_->SetDraining("node2", true).ok());
  Elapse(6s);
  ASSERT_FALSE(coord_->GetClusterMap().nodes[1].up);
  const uint64_t e = coord_->epoch();
  Register("node2");
  EXPECT_TRUE(coord_->GetClusterMap().nodes[1].up);
  EXPECT_GT(coord_->epoch(), e) << "members must learn that node2 is up";
}

TEST_F(CoordinatorTest, StaleReportsDoNotCount) {
  Register("node1");
  proto::DatasetMeta meta = Add("imagenet");
  proto::DatasetReport r{.uid = meta.uid, .version = 1, .placement_epoch = 999, .cached_bytes = 1000};
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1", .datasets = {r}, .datasets_included = true}).ok());
  EXPECT_EQ(coord_->GetStatus("")->datasets.at(0).cached_bytes, 0u);
  EXPECT_EQ(coord_->GetStatus("nope").status().code(), Code::kNotFound);
}

// ---- dataset refresh ---------------------------------------------------------

// An origin whose walks tell the test they started and then wait for it, so
// a test acts while a walk is in progress without guessing when with a sleep.
class PausedWalkOrigin : public ForwardingOrigin {
 public:
  using ForwardingOrigin::ForwardingOrigin;
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override {
    walking.Open();
    resume.Wait();
    return ForwardingOrigin::Walk(visit);
  }
  testing::Gate walking;
  testing::Gate resume;
};

class RefreshTest : public CoordinatorTest {
 protected:
  // The manifest the coordinator serves for `name` at `version`.
  Result<Manifest> Fetch(const std::string& name, uint32_t version) {
    std::string bytes;
    while (true) {
      std::string part;
      auto r = coord_->GetManifest({.name = name, .version = version, .offset = bytes.size()}, &part);
      if (!r.ok()) return r.status();
      bytes += part;
      if (bytes.size() >= r->total_bytes) break;
    }
    return Manifest::Parse(std::move(bytes));
  }

  std::vector<std::string> ManifestFiles() {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(JoinPath(dir_, "manifests"))) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static MemAttributes Later() {
    MemAttributes a;
    a.mtime_ns += 5'000'000'000;
    return a;
  }
};

TEST_F(RefreshTest, AnUnchangedOriginIsANoOp) {
  proto::DatasetMeta m = Add("imagenet");
  const uint64_t epoch = coord_->epoch();
  auto r = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->meta.version, 1u);
  EXPECT_EQ(r->previous_version, 1u);
  EXPECT_EQ(r->files_added + r->files_changed + r->files_removed + r->other_changes, 0u);
  EXPECT_EQ(r->fetch_bytes, 0u);
  EXPECT_EQ(coord_->epoch(), epoch) << "a no-op must not change the map";
  EXPECT_EQ(coord_->GetClusterMap().datasets.at(0).manifest_checksum, m.manifest_checksum);
  EXPECT_EQ(ManifestFiles().size(), 1u);
}

TEST_F(RefreshTest, ChangesBecomeTheNextVersionWithTheSameUidAndSettings) {
  proto::DatasetMeta v1 = Add("imagenet", 65536, /*replicas=*/2);
  ASSERT_TRUE(coord_->Warm("imagenet").ok());
  Result<Manifest> m1 = Fetch("imagenet", 1);
  ASSERT_TRUE(m1.ok());
  // big.bin: same size, new bytes and mtime; train/b.jpg: a new size;
  // train/a.jpg gone; new/c.bin added.
  ASSERT_TRUE(origin_->AddFile("big.bin", std::string(3 * 65536 + 1, 'C'), Later()).ok());
  ASSERT_TRUE(origin_->AddFile("train/b.jpg", std::string(9000, 'B')).ok());
  ASSERT_TRUE(origin_->Remove("train/a.jpg").ok());
  ASSERT_TRUE(origin_->AddFile("new/c.bin", std::string(100, 'n')).ok());
  const uint64_t epoch = coord_->epoch();
  const uint64_t placement_epoch = coord_->GetClusterMap().placement_epoch;

  auto r = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->previous_version, 1u);
  EXPECT_EQ(r->meta.version, 2u);
  EXPECT_EQ(r->files_added, 1u);
  EXPECT_EQ(r->files_changed, 2u);
  EXPECT_EQ(r->files_removed, 1u);
  EXPECT_EQ(r->other_changes, 1u);  // the directory new/
  EXPECT_EQ(r->fetch_bytes, (3 * 65536 + 1) + 9000 + 100);
  EXPECT_EQ(r->fetch_chunks, 4u + 1 + 1);
  std::map<std::string, std::string> listed;
  for (const auto& f : r->files) listed[f.path] = f.change;
  EXPECT_EQ(listed, (std::map<std::string, std::string>{
                        {"big.bin", "changed"}, {"train/b.jpg", "changed"}, {"train/a.jpg", "removed"},
                        {"new/c.bin", "added"}}));

  // Same dataset, next version; the settings and the warm flag are kept.
  proto::ClusterMap map = coord_->GetClusterMap();
  ASSERT_EQ(map.datasets.size(), 1u);
  const proto::DatasetMeta& v2 = map.datasets[0];
  EXPECT_EQ(v2.uid, v1.uid);
  EXPECT_EQ(v2.version, 2u);
  EXPECT_EQ(v2.replicas, 2u);
  EXPECT_EQ(v2.chunk_size, 65536u);
  EXPECT_TRUE(v2.warm);
  EXPECT_EQ(v2.file_count, 4u);
  EXPECT_EQ(v2.total_bytes, 9000u + 100 + 3 * 65536 + 1);
  EXPECT_GT(map.epoch, epoch);
  EXPECT_EQ(map.placement_epoch, placement_epoch) << "a new version moves no chunk owner";

  // Only the new version is served, and only its manifest is on disk.
  EXPECT_EQ(Fetch("imagenet", 1).status().code(), Code::kStale);
  Result<Manifest> m2 = Fetch("imagenet", 2);
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ(m2->checksum(), v2.manifest_checksum);
  ASSERT_EQ(ManifestFiles().size(), 1u);
  EXPECT_NE(ManifestFiles()[0].find("-v2.manifest"), std::string::npos) << ManifestFiles()[0];
  // An unchanged file keeps its key (so its chunks and owners); a changed one does not.
  auto key = [](const Manifest& m, const char* path) { return m.entry(*m.Resolve(path)).file_key(); };
  EXPECT_EQ(key(*m1, "empty"), key(*m2, "empty"));
  EXPECT_NE(key(*m1, "big.bin"), key(*m2, "big.bin"));
  EXPECT_NE(key(*m1, "train/b.jpg"), key(*m2, "train/b.jpg"));
  EXPECT_FALSE(m2->Resolve("train/a.jpg"));

  // Once more: nothing changed since version 2.
  auto again = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  EXPECT_EQ(again->meta.version, 2u);
}

TEST_F(RefreshTest, ARefreshSurvivesARestart) {
  Add("imagenet");
  ASSERT_TRUE(coord_->Warm("imagenet").ok());
  ASSERT_TRUE(origin_->AddFile("train/a.jpg", std::string(5000, 'A'), Later()).ok());
  auto r = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(r.ok() && r->changed) << r.status().ToString();
  const uint64_t epoch = coord_->epoch();
  Reopen();
  EXPECT_EQ(coord_->epoch(), epoch);
  proto::ClusterMap map = coord_->GetClusterMap();
  ASSERT_EQ(map.datasets.size(), 1u);
  EXPECT_EQ(map.datasets[0].version, 2u);
  EXPECT_EQ(map.datasets[0].manifest_checksum, r->meta.manifest_checksum);
  EXPECT_TRUE(map.datasets[0].warm);
  Result<Manifest> m = Fetch("imagenet", 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->entry(*m->Resolve("train/a.jpg")).mtime_ns, Later().mtime_ns);
  EXPECT_EQ(ManifestFiles().size(), 1u);
  // And the next refresh starts from version 2.
  ASSERT_TRUE(origin_->Remove("empty").ok());
  auto next = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->meta.version, 3u);
  EXPECT_EQ(next->files_removed, 1u);
}

TEST_F(RefreshTest, FailuresKeepTheCurrentVersion) {
  Add("imagenet");
  EXPECT_EQ(coord_->RefreshDataset("nope").status().code(), Code::kNotFound);
  ASSERT_TRUE(origin_->AddFile("train/a.jpg", std::string(5001, 'A')).ok());

  // The origin is down: a clear error, version 1 stays and is served.
  origin_->FailPath("train", Status::Unavailable("nfs server not responding"));
  auto down = coord_->RefreshDataset("imagenet");
  EXPECT_EQ(down.status().code(), Code::kUnavailable);
  EXPECT_NE(down.status().message().find("dataset refresh imagenet"), std::string::npos) << down.status().ToString();
  origin_->ClearFaults();
  EXPECT_EQ(coord_->GetClusterMap().datasets.at(0).version, 1u);
  EXPECT_TRUE(Fetch("imagenet", 1).ok());

  // The commit fails: nothing changes either; the next try works.
  const uint64_t epoch = coord_->epoch();
  coord_->TEST_store().TEST_log().TEST_FailNextAppend(ENOSPC, 10);
  auto full = coord_->RefreshDataset("imagenet");
  EXPECT_FALSE(full.ok());
  EXPECT_EQ(coord_->epoch(), epoch);
  EXPECT_EQ(coord_->GetClusterMap().datasets.at(0).version, 1u);
  EXPECT_TRUE(Fetch("imagenet", 1).ok());
  auto ok = coord_->RefreshDataset("imagenet");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->meta.version, 2u);
  Reopen();
  EXPECT_EQ(coord_->GetClusterMap().datasets.at(0).version, 2u);
}

TEST_F(RefreshTest, ARefreshRacingARemoveOrAnotherRefreshFailsClearly) {
  Add("imagenet");
  ASSERT_TRUE(origin_->AddFile("train/a.jpg", std::string(5001, 'A')).ok());
  auto paused = std::make_shared<PausedWalkOrigin>(origin_);
  Reopen(paused);
  std::thread slow([&] {
    auto r = coord_->RefreshDataset("imagenet");
    EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
    EXPECT_NE(r.status().message().find("removed while it was being refreshed"), std::string::npos);
  });
  paused->walking.Wait();  // the refresh holds the name now
  auto twice = coord_->RefreshDataset("imagenet");
  EXPECT_EQ(twice.status().code(), Code::kUnavailable) << twice.status().ToString();
  EXPECT_EQ(coord_->AddDataset({.name = "imagenet", .source = "mem://data"}).status().code(), Code::kAlreadyExists);
  ASSERT_TRUE(coord_->RemoveDataset("imagenet").ok());
  paused->resume.Open();
  slow.join();
  EXPECT_TRUE(coord_->ListDatasets().datasets.empty());
  EXPECT_TRUE(ManifestFiles().empty()) << ManifestFiles()[0];
}

// The checkpoint drain's budget follows the datasets' fill rate, which the
// coordinator learns from the nodes' reports: while a dataset fills, the
// drain gets its share; once filling stops, it is unlimited again.
TEST_F(CoordinatorTest, CheckpointDrainYieldsToDatasetFills) {
  coord_.reset();
  auto c = Coordinator::Open({.data_dir = dir_,
                              .down_after = 60s,
                              .logger = spdlog::null_logger_mt("coord-" + std::to_string(++n_)),
                              .clock = &clock_,
                              .open_origin = ForwardingOrigin::Opener("mem://data", origin_),
                              .ckpt = {.drain_share = 0.5, .drain_min_bytes_per_s = 1}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  coord_ = std::move(*c);
  Spread spread = AddSpreadDataset();
  const proto::DatasetMeta& meta = spread.meta;
  const Manifest& m = spread.manifest;
  const proto::ClusterMap& map = spread.map;
  const Placement& placement = spread.placement;
  auto budget = [&] {
    auto w = coord_->CkptWork("node1");
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? w->max_drain_bytes_per_s : ~0ull;
  };

  EXPECT_EQ(budget(), 0u) << "nothing fills: unlimited";
  proto::DatasetReport all = Report(meta, m, map, placement, 0, true);
  proto::DatasetReport none = all;  // nothing cached yet
  none.cached_chunks = 0;
  none.cached_bytes = 0;
  none.cached_ordinals = proto::OrdinalEncoder().Finish();
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1", .datasets = {none}, .datasets_included = true}).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(coord_->Heartbeat({.name = "node1", .datasets = {all}, .datasets_included = true}).ok());
  const double fill = coord_->GetStatus("imagenet")->datasets.at(0).fill_rate;
  ASSERT_GT(fill, 0);
  // Share 0.5: the drain may move as much as the fill, split between the
  // two up nodes (at least 1 B/s each: 0 would mean unlimited).
  EXPECT_EQ(budget(), std::max<uint64_t>(1, uint64_t(fill) / 2));
  clock_.Advance(11s);  // past the fill rate's window: nothing fills any more
  EXPECT_EQ(budget(), 0u);
}

// ---- eviction (coordinator/eviction.h) -------------------------------------

// Two nodes of `capacity` bytes each; the datasets of the origin above are
// 208,609 bytes, so a capacity of 150,000 per node holds one warm dataset
// (104,305 per node) but not two.
class EvictionTest : public CoordinatorTest {
 protected:
  void Nodes(uint64_t capacity) {
    for (const char* n : {"node1", "node2"}) {
      ASSERT_TRUE(coord_->RegisterNode({.name = n, .endpoint = std::string("tcp://127.0.0.1:1") + (n + 4),
                                        .capacity_bytes = capacity})
                      .ok());
    }
  }
  proto::DatasetMeta Meta(const std::string& name) {
    for (const auto& d : coord_->ListDatasets().datasets) {
      if (d.name == name) return d;
    }
    ADD_FAILURE() << "no dataset " << name;
    return {};
  }
  std::vector<std::string> Warm(const std::string& name) {
    Result<proto::WarmReply> r = coord_->Warm(name);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->evicted : std::vector<std::string>{"<failed>"};
  }
};

TEST_F(EvictionTest, SettingsArePersistedAndSetIsIdempotent) {
  auto r = coord_->AddDataset({.name = "imagenet",
                               .source = "mem://data",
                               .chunk_size = 65536,
                               .priority = proto::kPriorityHigh,
                               .ttl_s = 3600,
                               .tenant = "vision"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->meta.priority, proto::kPriorityHigh);
  EXPECT_TRUE(r->meta.resident);
  const proto::DatasetSet pin{.name = "imagenet", .has_pinned = true, .pinned = true, .has_ttl = true, .ttl_s = 0};
  ASSERT_TRUE(coord_->SetDataset(pin).ok());
  const uint64_t epoch = coord_->epoch();
  Result<proto::DatasetSetReply> again = coord_->SetDataset(pin);  // a resend
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(coord_->epoch(), epoch) << "the same settings again change nothing";
  EXPECT_TRUE(again->meta.pinned);
  EXPECT_EQ(coord_->SetDataset({.name = "imagenet", .has_tenant = true, .tenant = "bad/name"}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(coord_->SetDataset({.name = "nope", .has_pinned = true}).status().code(), Code::kNotFound);
  ASSERT_TRUE(coord_->SetQuota("vision", 1 << 20).ok());
  ASSERT_TRUE(coord_->SetQuota("vision", 1 << 20).ok());
  ASSERT_TRUE(coord_->SetQuota("nlp", 5).ok());
  ASSERT_TRUE(coord_->SetQuota("nlp", 0).ok());  // removed

  Reopen();
  const proto::DatasetMeta m = Meta("imagenet");
  EXPECT_EQ(m.priority, proto::kPriorityHigh);
  EXPECT_TRUE(m.pinned);
  EXPECT_EQ(m.ttl_s, 0);
  EXPECT_EQ(m.tenant, "vision");
  const proto::QuotaListReply q = coord_->ListQuotas();
  ASSERT_EQ(q.quotas.size(), 1u);
  EXPECT_EQ(q.quotas[0].tenant, "vision");
  EXPECT_EQ(q.quotas[0].quota_bytes, 1u << 20);
  EXPECT_EQ(q.quotas[0].datasets, 1u);
  EXPECT_EQ(q.policy, "evict");
}

TEST_F(EvictionTest, AWarmEvictsTheLeastRecentlyReadAndAnEvictedDatasetComesBack) {
  Nodes(250000);  // two warm datasets fit, three do not
  const proto::DatasetMeta a = Add("a"), b = Add("b");
  Add("c");
  EXPECT_TRUE(Warm("a").empty());
  clock_.Advance(10s);
  EXPECT_TRUE(Warm("b").empty());
  clock_.Advance(10s);
  coord_->DatasetsRead({a.uid});  // b was never read: older than a
  EXPECT_EQ(Warm("c"), std::vector<std::string>{"b"});
  EXPECT_FALSE(Meta("b").resident);
  EXPECT_FALSE(Meta("b").warm);
  EXPECT_EQ(Meta("b").evictions, 1u);
  EXPECT_TRUE(Warm("c").empty()) << "warm again: nothing more to do";
  // Warming b again makes it resident, evicting the least recently read.
  clock_.Advance(10s);
  coord_->DatasetsRead({a.uid});
  EXPECT_EQ(Warm("b"), std::vector<std::string>{"c"});
  EXPECT_TRUE(Meta("b").resident);
  EXPECT_TRUE(Meta("b").warm);
  Reopen();
  EXPECT_FALSE(Meta("c").resident) << "an eviction is durable";
  EXPECT_EQ(Meta("a").last_read_unix, clock_.WallSeconds()) << "saved with the eviction's commit";
}

TEST_F(EvictionTest, PinnedAndLeasedDatasetsStayAndTheWarmFailsAtOnce) {
  Nodes(250000);
  Add("a");
  Add("b");
  Add("c");
  Warm("a");
  Warm("b");
  ASSERT_TRUE(coord_->SetDataset({.name = "a", .has_pinned = true, .pinned = true}).ok());
  ASSERT_TRUE(coord_->TakeLease({.dataset = "b", .job = "job-1", .ttl_s = 600}, "client").ok());
  Result<proto::WarmReply> r = coord_->Warm("c");
  ASSERT_EQ(r.status().code(), Code::kNoSpace);
  EXPECT_NE(r.status().message().find("does not fit: needs"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("pinned a"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("leased b"), std::string::npos) << r.status().message();
  EXPECT_FALSE(Meta("c").warm);
  EXPECT_TRUE(Meta("a").resident);
  EXPECT_TRUE(Meta("b").resident);
  ASSERT_TRUE(coord_->ReleaseLease({.dataset = "b", .job = "job-1"}).ok());
  EXPECT_EQ(Warm("c"), std::vector<std::string>{"b"});
}

TEST_F(EvictionTest, ADatasetNotReadForItsTtlIsEvicted) {
  Nodes(1 << 30);
  auto r = coord_->AddDataset({.name = "a", .source = "mem://data", .chunk_size = 65536, .ttl_s = 60});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Warm("a");
  Elapse(40s);
  coord_->DatasetsRead({r->meta.uid});
  Elapse(50s);  // read 50 s ago
  EXPECT_TRUE(Meta("a").resident);
  Elapse(15s);  // 65 s
  EXPECT_FALSE(Meta("a").resident);
  EXPECT_EQ(Meta("a").evictions, 1u);
  // Pinned: never.
  Warm("a");
  ASSERT_TRUE(coord_->SetDataset({.name = "a", .has_pinned = true, .pinned = true}).ok());
  Elapse(120s);
  EXPECT_TRUE(Meta("a").resident);
}

TEST_F(EvictionTest, LastReadTimesAreSavedAtMostAMinuteLate) {
  Nodes(1 << 30);
  const proto::DatasetMeta a = Add("a");
  clock_.Advance(5s);
  coord_->DatasetsRead({a.uid});
  const int64_t read_at = clock_.WallSeconds();
  Elapse(61s);
  Reopen();
  EXPECT_EQ(Meta("a").last_read_unix, read_at);
}

TEST_F(EvictionTest, QuotaRejectFailsAtOnceAndEvictEvictsWithinTheTenant) {
  Nodes(1 << 30);  // room for everything: only the quota binds
  for (const char* n : {"t1", "t2", "other"}) {
    ASSERT_TRUE(coord_->AddDataset({.name = n,
                                    .source = "mem://data",
                                    .chunk_size = 65536,
                                    .tenant = std::string(n) == "other" ? "default" : "team"})
                    .ok());
  }
  ASSERT_TRUE(coord_->SetQuota("team", 300000).ok());  // one dataset of 208,609
  Warm("other");
  EXPECT_TRUE(Warm("t1").empty());
  quota_policy_ = eviction::QuotaPolicy::kReject;
  Reopen();
  Result<proto::WarmReply> r = coord_->Warm("t2");
  ASSERT_EQ(r.status().code(), Code::kNoSpace);
  EXPECT_NE(r.status().message().find("would take tenant team over its quota"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("held by t1"), std::string::npos) << r.status().message();
  quota_policy_ = eviction::QuotaPolicy::kEvict;
  Reopen();
  EXPECT_EQ(Warm("t2"), std::vector<std::string>{"t1"}) << "the tenant's own, not the older \"other\"";
  const proto::QuotaListReply q = coord_->ListQuotas();
  ASSERT_EQ(q.quotas.size(), 2u);
  EXPECT_EQ(q.quotas[1].tenant, "team");
  EXPECT_EQ(q.quotas[1].used_bytes, 208609u);
}

}  // namespace
}  // namespace hoard

namespace hoard {
namespace {

// Job leases through the coordinator: on datasets that exist, journaled
// (a restart keeps them), expired by the coordinator's clock, gone with
// their dataset.
TEST_F(CoordinatorTest, LeasesSurviveARestartAndExpireByTheClock) {
  Add("ds");
  Result<proto::LeaseTakeReply> l = coord_->TakeLease({.dataset = "ds", .job = "j1", .ttl_s = 60}, "client");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(coord_->LeasedDatasets(), std::set<std::string>{"ds"});
  const uint64_t epoch = coord_->epoch();

  Result<proto::LeaseTakeReply> missing = coord_->TakeLease({.dataset = "nope", .job = "j1"}, "client");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("dataset nope does not exist"), std::string::npos);

  Reopen();
  EXPECT_EQ(coord_->LeasedDatasets(), std::set<std::string>{"ds"}) << "journaled";
  ASSERT_EQ(coord_->ListLeases().leases.size(), 1u);
  EXPECT_EQ(coord_->ListLeases().leases[0].key_class, "client");
  EXPECT_EQ(coord_->epoch(), epoch) << "a lease is not in the cluster map";
  ASSERT_EQ(coord_->GetStatus("")->leases.size(), 1u);

  Elapse(59s);
  EXPECT_EQ(coord_->LeasedDatasets(), std::set<std::string>{"ds"});
  Elapse(1s);
  EXPECT_TRUE(coord_->LeasedDatasets().empty()) << "expired after its ttl";
  Reopen();
  EXPECT_TRUE(coord_->ListLeases().leases.empty()) << "the expiry was journaled too";
}

TEST_F(CoordinatorTest, ReleaseIsIdempotentAndRemovingADatasetDropsItsLeases) {
  Add("a");
  Add("b");
  ASSERT_TRUE(coord_->TakeLease({.dataset = "a", .job = "j"}, "client").ok());
  ASSERT_TRUE(coord_->TakeLease({.dataset = "b", .job = "j"}, "client").ok());
  ASSERT_TRUE(coord_->TakeLease({.dataset = "b", .job = "k"}, "member").ok());
  Result<proto::LeaseReleaseReply> r = coord_->ReleaseLease({.dataset = "a", .job = "j"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->released, 1u);
  r = coord_->ReleaseLease({.dataset = "a", .job = "j"});
  ASSERT_TRUE(r.ok()) << "releasing what is not held is done";
  EXPECT_EQ(r->released, 0u);
  EXPECT_EQ(coord_->ReleaseLease({.job = ""}).status().code(), Code::kInvalidArgument);
  ASSERT_TRUE(coord_->RemoveDataset("b").ok());
  EXPECT_TRUE(coord_->ListLeases().leases.empty());
  Reopen();
  EXPECT_TRUE(coord_->ListLeases().leases.empty());
}

}  // namespace
}  // namespace hoard
