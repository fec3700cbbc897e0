#include "proto/curve.h"

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "proto/access.h"

namespace hoard::proto {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(CurveKeysTest, GenWritesFourKeysWithSecretsPrivateAndNeverOverwrites) {
  testing::TempDir tmp("hoard-keys");
  const std::string dir = tmp.Sub("k");
  ASSERT_TRUE(GenerateKeys(dir).ok());
  EXPECT_EQ(ModeOf(JoinPath(dir, kClusterKeyFile)), 0600u);
  EXPECT_EQ(ModeOf(JoinPath(dir, kAdminKeyFile)), 0600u);
  EXPECT_EQ(ModeOf(JoinPath(dir, kClusterPubFile)) & 0600u, 0600u);
  Result<CurveKeys> daemon = LoadDaemonKeys(dir);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  EXPECT_EQ(daemon->server_public.size(), 40u);
  EXPECT_EQ(daemon->server_public + "\n", *ReadFile(JoinPath(dir, kClusterPubFile)));
  EXPECT_EQ(daemon->admin_public + "\n", *ReadFile(JoinPath(dir, kAdminPubFile)));
  EXPECT_NE(daemon->server_public, daemon->admin_public);
  EXPECT_TRUE(daemon->can_serve());

  const std::string before = *ReadFile(JoinPath(dir, kClusterKeyFile));
  Status again = GenerateKeys(dir);
  EXPECT_EQ(again.code(), Code::kAlreadyExists);
  EXPECT_EQ(*ReadFile(JoinPath(dir, kClusterKeyFile)), before);
}

TEST(CurveKeysTest, TheClientConnectsAsAdminOnlyWithTheAdminKey) {
  testing::TempDir tmp("hoard-keys");
  ASSERT_TRUE(GenerateKeys(tmp.path()).ok());
  CurveKeys daemon = *LoadDaemonKeys(tmp.path());
  Result<CurveKeys> admin = LoadClientKeys(tmp.path());
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin_client);
  EXPECT_EQ(admin->client_public, daemon.admin_public);
  EXPECT_EQ(admin->server_public, daemon.server_public);
  EXPECT_FALSE(admin->can_serve());

  ASSERT_EQ(std::remove(JoinPath(tmp.path(), kAdminKeyFile).c_str()), 0);
  Result<CurveKeys> member = LoadClientKeys(tmp.path());
  ASSERT_TRUE(member.ok());
  EXPECT_FALSE(member->admin_client);
  EXPECT_EQ(member->client_public, daemon.server_public);

  ASSERT_EQ(std::remove(JoinPath(tmp.path(), kClusterKeyFile).c_str()), 0);
  Result<CurveKeys> client = LoadClientKeys(tmp.path());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ(client->key_class, KeyClass::kClient);
  EXPECT_EQ(client->client_public, daemon.client_class_public);

  ASSERT_EQ(std::remove(JoinPath(tmp.path(), kClientKeyFile).c_str()), 0);
  Result<CurveKeys> none = LoadClientKeys(tmp.path());
  EXPECT_EQ(none.status().code(), Code::kNotFound) << "cluster.pub alone connects as nobody";
}

// A hook running as root asks for the client key: least privilege, though
// it could read the others.
TEST(CurveKeysTest, AKeyClassCapPicksTheWeakerKey) {
  testing::TempDir tmp("hoard-keys");
  ASSERT_TRUE(GenerateKeys(tmp.path()).ok());
  CurveKeys daemon = *LoadDaemonKeys(tmp.path());
  EXPECT_FALSE(daemon.client_class_public.empty());
  Result<CurveKeys> member = LoadClientKeys(tmp.path(), KeyClass::kMember);
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->key_class, KeyClass::kMember);
  EXPECT_EQ(member->client_public, daemon.server_public);
  Result<CurveKeys> client = LoadClientKeys(tmp.path(), KeyClass::kClient);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ(client->key_class, KeyClass::kClient);
  EXPECT_EQ(client->client_public, daemon.client_class_public);
  EXPECT_EQ(client->server_public, daemon.server_public);
}

