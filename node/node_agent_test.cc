// NodeAgent end to end in one process: a real coordinator and real agents on
// loopback ZeroMQ, an in-memory origin with fault injection.
#include "node/node_agent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/testing.h"
#include "testing/test_cluster.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

std::string Pattern(size_t n, int seed) { return testing::PseudoRandomBytes(n, seed); }

class NodeAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    cluster_ = std::make_unique<testing::TestCluster>(tmp_.path());
    ASSERT_TRUE(cluster_->Start([this](Coordinator::Options* o) { o->out_after = out_after_; }).ok());
    for (int i = 0; i < 20; ++i) {
      files_["small/f" + std::to_string(i)] = Pattern(1000 + i * 997, i);
    }
    files_["big.bin"] = Pattern(10 * 65536 + 123, 99);
    for (auto& [p, b] : files_) ASSERT_TRUE(origin().AddFile(p, b).ok());
  }

  NodeAgent* StartAgent(const std::string& name, uint64_t capacity = 0) {
    Result<NodeAgent*> a = cluster_->StartAgent(name, capacity, /*warm_retry_after=*/500ms);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : nullptr;
  }
  Coordinator& coord() { return cluster_->coordinator(); }
  MemOrigin& origin() { return cluster_->origin(); }

  proto::DatasetMeta AddDataset(const std::string& name = "ds", uint32_t replicas = 1) {
    auto r = coord().AddDataset({.name = name, .source = "mem://data", .chunk_size = 65536, .replicas = replicas});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r->meta;
  }

  proto::DatasetStatus Status(const std::string& name = "ds") { return coord().GetStatus(name)->datasets.at(0); }

  // Waits until every file of "ds" but `path` is cached and `path` is listed
  // as failed, with an error naming `code`; the dataset is then incomplete.
  void ExpectOnlyFailure(const std::string& path, const std::string& code) {
    ASSERT_TRUE(Eventually([&] {
      proto::DatasetStatus st = Status();
      return st.files_cached == st.meta.file_count - 1 && !st.failures.empty();
    }));
    proto::DatasetStatus st = Status();
    ASSERT_EQ(st.failures.size(), 1u);
    EXPECT_EQ(st.failures[0].path, path);
    EXPECT_NE(st.failures[0].error.find(code), std::string::npos) << st.failures[0].error;
    EXPECT_FALSE(st.complete);
  }

  Result<std::string> Get(NodeAgent* from, const proto::DatasetMeta& meta, const std::string& path, uint32_t index,
                          bool fill = true) {
    std::string bytes;
    auto view = from->view();
    const DatasetView* ds = view->dataset(meta.name);
    if (ds == nullptr) return Status::NotFound("no view");
    uint32_t entry = *ds->manifest.Resolve(path);
    ChunkKey key = ds->manifest.chunk_key(entry, index);
    proto::RpcClient client(cluster_->zmq(), from->endpoint());
    zmq::message_t payload;
    auto r = client.Call(proto::GetChunk{.dataset = meta.name, .uid = meta.uid, .version = meta.version,
                                         .entry = entry, .index = index, .key_lo = key.file.lo,
                                         .key_hi = key.file.hi, .fill = fill},
                         5s, &payload);
    if (!r.ok()) return r.status();
    return std::string(static_cast<const char*>(payload.data()), payload.size());
  }

  testing::TempDir tmp_{"hoard-agent"};
  std::unique_ptr<testing::TestCluster> cluster_;
  std::map<std::string, std::string> files_;
  std::chrono::seconds out_after_{std::chrono::minutes(5)};  // Coordinator::Options::out_after
};

TEST_F(NodeAgentTest, WarmFillsEveryOwnerWithExactlyItsChunks) {
  NodeAgent* a = StartAgent("node1");
  NodeAgent* b = StartAgent("node2");
  NodeAgent* c = StartAgent("node3");
  // Placement is over the registered members: let all three join first.
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; })) << Status().cached_bytes;
  proto::DatasetStatus st = Status();
  EXPECT_EQ(st.cached_bytes, meta.total_bytes);
  EXPECT_EQ(st.files_cached, meta.file_count);
  EXPECT_EQ(a->store()->usage().chunks + b->store()->usage().chunks + c->store()->usage().chunks,
            meta.total_chunks);
  // Each chunk was read from the origin once, by its owner.
  EXPECT_EQ(origin().TotalBytesRead(), meta.total_bytes);
  // Every node holds something (21 files, 31 chunks over 3 nodes).
  for (NodeAgent* n : {a, b, c}) EXPECT_GT(n->store()->usage().chunks, 0u);
}

