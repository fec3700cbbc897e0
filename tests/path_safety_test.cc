// No path on disk is built from an untrusted name without checking it.
//
// Names reach hoard from two untrusted places: the wire (every request that
// carries a dataset, node, job or checkpoint name, from whoever holds a key)
// and the origin (whatever names an NFS server or a broken origin returns).
// This test sends every such field a list of hostile names (".." components,
// absolute paths, NUL bytes, empty and over-long names) through the real RPC
// path to a coordinator and a node agent, and walks hostile origin names
// through `dataset add`. Each must be refused with an error, and afterwards no
// file may exist outside the cluster's own directories, nor at any absolute
// path a name spelled.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "testing/test_cluster.h"
#include "proto/rpc_client.h"

namespace hoard {
namespace {

using namespace std::chrono_literals;

// Absolute targets the hostile names aim at; none may exist after the test.
std::string AbsTarget() { return "/tmp/hoard-path-safety-" + std::to_string(::getpid()); }

std::vector<std::string> HostileNames() {
  const std::string abs = AbsTarget();
  return {
      "..",
      ".",
      "",
      "../escape",
      "../../../../../../escape",
      "job/../../escape",
      "a/../../../escape",
      abs,
      abs + "/x",
      "/",
      "a//b",
      "a/",
      std::string("a\0b", 3),
      std::string("\0", 1),
      std::string("job\0/../../escape", 17),
      std::string(300, 'x'),
      "x/" + std::string(300, 'y'),
  };
}

// Every regular file and directory below `root`, relative to it.
std::set<std::string> Tree(const std::string& root) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    out.insert(std::filesystem::relative(it->path(), root).string());
  }
  return out;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '\0') ? std::string("\\0") : std::string(1, c);
  return out.size() > 40 ? out.substr(0, 40) + "...(" + std::to_string(s.size()) + " bytes)" : out;
}

class PathSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    ASSERT_TRUE(MakeDirs(JoinPath(root_, "outside")).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "outside/secret"), "untouched").ok());
    cluster_ = std::make_unique<testing::TestCluster>(JoinPath(root_, "cluster"));
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_TRUE(cluster_->origin().AddFile("dir/file", "bytes of a good file").ok());
    auto agent = cluster_->StartAgent("node1");
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    node_endpoint_ = (*agent)->endpoint();
    auto good = cluster_->coordinator().AddDataset({.name = "good", .source = cluster_->source()});
    ASSERT_TRUE(good.ok()) << good.status().ToString();
  }

  void TearDown() override {
    cluster_.reset();
    // Nothing appeared next to the cluster's directory, the file beside it is
    // untouched, and no absolute path a name spelled was created.
    std::set<std::string> top;
    for (const auto& e : std::filesystem::directory_iterator(root_)) top.insert(e.path().filename().string());
    EXPECT_EQ(top, (std::set<std::string>{"cluster", "outside"}));
    EXPECT_EQ(Tree(JoinPath(root_, "outside")), std::set<std::string>{"secret"});
    auto secret = ReadFile(JoinPath(root_, "outside/secret"));
    EXPECT_TRUE(secret.ok() && *secret == "untouched");
    struct stat st;
    EXPECT_NE(::lstat(AbsTarget().c_str(), &st), 0) << AbsTarget() << " was created";
    for (const auto& p : Tree(JoinPath(root_, "cluster"))) {
      EXPECT_EQ(p.find("escape"), std::string::npos) << "a hostile name reached the disk: " << p;
    }
  }

  // Sends `req` to `endpoint` over the real RPC path and expects a refusal.
  template <typename Req>
  void ExpectRefused(const std::string& endpoint, const Req& req, const std::string& what) {
    proto::RpcClient client(cluster_->zmq(), endpoint);
    auto r = client.Call(req, 10s);
    EXPECT_FALSE(r.ok()) << what << " was accepted";
    if (!r.ok()) {
      EXPECT_TRUE(client.last_call_answered()) << what << ": no answer (" << r.status().ToString() << ")";
      EXPECT_NE(r.status().code(), Code::kUnavailable) << what << ": " << r.status().ToString();
    }
  }

  const std::string& coord() const { return cluster_->endpoint(); }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<testing::TestCluster> cluster_;
  std::string node_endpoint_;
};

TEST_F(PathSafetyTest, CoordinatorRefusesHostileDatasetAndNodeNames) {
  for (const std::string& bad : HostileNames()) {
    const std::string n = Printable(bad);
    ExpectRefused(coord(), proto::DatasetAdd{.name = bad, .source = cluster_->source()}, "DatasetAdd " + n);
    ExpectRefused(coord(), proto::DatasetRefresh{.name = bad}, "DatasetRefresh " + n);
    ExpectRefused(coord(), proto::DatasetRemove{.name = bad}, "DatasetRemove " + n);
    ExpectRefused(coord(), proto::Warm{.name = bad}, "Warm " + n);
    ExpectRefused(coord(), proto::GetManifest{.name = bad}, "GetManifest " + n);
    ExpectRefused(coord(), proto::RegisterNode{.name = bad, .endpoint = "tcp://127.0.0.1:1"}, "RegisterNode " + n);
    ExpectRefused(coord(), proto::Heartbeat{.name = bad}, "Heartbeat " + n);
    ExpectRefused(coord(), proto::NodeDrain{.name = bad}, "NodeDrain " + n);
    ExpectRefused(coord(), proto::NodeRemove{.name = bad}, "NodeRemove " + n);
  }
  // The good dataset and the node are still there, and nothing was added.
  auto list = cluster_->coordinator().ListDatasets();
  ASSERT_EQ(list.datasets.size(), 1u);
  EXPECT_EQ(list.datasets[0].name, "good");
}