// A keys directory from before the client key: its daemons admit no client
// until `hoard keys client` adds the pair.
TEST(CurveKeysTest, ClientKeysAddToAnOldDirectory) {
  testing::TempDir tmp("hoard-keys");
  ASSERT_TRUE(GenerateKeys(tmp.path()).ok());
  ASSERT_EQ(std::remove(JoinPath(tmp.path(), kClientKeyFile).c_str()), 0);
  ASSERT_EQ(std::remove(JoinPath(tmp.path(), kClientPubFile).c_str()), 0);
  EXPECT_TRUE(LoadDaemonKeys(tmp.path())->client_class_public.empty());
  ASSERT_TRUE(GenerateClientKey(tmp.path()).ok());
  EXPECT_EQ(GenerateClientKey(tmp.path()).code(), Code::kAlreadyExists);
  EXPECT_EQ(LoadDaemonKeys(tmp.path())->client_class_public + "\n", *ReadFile(JoinPath(tmp.path(), kClientPubFile)));
}

TEST(CurveKeysTest, BadKeyFilesAreClearErrors) {
  testing::TempDir tmp("hoard-keys");
  EXPECT_EQ(LoadDaemonKeys(tmp.path()).status().code(), Code::kNotFound);
  ASSERT_TRUE(GenerateKeys(tmp.Sub("a")).ok());
  ASSERT_TRUE(GenerateKeys(tmp.Sub("b")).ok());
  // A .pub of another keypair beside a .key.
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("a/cluster.pub"), *ReadFile(tmp.Sub("b/cluster.pub"))).ok());
  Result<CurveKeys> mixed = LoadDaemonKeys(tmp.Sub("a"));
  EXPECT_EQ(mixed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("is not the public key of"), std::string::npos);
  // Not a key at all.
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("b/admin.pub"), "hello\n").ok());
  Result<CurveKeys> garbage = LoadDaemonKeys(tmp.Sub("b"));
  EXPECT_EQ(garbage.status().code(), Code::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("is not a CURVE key"), std::string::npos);
  // A secret anyone may read.
  ASSERT_EQ(::chmod(tmp.Sub("b/cluster.key").c_str(), 0644), 0);
  Result<CurveKeys> open = LoadDaemonKeys(tmp.Sub("b"));
  EXPECT_NE(open.status().message().find("readable by other users"), std::string::npos);
}

TEST(CurveKeysTest, DaemonsRefuseToRunWithoutKeysUnlessInsecure) {
  auto log = spdlog::null_logger_mt("curve-test");
  zmq::context_t ctx;
  Result<std::unique_ptr<CurveSecurity>> none = DaemonSecurity(ctx, "", false, log);
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--insecure"), std::string::npos);
  Result<std::unique_ptr<CurveSecurity>> insecure = DaemonSecurity(ctx, "", true, log);
  ASSERT_TRUE(insecure.ok());
  EXPECT_EQ(*insecure, nullptr);
  EXPECT_EQ(KeysFor(ctx), nullptr);

  testing::TempDir tmp("hoard-keys");
  ASSERT_TRUE(GenerateKeys(tmp.path()).ok());
  EXPECT_EQ(DaemonSecurity(ctx, tmp.path(), true, log).status().code(), Code::kInvalidArgument);
  Result<std::unique_ptr<CurveSecurity>> secure = DaemonSecurity(ctx, tmp.path(), false, log);
  ASSERT_TRUE(secure.ok()) << secure.status().ToString();
  EXPECT_NE(KeysFor(ctx), nullptr);
  EXPECT_EQ(DaemonSecurity(ctx, tmp.path(), false, log).status().code(), Code::kAlreadyExists);
  secure->reset();
  EXPECT_EQ(KeysFor(ctx), nullptr);
}

TEST(AccessTest, OnlyOperatorChangesNeedTheAdminKey) {
  for (MsgType t : {MsgType::kDatasetAdd, MsgType::kDatasetRefresh, MsgType::kDatasetRemove, MsgType::kNodeDrain,
                    MsgType::kNodeRemove}) {
    EXPECT_TRUE(RequiresAdmin(t)) << TypeName(t);
  }
  for (MsgType t : {MsgType::kPing, MsgType::kClusterStatus, MsgType::kDatasetList, MsgType::kRegisterNode,
                    MsgType::kLeaseTake, MsgType::kLeaseRelease,
                    MsgType::kHeartbeat, MsgType::kGetChunk, MsgType::kGetManifest, MsgType::kCkptFlush,
                    MsgType::kCkptCommit, MsgType::kPutCkptChunk, MsgType::kWarm}) {
    EXPECT_FALSE(RequiresAdmin(t)) << TypeName(t);
  }
}

}  // namespace
}  // namespace hoard::proto