// In a first warm-up nobody holds anything: after a few misses in a row a
// node stops asking its peers about the dataset, so a tree of small files
// does not cost one wasted peer round trip per file.
TEST_F(NodeAgentTest, AFirstWarmUpStopsAskingPeersThatHoldNothing) {
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(origin().AddFile("tiny/t" + std::to_string(i), Pattern(200 + i, 900 + i)).ok());
  std::vector<NodeAgent*> nodes = {StartAgent("node1"), StartAgent("node2"), StartAgent("node3")};
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s));
  uint64_t asked = 0;
  for (NodeAgent* n : nodes) asked += n->counters().requests.load();
  // Each node asks at most its two possible next-ranked peers 32 times each
  // (PeerSource::kBarrenAfter), plus what its two fetch threads had under way
  // when it stopped: at most 3 x 2 x 34 of the 631 chunks (without the skip,
  // every chunk: 631).
  EXPECT_LE(asked, 204u) << "of " << meta.total_chunks << " chunks";
  EXPECT_EQ(origin().TotalBytesRead(), meta.total_bytes);
}

// A node that joins a warm cluster gets its share (about 1/N of the chunks)
// from the nodes that held it, over ZeroMQ: the origin is not read again.
TEST_F(NodeAgentTest, AJoiningNodeCopiesItsShareFromPeersNotTheOrigin) {
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(origin().AddFile("more/m" + std::to_string(i), Pattern(3000 + i, 500 + i)).ok());
  StartAgent("node1");
  StartAgent("node2");
  StartAgent("node3");
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  const uint64_t read_before = origin().TotalBytesRead();
  ASSERT_EQ(read_before, meta.total_bytes);

  NodeAgent* d = StartAgent("node4");
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 4; }));
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s)) << Status().cached_bytes;
  const uint64_t moved = d->store()->usage().chunks;
  // 91 chunks over 4 nodes: the newcomer owns about a quarter.
  EXPECT_GT(moved, meta.total_chunks / 8);
  EXPECT_LT(moved, meta.total_chunks / 2);
  EXPECT_EQ(origin().TotalBytesRead(), read_before) << "the join re-read the origin";
  uint64_t held = 0;
  d->store()->ForEach([&](const ChunkKey&, uint64_t, uint64_t length) { held += length; });
  EXPECT_EQ(d->Counters().at("peer_fill_bytes"), held) << "every byte the newcomer holds came from a peer";
  // Once the newcomer holds its share, the old owners drop the chunks they
  // gave up: one copy of each chunk in the cluster again, none lost.
  auto total = [&] {
    uint64_t n = 0;
    for (const char* name : {"node1", "node2", "node3", "node4"}) n += cluster_->agent(name)->store()->usage().chunks;
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return total() == meta.total_chunks; })) << total();
  EXPECT_TRUE(Status().complete);
}

// A node whose map is behind the requester's (its heartbeat has not brought
// the change yet) refreshes it before it decides what it owns; a requester
// that is behind is served, and learns the newer epoch from the reply.
TEST_F(NodeAgentTest, PlacementEpochsInRequestsBringStalePartiesUpToDate) {
  proto::DatasetMeta meta = AddDataset();
  Result<NodeAgent*> slow = cluster_->StartAgent("node1", 0, 30s, /*heartbeat_interval=*/1h);
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(Eventually([&] { return (*slow)->view()->dataset("ds") != nullptr; }));
  const uint64_t old_epoch = (*slow)->view()->map().placement_epoch;
  StartAgent("node2");
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 2; }));
  const proto::ClusterMap now = coord().GetClusterMap();
  ASSERT_LT(old_epoch, now.placement_epoch);

  const std::shared_ptr<const ClusterView> view = (*slow)->view();
  auto ask = [&](uint64_t placement_epoch) {
    const DatasetView* ds = view->dataset("ds");
    const uint32_t entry = *ds->manifest.Resolve("big.bin");
    const ChunkKey key = ds->manifest.chunk_key(entry, 0);
    proto::RpcClient client(cluster_->zmq(), (*slow)->endpoint());
    zmq::message_t payload;
    return client.Call(proto::GetChunk{.dataset = "ds", .uid = meta.uid, .version = meta.version, .entry = entry,
                                       .index = 0, .key_lo = key.file.lo, .key_hi = key.file.hi,
                                       .placement_epoch = placement_epoch},
                       5s, &payload);
  };
  Result<proto::ChunkData> behind = ask(1);
  ASSERT_TRUE(behind.ok()) << behind.status().ToString();
  EXPECT_EQ(behind->placement_epoch, old_epoch) << "an older requester is no reason to refresh";
  EXPECT_EQ((*slow)->view()->map().placement_epoch, old_epoch);
  Result<proto::ChunkData> ahead = ask(now.placement_epoch);
  ASSERT_TRUE(ahead.ok()) << ahead.status().ToString();
  EXPECT_EQ(ahead->placement_epoch, now.placement_epoch);
  EXPECT_EQ((*slow)->view()->map().placement_epoch, now.placement_epoch);
  EXPECT_EQ((*slow)->view()->map().nodes.size(), 2u);
}