TEST_F(PathSafetyTest, CoordinatorRefusesHostileCheckpointPaths) {
  proto::RpcClient client(cluster_->zmq(), coord());
  ASSERT_TRUE(client.Call(proto::CkptCreate{.path = "job", .is_dir = true, .mode = 0755}, 10s).ok());
  ASSERT_TRUE(client.Call(proto::CkptCreate{.path = "job/f", .mode = 0644}, 10s).ok());
  for (const std::string& bad : HostileNames()) {
    const std::string n = Printable(bad);
    // A job's top directory "" is the listable root: only Create/Rename/Remove
    // of "" must fail, List("") is the listing of jobs.
    ExpectRefused(coord(), proto::CkptCreate{.path = bad, .mode = 0644}, "CkptCreate " + n);
    ExpectRefused(coord(), proto::CkptCreate{.path = bad, .is_dir = true, .mode = 0755}, "CkptCreate dir " + n);
    ExpectRefused(coord(), proto::CkptRename{.from = "job/f", .to = bad}, "CkptRename to " + n);
    ExpectRefused(coord(), proto::CkptRename{.from = bad, .to = "job/g"}, "CkptRename from " + n);
    ExpectRefused(coord(), proto::CkptRemove{.path = bad}, "CkptRemove " + n);
    ExpectRefused(coord(), proto::CkptSetAttr{.path = bad, .set_mode = true, .mode = 0600}, "CkptSetAttr " + n);
    if (!bad.empty()) {
      ExpectRefused(coord(), proto::CkptLookup{.path = bad}, "CkptLookup " + n);
      ExpectRefused(coord(), proto::CkptList{.path = bad}, "CkptList " + n);
      ExpectRefused(coord(), proto::CkptFlush{.job = bad}, "CkptFlush " + n);
      ExpectRefused(coord(), proto::CkptWork{.node = bad}, "CkptWork " + n);
      ExpectRefused(coord(), proto::CkptDrained{.node = bad, .id = 1, .gen = 1, .ok = true}, "CkptDrained " + n);
    }
  }
  // The good file is where it was.
  auto f = client.Call(proto::CkptLookup{.path = "job/f"}, 10s);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
}

TEST_F(PathSafetyTest, NodeAgentRefusesHostileDatasetNames) {
  for (const std::string& bad : HostileNames()) {
    ExpectRefused(node_endpoint_, proto::GetChunk{.dataset = bad, .uid = 1, .version = 1},
                  "GetChunk " + Printable(bad));
  }
}

// An origin that lists hostile names (a broken or malicious NFS server):
// `dataset add` fails with an error naming the entry, and no manifest is kept.
class HostileOrigin : public Origin {
 public:
  explicit HostileOrigin(std::string name) : name_(std::move(name)) {}
  const std::string& source() const override { return source_; }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override {
    HOARD_RETURN_IF_ERROR(visit({.path = "ok", .type = EntryType::kFile, .mode = S_IFREG | 0644, .size = 3}));
    return visit({.path = name_, .type = EntryType::kFile, .mode = S_IFREG | 0644, .size = 3});
  }
  Result<OriginEntry> Stat(std::string_view path) override {
    if (path.empty()) return OriginEntry{.path = "", .type = EntryType::kDir, .mode = S_IFDIR | 0755};
    return Status::NotFound("hostile");
  }
  Result<std::unique_ptr<OriginFile>> Open(std::string_view) override { return Status::NotFound("hostile"); }

 private:
  std::string source_ = "/hostile";
  std::string name_;
};

TEST_F(PathSafetyTest, HostileOriginNamesAreRefusedAtDatasetAdd) {
  auto log = cluster_->logger();
  for (const std::string& bad : HostileNames()) {
    testing::TempDir dir;
    auto c = Coordinator::Open({.data_dir = JoinPath(dir.path(), "coord"),
                                .logger = log,
                                .open_origin = [bad](const std::string&) -> Result<std::unique_ptr<Origin>> {
                                  return std::unique_ptr<Origin>(std::make_unique<HostileOrigin>(bad));
                                }});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto r = (*c)->AddDataset({.name = "ds", .source = "/hostile"});
    EXPECT_FALSE(r.ok()) << "origin entry " << Printable(bad) << " was accepted";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
    }
    EXPECT_TRUE((*c)->ListDatasets().datasets.empty());
    for (const auto& p : Tree(dir.path())) EXPECT_EQ(p.find("escape"), std::string::npos) << p;
  }
}

// A local-directory origin whose tree holds a symlink out of it: the link is a
// symlink in the manifest, and reading through it never leaves the origin.
TEST_F(PathSafetyTest, LocalOriginNeverFollowsASymlinkOut) {
  const std::string src = JoinPath(root_, "cluster/src");
  ASSERT_TRUE(MakeDirs(src).ok());
  ASSERT_EQ(::symlink(JoinPath(root_, "outside").c_str(), JoinPath(src, "evil").c_str()), 0);
  auto origin = OpenOrigin(src);
  ASSERT_TRUE(origin.ok()) << origin.status().ToString();
  auto f = (*origin)->Open("evil/secret");
  EXPECT_FALSE(f.ok());
  auto st = (*origin)->Stat("evil");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->type, EntryType::kSymlink);
  for (const std::string& bad : HostileNames()) {
    if (bad.empty()) continue;  // "" is the root itself
    EXPECT_FALSE((*origin)->Open(bad).ok()) << Printable(bad);
    EXPECT_FALSE((*origin)->Stat(bad).ok()) << Printable(bad);
  }
}

}  // namespace
}  // namespace hoard
