#include "coordinator/manifest_store.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"

namespace hoard {
namespace {

class ManifestStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ManifestBuilder b(/*dataset_uid=*/77, /*version=*/3, /*chunk_size=*/4u << 20);
    b.Add("a.bin", S_IFREG | 0644, 0, 0, 12345, 1);
    Result<std::string> bytes = b.Finish(1);
    ASSERT_TRUE(bytes.ok());
    bytes_ = *bytes;
    Result<Manifest> m = Manifest::Parse(bytes_);
    ASSERT_TRUE(m.ok());
    meta_ = {.name = "ds", .uid = 77, .version = 3, .manifest_bytes = bytes_.size(), .manifest_checksum = m->checksum()};
    ASSERT_TRUE(MakeDirs(tmp_.Sub("shared")).ok());
  }
  std::shared_ptr<CkptOrigin> Shared() {
    Result<std::unique_ptr<CkptOrigin>> o = OpenCkptOrigin(tmp_.Sub("shared"));
    EXPECT_TRUE(o.ok());
    return std::move(*o);
  }
  // A coordinator's store in DIR/NAME, opened.
  std::unique_ptr<StateStore> Local(const std::string& name) {
    auto s = std::make_unique<StateStore>(tmp_.Sub(name));
    EXPECT_TRUE(s->Open().ok());
    return s;
  }

  testing::TempDir tmp_{"hoard-manifests"};
  std::string bytes_;
  proto::DatasetMeta meta_;
};

TEST_F(ManifestStoreTest, AnotherCoordinatorFetchesWhatOneSavedAndKeepsItsOwnCopy) {
  auto a_local = Local("a");
  ManifestStore a(a_local.get(), Shared());
  ASSERT_TRUE(a.Save(meta_, bytes_).ok());

  auto b_local = Local("b");
  ManifestStore b(b_local.get(), Shared());
  Result<Manifest> got = b.Load(meta_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->checksum(), meta_.manifest_checksum);
  // Now b has its own copy: the shared one may go.
  ASSERT_TRUE(a.Remove(meta_).ok());
  EXPECT_TRUE(b.Load(meta_).ok());
  EXPECT_EQ(b_local->LoadManifest(meta_).status().code(), Code::kOk);
}

TEST_F(ManifestStoreTest, ASharedCopyThatIsNotTheOneTheStateNamesIsRefused) {
  auto a_local = Local("a");
  ManifestStore a(a_local.get(), Shared());
  ASSERT_TRUE(a.Save(meta_, bytes_).ok());
  // Another version's manifest under this version's name.
  ManifestBuilder other(77, 3, 4u << 20);
  other.Add("b.bin", S_IFREG | 0644, 0, 0, 12345, 1);
  Result<std::string> wrong = other.Finish(1);
  ASSERT_TRUE(wrong.ok());
  ASSERT_EQ(wrong->size(), bytes_.size());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(tmp_.Sub("shared"), a.SharedPath(meta_)), *wrong).ok());

  auto b_local = Local("b");
  ManifestStore b(b_local.get(), Shared());
  EXPECT_EQ(b.Load(meta_).status().code(), Code::kCorruption);
  // Nothing is kept locally from it.
  EXPECT_EQ(b_local->LoadManifest(meta_).status().code(), Code::kNotFound);
}

TEST_F(ManifestStoreTest, WithoutASharedStoreOnlyTheLocalCopyCounts) {
  auto a_local = Local("a");
  ManifestStore a(a_local.get(), nullptr);
  ASSERT_TRUE(a.Save(meta_, bytes_).ok());
  EXPECT_TRUE(a.Load(meta_).ok());
  auto b_local = Local("b");
  ManifestStore b(b_local.get(), nullptr);
  EXPECT_EQ(b.Load(meta_).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace hoard