// Draining a node moves its chunks to their new owners, copied from it; then
// it can go and nothing is lost. Undrain gives it its share back.
TEST_F(NodeAgentTest, ADrainedNodeHandsItsChunksToPeersAndCanLeave) {
  NodeAgent* a = StartAgent("node1");
  StartAgent("node2");
  NodeAgent* c = StartAgent("node3");
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  const uint64_t read_before = origin().TotalBytesRead();
  ASSERT_GT(cluster_->agent("node2")->store()->usage().chunks, 0u);

  Result<proto::NodeDrainReply> d = coord().SetDraining("node2", true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->node.draining);
  EXPECT_EQ(proto::PlacementWeight(d->node), 0);
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s)) << Status().cached_bytes;
  EXPECT_EQ(origin().TotalBytesRead(), read_before) << "the drain re-read the origin";
  EXPECT_GE(a->store()->usage().chunks + c->store()->usage().chunks, meta.total_chunks);
  // Every chunk is on its new owner: the drained node drops its copies.
  EXPECT_TRUE(Eventually([&] { return cluster_->agent("node2")->store()->usage().chunks == 0; }));

  // Gone for good: every chunk is still there, on its owner.
  cluster_->StopAgent("node2");
  auto view = a->view();
  const DatasetView* ds = view->dataset("ds");
  ASSERT_NE(ds, nullptr);
  for (const auto& [path, bytes] : files_) {
    const uint32_t entry = *ds->manifest.Resolve(path);
    for (uint32_t i = 0; i < ds->manifest.chunk_count(entry); ++i) {
      const auto owners = view->placement().Owners(ds->manifest.chunk_key(entry, i), 1);
      NodeAgent* owner = cluster_->agent(view->node(owners[0]).name);
      Result<std::string> got = Get(owner, meta, path, i, /*fill=*/false);
      ASSERT_TRUE(got.ok()) << path << " chunk " << i << ": " << got.status().ToString();
      EXPECT_TRUE(*got == bytes.substr(uint64_t(i) * 65536, 65536)) << path;
    }
  }
  EXPECT_EQ(coord().SetDraining("nobody", true).status().code(), Code::kNotFound);
  Result<proto::NodeDrainReply> back = coord().SetDraining("node2", false);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->node.draining);
  EXPECT_GT(proto::PlacementWeight(back->node), 0);
}

// A node that dies is marked down after the timeout; its chunks get new
// owners, which refill them from the surviving replicas, not the origin.
// A coordinator that puts a node out as soon as it is down (--out-after 0):
// its chunks get new owners at once.
class NodeAgentOutAtOnceTest : public NodeAgentTest {
 protected:
  void SetUp() override {
    out_after_ = std::chrono::seconds(0);
    NodeAgentTest::SetUp();
  }
};

TEST_F(NodeAgentOutAtOnceTest, ADeadNodesChunksAreRefilledFromSurvivingReplicas) {
  StartAgent("node1");
  StartAgent("node2");
  StartAgent("node3");
  StartAgent("node4");
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 4; }));
  proto::DatasetMeta meta = AddDataset("ds", /*replicas=*/2);
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s));
  const uint64_t read_before = origin().TotalBytesRead();
  EXPECT_LE(read_before, 2 * meta.total_bytes);

  cluster_->StopAgent("node3");
  // Marked down after the coordinator's timeout (5 s), then whole again on
  // the three survivors.
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& n : coord().GetClusterMap().nodes) {
          if (n.name == "node3") return !n.up;
        }
        return false;
      },
      15s));
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s)) << Status().cached_bytes;
  EXPECT_EQ(Status().cached_bytes, 2 * meta.total_bytes);
  EXPECT_EQ(origin().TotalBytesRead(), read_before) << "the lost copies were refilled from the origin";
  uint64_t chunks = 0;
  for (const char* n : {"node1", "node2", "node4"}) chunks += cluster_->agent(n)->store()->usage().chunks;
  EXPECT_GE(chunks, 2 * meta.total_chunks);
}

TEST_F(NodeAgentTest, ServesPeersFromCacheAndReadsThroughOnAMiss) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  // Cold: the owner reads through, caches, serves.
  Result<std::string> got = Get(a, meta, "big.bin", 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, files_["big.bin"].substr(3 * 65536, 65536));
  EXPECT_EQ(a->counters().origin_bytes.load(), 65536u);
  // Warm: from the store, no second origin read.
  got = Get(a, meta, "big.bin", 3);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(a->counters().cache_hits.load(), 1u);
  EXPECT_EQ(origin().BytesRead("big.bin"), 65536u);
  // The last, short chunk.
  got = Get(a, meta, "big.bin", 10);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, files_["big.bin"].substr(10 * 65536));
  // Without fill a miss is NotFound.
  EXPECT_EQ(Get(a, meta, "small/f1", 0, /*fill=*/false).status().code(), Code::kNotFound);
}

// The metrics read the counters the agent keeps: a read through moves the
// origin series and the origin latency histogram, a hit the disk series.
TEST_F(NodeAgentTest, MetricsShowReadsThroughAndHits) {
  NodeAgent* a = StartAgent("node1");
  metrics::Registry registry;
  a->RegisterMetrics(&registry);
  auto has = [&](const std::string& line) { return registry.Render().find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("hoard_node_served_bytes_total{source=\"origin\"} 0"));
  EXPECT_TRUE(has("hoard_origin_read_seconds_count 0"));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  ASSERT_TRUE(Get(a, meta, "big.bin", 3).ok());
  ASSERT_TRUE(Get(a, meta, "big.bin", 3).ok());
  EXPECT_TRUE(has("hoard_node_served_bytes_total{source=\"origin\"} 65536")) << registry.Render();
  EXPECT_TRUE(has("hoard_node_served_bytes_total{source=\"disk\"} 65536"));
  EXPECT_TRUE(has("hoard_node_fill_bytes_total{source=\"origin\"} 65536"));
  EXPECT_TRUE(has("hoard_node_chunk_requests_total 2"));
  EXPECT_TRUE(has("hoard_node_hit_ratio 0.5"));
  EXPECT_TRUE(has("hoard_origin_read_seconds_count 1"));
  EXPECT_TRUE(has("hoard_store_chunks 1"));
  EXPECT_TRUE(has("hoard_store_evicted_chunks_total 0"));
}

