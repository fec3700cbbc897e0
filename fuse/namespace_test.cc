#include "fuse/namespace.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

std::shared_ptr<const DatasetView> Dataset(const std::string& name, uint64_t uid, uint32_t version) {
  ManifestBuilder b(uid, version, 1 << 20);
  b.Add("f", S_IFREG | 0644, 0, 0, 10, 0);
  proto::DatasetMeta meta{.name = name, .uid = uid, .version = version};
  return std::make_shared<DatasetView>(DatasetView{meta, *Manifest::Parse(*b.Finish(0))});
}

ClusterView View(std::vector<std::shared_ptr<const DatasetView>> ds) {
  std::map<std::string, std::shared_ptr<const DatasetView>> m;
  for (auto& d : ds) m[d->meta.name] = d;
  return ClusterView(proto::ClusterMap{.epoch = 1}, std::move(m), "");
}

TEST(NamespaceTest, SlotsAreNeverReused) {
  Namespace ns;
  auto a1 = Dataset("a", 1, 1);
  auto b1 = Dataset("b", 2, 1);
  EXPECT_EQ(ns.Update(View({a1, b1})).size(), 2u);
  const MountedDataset* a = ns.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(ns.Slot(a->slot), a);
  EXPECT_TRUE(ns.Update(View({a1, b1})).empty()) << "nothing changed";

  // A new version of a: new slot, old one retired.
  auto changed = ns.Update(View({Dataset("a", 1, 2), b1}));
  EXPECT_EQ(changed, std::vector<std::string>{"a"});
  const MountedDataset* a2 = ns.Find("a");
  ASSERT_NE(a2, nullptr);
  EXPECT_NE(a2->slot, a->slot);
  EXPECT_EQ(ns.Slot(a->slot), nullptr);
  EXPECT_EQ(a->view->meta.version, 1u) << "the retired object stays valid for open files";

  // b removed.
  changed = ns.Update(View({Dataset("a", 1, 2)}));
  EXPECT_EQ(changed, std::vector<std::string>{"b"});
  EXPECT_EQ(ns.Find("b"), nullptr);
  ASSERT_EQ(ns.List()->datasets.size(), 1u);
}

uint32_t SlotOfName(const Namespace& ns, const std::string& name) {
  const MountedDataset* md = ns.Find(name);
  return md == nullptr ? 0 : md->slot;
}

// A process taking over the mount's connection (fuse/supervisor.h) gives
// each dataset version the inode slot the last one gave it.
TEST(NamespaceTest, ASuccessorGivesEachDatasetVersionItsSlot) {
  hoard::testing::TempDir dir;
  const std::string path = JoinPath(dir.path(), "slots");
  uint32_t a, b2;
  {
    Namespace first;
    ASSERT_TRUE(first.KeepSlots(path, /*takeover=*/false).ok());
    first.Update(View({Dataset("a", 1, 1), Dataset("b", 2, 1)}));
    first.Update(View({Dataset("a", 1, 1), Dataset("b", 2, 2)}));  // b's new version: a new slot
    a = SlotOfName(first, "a");
    b2 = SlotOfName(first, "b");
    ASSERT_EQ(b2, 3u);
  }
  Namespace successor;
  ASSERT_TRUE(successor.KeepSlots(path, /*takeover=*/true).ok());
  // The map it starts from lists them in another order, with a new dataset.
  successor.Update(View({Dataset("c", 3, 1), Dataset("b", 2, 2), Dataset("a", 1, 1)}));
  EXPECT_EQ(SlotOfName(successor, "a"), a);
  EXPECT_EQ(SlotOfName(successor, "b"), b2);
  EXPECT_EQ(SlotOfName(successor, "c"), 4u) << "a new version takes a slot no earlier process gave";

  // A fresh mount (not a takeover) starts the slots afresh.
  Namespace fresh;
  ASSERT_TRUE(fresh.KeepSlots(path, /*takeover=*/false).ok());
  fresh.Update(View({Dataset("b", 2, 2)}));
  EXPECT_EQ(SlotOfName(fresh, "b"), 1u);
}

TEST(InodeTest, EncodingRoundTrips) {
  uint64_t ino = MakeIno(7, 123456789);
  EXPECT_EQ(SlotOf(ino), 7u);
  EXPECT_EQ(EntryOf(ino), 123456789u);
  EXPECT_TRUE(IsDatasetIno(ino));
  EXPECT_FALSE(IsDatasetIno(kRootIno));
  EXPECT_FALSE(IsDatasetIno(kDatasetsIno));
}

}  // namespace
}  // namespace hoard::fuse