TEST_F(NodeAgentTest, ConcurrentMissesReadTheOriginOnce) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  origin().SetDelay(100ms);
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      Result<std::string> r = Get(a, meta, "big.bin", 0);
      if (r.ok() && *r == files_["big.bin"].substr(0, 65536)) ++ok;
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(origin().ReadCount("big.bin"), 1u);
}

TEST_F(NodeAgentTest, CorruptChunkIsDroppedAndFetchedAgain) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  // Flip a byte in the middle of a stored chunk file.
  const DatasetView* ds = a->view()->dataset("ds");
  ChunkKey key = ds->manifest.chunk_key(*ds->manifest.Resolve("big.bin"), 2);
  std::string path = ChunkStore::ChunkPath(a->store()->dir(), key);
  {
    UniqueFd fd(::open(path.c_str(), O_RDWR));
    ASSERT_TRUE(fd.valid()) << path;
    char c;
    ASSERT_EQ(::pread(fd.get(), &c, 1, 1000), 1);
    c ^= 0x40;
    ASSERT_EQ(::pwrite(fd.get(), &c, 1, 1000), 1);
  }
  // Reopen the store's view of the chunk: a restarted agent verifies on first read.
  a = StartAgent("node1");
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  const uint64_t before = origin().BytesRead("big.bin");
  Result<std::string> got = Get(a, meta, "big.bin", 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, files_["big.bin"].substr(2 * 65536, 65536)) << "served the origin's bytes, not the corrupt ones";
  EXPECT_EQ(origin().BytesRead("big.bin") - before, 65536u) << "refetched from the origin";
  // And cached again, correctly.
  got = Get(a, meta, "big.bin", 2, /*fill=*/false);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, files_["big.bin"].substr(2 * 65536, 65536));
}

TEST_F(NodeAgentTest, FullStoreReportsAClearFailureAndStillServes) {
  NodeAgent* a = StartAgent("node1", /*capacity=*/200 * 1024);
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return !Status().failures.empty(); })) << "no failure reported";
  proto::DatasetStatus st = Status();
  EXPECT_FALSE(st.complete);
  EXPECT_NE(st.failures[0].error.find("NoSpace"), std::string::npos) << st.failures[0].error;
  EXPECT_LE(a->store()->usage().used_bytes, 200u * 1024);
  // Reads are served even though nothing more can be cached.
  for (uint32_t i = 0; i <= 10; ++i) {
    Result<std::string> got = Get(a, meta, "big.bin", i);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, files_["big.bin"].substr(i * 65536, 65536));
  }
}

// One capacity for everything on the node's disk (store/disk_usage.h): the
// node reports its datasets, its checkpoint copies and the mount's read tier
// apart and in total, counts the checkpoints in the chunk store's admission
// (they are never dropped to make room), and counts the read tier only up to
// what the warm-ups leave it, which it tells the mount.
TEST_F(NodeAgentTest, ReportsWhatItsDiskHoldsByKindAndWarmUpsYieldToCheckpoints) {
  constexpr uint64_t kCapacity = 700 * 1024;
  NodeAgent* a = StartAgent("node1", kCapacity);
  ASSERT_NE(a, nullptr);
  // 300 KB of checkpoint replicas, and a read tier that says it holds 50 KB
  // (the mount's file: this test has no mount).
  const std::string ckpt = Pattern(100'000, 7);
  for (uint32_t i = 0; i < 3; ++i) {
    // An id the coordinator has not given out yet: the drainer keeps it.
    ASSERT_TRUE(a->replicas()->Put(1000, 1, i, Checksum64(ckpt.data(), ckpt.size()), ckpt).ok());
  }
  const uint64_t ckpt_bytes = a->replicas()->usage().chunk_bytes;
  ASSERT_GE(ckpt_bytes, 300'000u);
  const std::string tier_dir = DefaultReadTierDir(a->store()->dir());
  ASSERT_TRUE(MakeDirs(tier_dir).ok());
  ASSERT_TRUE(WriteReadTierUsage(ReadTierUsagePath(tier_dir), {.used_bytes = 50'000, .reserved_bytes = 60'000}).ok());

  auto node_info = [&] {
    // Held in a local: a range-for over GetStatus("")->nodes would iterate a
    // destroyed temporary (operator-> extends no lifetime).
    const Result<proto::ClusterStatusReply> status = coord().GetStatus("");
    if (!status.ok()) return proto::NodeInfo{};
    for (const proto::NodeInfo& n : status->nodes) {
      if (n.name == "node1") return n;
    }
    return proto::NodeInfo{};
  };
  // The next heartbeat reports them.
  proto::NodeInfo n;
  ASSERT_TRUE(Eventually([&] {
    n = node_info();
    return n.used_checkpoint_bytes > 0 && n.used_read_tier_bytes > 0;
  }));
  EXPECT_EQ(n.used_dataset_bytes, 0u);
  EXPECT_EQ(n.used_checkpoint_bytes, ckpt_bytes);
  EXPECT_EQ(n.used_read_tier_bytes, 50'000u);
  EXPECT_EQ(n.used_bytes, ckpt_bytes + 50'000u);
  EXPECT_EQ(a->usage(), (NodeUsage{.dataset_bytes = 0, .read_tier_bytes = 50'000, .checkpoint_bytes = ckpt_bytes}));
  // No warm-up yet: the tier's reservation counts in full.
  EXPECT_EQ(a->store()->usage().other_bytes, ckpt_bytes + 60'000u);
  Result<NodeUsageRecord> published = ReadNodeUsage(NodeUsagePath(a->store()->dir()));
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->capacity_bytes, kCapacity);
  EXPECT_EQ(published->usage, a->usage());
  EXPECT_EQ(ReadTierAllowance(*published), kCapacity - ckpt_bytes);

  // A warm-up of ~900 KB on a node with ~400 KB left: what does not fit is a
  // NoSpace failure, never a checkpoint copy dropped. The node wants the whole
  // dataset, so the tier is left nothing: the warm-up does not wait for it.
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return !Status().failures.empty(); })) << "no failure reported";
  EXPECT_NE(Status().failures[0].error.find("NoSpace"), std::string::npos) << Status().failures[0].error;
  ASSERT_TRUE(Eventually([&] {
    published = ReadNodeUsage(NodeUsagePath(a->store()->dir()));
    return published.ok() && published->dataset_wanted_bytes > 0;
  }));
  EXPECT_EQ(published->dataset_wanted_bytes, meta.total_bytes);
  EXPECT_EQ(ReadTierAllowance(*published), 0u) << "the tier yields to the warm-up";
  EXPECT_EQ(a->store()->usage().other_bytes, ckpt_bytes);
  // Failed chunks are tried again every 500 ms: the figures settle once the
  // store is as full as the checkpoints let it be.
  ASSERT_TRUE(Eventually([&] {
    n = node_info();
    return !a->store()->usage().Fits(65536) && n.used_dataset_bytes == a->store()->usage().used_bytes;
  }));
  const uint64_t dataset_bytes = n.used_dataset_bytes;
  EXPECT_GT(dataset_bytes, 0u);
  EXPECT_LE(dataset_bytes + ckpt_bytes, kCapacity);
  EXPECT_EQ(a->replicas()->usage().chunk_bytes, ckpt_bytes) << "no checkpoint copy was dropped to make room";
  EXPECT_EQ(n.used_bytes, dataset_bytes + ckpt_bytes + 50'000u);
}

// A node with three times the disk owns about three times the chunks.
TEST_F(NodeAgentTest, PlacementFollowsCapacity) {
  // 2,000 chunks: the ratio is then within its bounds by more than 6 standard
  // deviations, whatever the dataset uid (with 300, about one run in 70 fell
  // outside).
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(origin().AddFile("c/" + std::to_string(i), Pattern(100, i)).ok());
  NodeAgent* small = StartAgent("small", 8 << 20);
  NodeAgent* large = StartAgent("large", 24 << 20);
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 2; }));
  AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }, 20s));
  const double ratio = double(large->store()->usage().chunks) / double(small->store()->usage().chunks);
  EXPECT_GT(ratio, 2.2) << large->store()->usage().chunks << " vs " << small->store()->usage().chunks;
  EXPECT_LT(ratio, 4.2) << large->store()->usage().chunks << " vs " << small->store()->usage().chunks;
}

// A dataset larger than the whole cache: what fits stays cached, the rest is
// read through from the origin on every pass, and nothing is evicted to make
// room (an LRU would evict and refetch every chunk of every pass).
TEST_F(NodeAgentTest, ADatasetLargerThanTheCacheKeepsAStableSubsetWithoutThrashing) {
  for (int i = 0; i < 40; ++i) {
    const std::string path = "more/" + std::to_string(i);
    files_[path] = Pattern(40000 + i, 700 + i);
    ASSERT_TRUE(origin().AddFile(path, files_[path]).ok());
  }
  // No warm-up retries during the test: one scan fills what fits.
  NodeAgent* a = *cluster_->StartAgent("node1", 400 * 1024, /*warm_retry_after=*/1h);
  NodeAgent* b = *cluster_->StartAgent("node2", 400 * 1024, /*warm_retry_after=*/1h);
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 2; }));
  proto::DatasetMeta meta = AddDataset();
  ASSERT_GT(meta.total_bytes, 3 * 800u * 1024);
  ASSERT_TRUE(coord().Warm("ds").ok());
  auto cached = [&] {
    std::set<std::string> keys;
    for (NodeAgent* n : {a, b}) n->store()->ForEach([&](const ChunkKey& k, uint64_t, uint64_t) { keys.insert(k.Name()); });
    return keys;
  };
  // Warm-up fills what fits, reports a clear failure for the rest, and stops.
  ASSERT_TRUE(Eventually([&] { return !Status().failures.empty(); }, 20s));
  // Both warm-ups have done their one scan (no rescan for an hour).
  ASSERT_TRUE(a->WaitWarmerIdle(20s));
  ASSERT_TRUE(b->WaitWarmerIdle(20s));
  std::set<std::string> before = cached();
  ASSERT_GT(before.size(), 4u);

  auto view = a->view();
  const DatasetView* ds = view->dataset("ds");
  // Bytes of the chunks of the dataset that are not in `cached`.
  auto bytes_outside = [&](const std::set<std::string>& cached) {
    uint64_t n = 0;
    for (const auto& [path, bytes] : files_) {
      const uint32_t entry = *ds->manifest.Resolve(path);
      for (uint32_t i = 0; i < ds->manifest.chunk_count(entry); ++i) {
        if (!cached.count(ds->manifest.chunk_key(entry, i).Name())) n += ChunkLength(bytes.size(), 65536, i);
      }
    }
    return n;
  };
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t read_before = origin().TotalBytesRead();
    for (const auto& [path, bytes] : files_) {
      const uint32_t entry = *ds->manifest.Resolve(path);
      for (uint32_t i = 0; i < ds->manifest.chunk_count(entry); ++i) {
        const auto owners = view->placement().Owners(ds->manifest.chunk_key(entry, i), 1);
        Result<std::string> got = Get(cluster_->agent(view->node(owners[0]).name), meta, path, i);
        ASSERT_TRUE(got.ok()) << path << ": " << got.status().ToString();
        ASSERT_TRUE(*got == bytes.substr(uint64_t(i) * 65536, 65536)) << path << " chunk " << i;
      }
    }
    const uint64_t read = origin().TotalBytesRead() - read_before;
    const std::set<std::string> after = cached();
    // Nothing was evicted. A chunk that still fits may have been added by
    // its read-through (the warm-up's capacity checks race with its fills in
    // flight, so it can stop short of full), never one taken out.
    EXPECT_TRUE(std::includes(after.begin(), after.end(), before.begin(), before.end()))
        << "pass " << pass << " evicted chunks";
    // What was cached was served from the cache; what was not was read
    // through once (less what a late fill had already brought in).
    EXPECT_LE(read, bytes_outside(before)) << "pass " << pass << ": a cached chunk was fetched again";
    EXPECT_GE(read, bytes_outside(after)) << "pass " << pass << ": an uncached chunk was not read through";
    EXPECT_GT(read, 0u);
    before = after;
  }
}

TEST_F(NodeAgentTest, MissingOriginFileIsAPerFileFailure) {
  NodeAgent* a = StartAgent("node1");
  (void)a;
  AddDataset();
  ASSERT_TRUE(origin().Remove("small/f3").ok());
  ASSERT_TRUE(coord().Warm("ds").ok());
  ExpectOnlyFailure("small/f3", "NotFound");
}

TEST_F(NodeAgentTest, ChangedOriginFileIsStaleNeverMixed) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  MemAttributes newer;
  newer.mtime_ns += 1'000'000'000;
  ASSERT_TRUE(origin().AddFile("big.bin", Pattern(10 * 65536 + 123, 7), newer).ok());
  Result<std::string> got = Get(a, meta, "big.bin", 0);
  EXPECT_EQ(got.status().code(), Code::kStale) << got.status().ToString();
}

TEST_F(NodeAgentTest, RemovedDatasetLosesItsChunks) {
  NodeAgent* a = StartAgent("node1");
  AddDataset("keep");
  AddDataset("drop");
  ASSERT_TRUE(coord().Warm("keep").ok());
  ASSERT_TRUE(coord().Warm("drop").ok());
  ASSERT_TRUE(Eventually([&] { return Status("keep").complete && Status("drop").complete; }));
  const uint64_t both = a->store()->usage().chunks;
  ASSERT_TRUE(coord().RemoveDataset("drop").ok());
  ASSERT_TRUE(Eventually([&] { return a->store()->usage().chunks == both / 2; })) << a->store()->usage().chunks;
  EXPECT_TRUE(Status("keep").complete);
}

TEST_F(NodeAgentTest, BadRequestsGetClearErrors) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(Eventually([&] { return a->view()->dataset("ds") != nullptr; }));
  proto::RpcClient client(cluster_->zmq(), a->endpoint());
  auto unknown = client.Call(proto::GetChunk{.dataset = "nope", .uid = 1, .version = 1}, 5s);
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  auto bad_entry = client.Call(proto::GetChunk{.dataset = "ds", .uid = meta.uid, .version = 1, .entry = 99999}, 5s);
  EXPECT_EQ(bad_entry.status().code(), Code::kInvalidArgument);
  const DatasetView* ds = a->view()->dataset("ds");
  uint32_t entry = *ds->manifest.Resolve("big.bin");
  auto wrong_key = client.Call(
      proto::GetChunk{.dataset = "ds", .uid = meta.uid, .version = 1, .entry = entry, .key_lo = 1, .key_hi = 2}, 5s);
  EXPECT_EQ(wrong_key.status().code(), Code::kStale);
}

TEST_F(NodeAgentTest, RestartedAgentResumesWithoutRefetching) {
  StartAgent("node1");
  proto::DatasetMeta meta = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  const uint64_t read = origin().TotalBytesRead();
  NodeAgent* again = StartAgent("node1");  // restarts it
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  // Its warm-up has scanned every owned chunk and found nothing to fetch.
  ASSERT_TRUE(again->WaitWarmerIdle(20s));
  EXPECT_EQ(origin().TotalBytesRead(), read) << "a restart must not refetch cached chunks";
  (void)meta;
}

// ---- dataset refresh ---------------------------------------------------------

// After `dataset refresh`, owners fetch only the files that changed or were
// added (unchanged files keep their keys, so their cached chunks count), and
// drop the chunks of the old versions of changed files and of removed files.
TEST_F(NodeAgentTest, ARefreshFetchesOnlyWhatChangedAndDropsWhatIsGone) {
  std::vector<NodeAgent*> agents{StartAgent("node1"), StartAgent("node2"), StartAgent("node3")};
  ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
  proto::DatasetMeta v1 = AddDataset("ds", /*replicas=*/2);
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; })) << Status().cached_bytes;
  auto stored = [&] {
    uint64_t n = 0;
    for (NodeAgent* a : agents) n += a->store()->usage().chunks;
    return n;
  };
  ASSERT_EQ(stored(), v1.total_chunks * 2);

  // big.bin: the same size, new bytes and mtime; small/f7: a new size;
  // small/f3 gone; extra.bin new.
  MemAttributes later;
  later.mtime_ns += 1'000'000'000;
  const std::string big = Pattern(files_["big.bin"].size(), 1234);
  const std::string f7 = Pattern(4321, 77);
  const std::string extra = Pattern(2 * 65536 + 5, 55);
  ASSERT_TRUE(origin().AddFile("big.bin", big, later).ok());
  ASSERT_TRUE(origin().AddFile("small/f7", f7).ok());
  ASSERT_TRUE(origin().Remove("small/f3").ok());
  ASSERT_TRUE(origin().AddFile("extra.bin", extra).ok());
  origin().ResetCounters();

  auto r = coord().RefreshDataset("ds");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->changed);
  EXPECT_EQ(r->files_changed, 2u);
  EXPECT_EQ(r->files_added, 1u);
  EXPECT_EQ(r->files_removed, 1u);
  EXPECT_EQ(r->fetch_bytes, big.size() + f7.size() + extra.size());
  const proto::DatasetMeta v2 = r->meta;
  ASSERT_TRUE(Eventually([&] {
    proto::DatasetStatus st = Status();
    return st.meta.version == 2 && st.complete;
  }, 20s)) << Status().cached_bytes;
  proto::DatasetStatus st = Status();
  EXPECT_EQ(st.files_cached, v2.file_count);
  EXPECT_EQ(st.cached_bytes, v2.total_bytes * 2);
  EXPECT_TRUE(st.failures.empty());

  // The origin was read for the changed and added files only (at most once
  // per copy: a second owner may copy a chunk from the first).
  for (const auto& [path, bytes] : files_) {
    if (path != "big.bin" && path != "small/f7" && path != "small/f3") {
      EXPECT_EQ(origin().BytesRead(path), 0u) << path << " did not change but was fetched again";
    }
  }
  EXPECT_GE(origin().BytesRead("big.bin"), big.size());
  EXPECT_GE(origin().BytesRead("small/f7"), f7.size());
  EXPECT_GE(origin().BytesRead("extra.bin"), extra.size());
  EXPECT_LE(origin().TotalBytesRead(), r->fetch_bytes * 2);

  // Exactly the new version's chunks are left, two copies each.
  ASSERT_TRUE(Eventually([&] { return stored() == v2.total_chunks * 2; })) << stored();
  auto view = agents[0]->view();
  const Manifest& m2 = view->dataset("ds")->manifest;
  std::set<FileKey> keys;
  for (uint32_t e = 0; e < m2.entry_count(); ++e) {
    if (m2.entry(e).is_file()) keys.insert(m2.entry(e).file_key());
  }
  for (NodeAgent* a : agents) {
    a->store()->ForEach([&](const ChunkKey& key, uint64_t uid, uint64_t) {
      EXPECT_EQ(uid, v1.uid);
      EXPECT_TRUE(keys.count(key.file)) << "chunk " << key.Name() << " of an old version is still stored";
    });
  }
  // And they serve the new bytes.
  for (NodeAgent* a : agents) {
    Result<std::string> got = Get(a, v2, "big.bin", 0);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == big.substr(0, 65536));
  }
}

// A file that changed at the origin fails the warm-up (kStale, never mixed);
// the refresh that adopts it clears the failure and caches the new bytes.
TEST_F(NodeAgentTest, AFileThatChangedFailsUntilTheRefreshAdoptsIt) {
  NodeAgent* a = StartAgent("node1");
  AddDataset();
  MemAttributes later;
  later.mtime_ns += 1'000'000'000;
  const std::string f5 = Pattern(files_["small/f5"].size(), 555);
  ASSERT_TRUE(origin().AddFile("small/f5", f5, later).ok());
  ASSERT_TRUE(coord().Warm("ds").ok());
  ExpectOnlyFailure("small/f5", "Stale");

  auto r = coord().RefreshDataset("ds");
  ASSERT_TRUE(r.ok() && r->changed) << r.status().ToString();
  EXPECT_EQ(r->files_changed, 1u);
  EXPECT_EQ(r->fetch_bytes, f5.size());
  ASSERT_TRUE(Eventually([&] {
    proto::DatasetStatus s = Status();
    return s.meta.version == 2 && s.complete && s.failures.empty();
  })) << Status().failures.size();
  Result<std::string> got = Get(a, r->meta, "small/f5", 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == f5);
}

// A node that was down during a refresh drops the stale chunks when it
// starts on the new version; its unchanged chunks count at once.
TEST_F(NodeAgentTest, ANodeRestartedAfterARefreshDropsWhatTheVersionNoLongerHas) {
  NodeAgent* a = StartAgent("node1");
  proto::DatasetMeta v1 = AddDataset();
  ASSERT_TRUE(coord().Warm("ds").ok());
  ASSERT_TRUE(Eventually([&] { return Status().complete; }));
  (void)a;
  cluster_->StopAgent("node1");
  ASSERT_TRUE(origin().Remove("big.bin").ok());
  auto r = coord().RefreshDataset("ds");
  ASSERT_TRUE(r.ok() && r->changed) << r.status().ToString();
  EXPECT_EQ(r->fetch_bytes, 0u);
  origin().ResetCounters();
  a = StartAgent("node1");
  ASSERT_TRUE(Eventually([&] { return Status().meta.version == 2 && Status().complete; }));
  EXPECT_TRUE(Eventually([&] { return a->store()->usage().chunks == r->meta.total_chunks; }))
      << a->store()->usage().chunks << " chunks, want " << r->meta.total_chunks;
  EXPECT_EQ(origin().TotalBytesRead(), 0u);
  (void)v1;
}

// The checkpoint chunk RPCs over real ZeroMQ: a replica sent with
// PutCkptChunk is on disk and served back; the mount's whole-file copy serves
// a chunk only while it holds the committed bytes.
TEST_F(NodeAgentTest, ServesCheckpointChunksItStoredAndFromTheWholeFileCopy) {
  NodeAgent* n1 = StartAgent("node1");
  ASSERT_NE(n1, nullptr);
  proto::RpcClient client(cluster_->zmq(), n1->endpoint());
  const std::string chunk = Pattern(70000, 5);
  const uint64_t sum = Checksum64(chunk.data(), chunk.size());
  const std::string_view body(chunk);

  auto put = [&](uint64_t checksum, const std::string_view* payload) {
    return client.Call(proto::PutCkptChunk{.id = 3, .gen = 2, .index = 1, .checksum = checksum}, 5s, nullptr,
                       payload);
  };
  EXPECT_EQ(put(sum ^ 1, &body).status().code(), Code::kCorruption);
  EXPECT_EQ(put(sum, nullptr).status().code(), Code::kInvalidArgument);
  Result<proto::CkptPutReply> stored = put(sum, &body);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->stored_bytes, chunk.size());
  EXPECT_TRUE(n1->replicas()->HasReplica(3, 2, 1, sum));

  auto get = [&](uint64_t id, uint32_t index, uint64_t checksum, uint64_t length) -> Result<std::string> {
    zmq::message_t payload;
    Result<proto::CkptChunkData> r = client.Call(proto::GetCkptChunk{.id = id, .gen = 2, .index = index,
                                                                     .checksum = checksum, .chunk_size = 70000,
                                                                     .chunk_length = length},
                                                 5s, &payload);
    if (!r.ok()) return r.status();
    EXPECT_EQ(r->chunk_length, length);
    return std::string(static_cast<const char*>(payload.data()), payload.size());
  };
  Result<std::string> got = get(3, 1, sum, chunk.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, chunk);
  EXPECT_EQ(get(3, 1, sum ^ 1, chunk.size()).status().code(), Code::kNotFound);
  EXPECT_EQ(get(3, 0, sum, chunk.size()).status().code(), Code::kNotFound);

  // Chunk 1 of file 4 from the whole-file copy written by this node's mount.
  const std::string file = Pattern(100000, 6);
  const std::string c1 = file.substr(70000);
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(n1->store()->dir(), 4), file).ok());
  got = get(4, 1, Checksum64(c1.data(), c1.size()), c1.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, c1);
  ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(n1->store()->dir(), 4), Pattern(100000, 7)).ok());
  EXPECT_EQ(get(4, 1, Checksum64(c1.data(), c1.size()), c1.size()).status().code(), Code::kNotFound);
  EXPECT_GE(n1->Counters().at("ckpt_replica_bytes"), chunk.size());
}

}  // namespace
}  // namespace hoard
