// Catalogue (coordinator/catalogue.h) on its own: walk reservations, report
// checks and manifest parts.
#include "coordinator/catalogue.h"

#include <gtest/gtest.h>

#include "coordinator/coordinator_parts_test_util.h"

namespace hoard {
namespace {

using parts_test::MakeDataset;
using parts_test::MakeReport;

TEST(CatalogueTest, PutFindEraseAndMetasByName) {
  Catalogue c;
  EXPECT_EQ(c.Find("a"), nullptr);
  c.Put(MakeDataset("b", 2, 1, {10}));
  c.Put(MakeDataset("a", 1, 1, {10}));
  ASSERT_NE(c.Find("a"), nullptr);
  EXPECT_EQ(c.Find("a")->meta.uid, 1u);
  std::vector<proto::DatasetMeta> metas = c.Metas();
  ASSERT_EQ(metas.size(), 2u);
  EXPECT_EQ(metas[0].name, "a");
  EXPECT_EQ(metas[1].name, "b");
  // Put replaces: a refresh's next version.
  c.Put(MakeDataset("a", 1, 2, {10, 20}));
  EXPECT_EQ(c.Find("a")->meta.version, 2u);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.Erase("a"));
  EXPECT_FALSE(c.Erase("a"));
  EXPECT_EQ(c.size(), 1u);
}

TEST(CatalogueTest, AtMostMaxWalksAreReserved) {
  Catalogue c;
  ASSERT_TRUE(c.Reserve("a", 2).ok());
  ASSERT_TRUE(c.Reserve("b", 2).ok());
  EXPECT_TRUE(c.Reserved("a"));
  Status s = c.Reserve("c", 2);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_FALSE(c.Reserved("c"));
  c.Release("a");
  EXPECT_FALSE(c.Reserved("a"));
  EXPECT_TRUE(c.Reserve("c", 2).ok());
}

TEST(CatalogueTest, ReportsAreCheckedAgainstTheVersionTheyName) {
  Catalogue c;
  Catalogue::Dataset d = MakeDataset("a", 7, 1, {3 * parts_test::kChunk, 10});
  c.Put(MakeDataset("a", 7, 1, {3 * parts_test::kChunk, 10}));
  ASSERT_EQ(d.meta.total_chunks, 4u);
  const std::vector<uint64_t> all = {0, 1, 2, 3};
  EXPECT_TRUE(c.CheckReport(MakeReport(d, 1, all, all)).ok());
  EXPECT_TRUE(c.CheckReport(MakeReport(d, 1, all, {1, 3})).ok());

  proto::DatasetReport more_cached = MakeReport(d, 1, {0}, {0, 1});
  EXPECT_EQ(c.CheckReport(more_cached).code(), Code::kInvalidArgument);
  proto::DatasetReport more_owned = MakeReport(d, 1, {0, 1, 2, 3, 4}, {});
  EXPECT_EQ(c.CheckReport(more_owned).code(), Code::kInvalidArgument);
  proto::DatasetReport past_end = MakeReport(d, 1, all, {4});
  EXPECT_FALSE(c.CheckReport(past_end).ok());
  proto::DatasetReport miscounted = MakeReport(d, 1, all, {0, 1});
  miscounted.cached_chunks = 3;
  EXPECT_FALSE(c.CheckReport(miscounted).ok());

  // Another version, or an unknown dataset: kept for later, not judged now.
  past_end.version = 2;
  EXPECT_TRUE(c.CheckReport(past_end).ok());
  past_end.version = 1;
  past_end.uid = 8;
  EXPECT_TRUE(c.CheckReport(past_end).ok());
}

TEST(CatalogueTest, ManifestPartsOfTheCurrentVersionOnly) {
  Catalogue c;
  c.Put(MakeDataset("a", 7, 2, {10, 20}));
  const std::string bytes(c.Find("a")->manifest.bytes());
  ASSERT_GT(bytes.size(), 10u);
  std::string payload;
  EXPECT_EQ(c.GetManifest({.name = "b", .version = 2}, &payload).status().code(), Code::kNotFound);
  EXPECT_EQ(c.GetManifest({.name = "a", .version = 1}, &payload).status().code(), Code::kStale);

  auto part = c.GetManifest({.name = "a", .version = 2, .offset = 0, .length = 10}, &payload);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->total_bytes, bytes.size());
  EXPECT_EQ(payload, bytes.substr(0, 10));
  part = c.GetManifest({.name = "a", .version = 2, .offset = 10, .length = 1u << 30}, &payload);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(payload, bytes.substr(10));
  part = c.GetManifest({.name = "a", .version = 2, .offset = bytes.size(), .length = 10}, &payload);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(payload, "");
  EXPECT_EQ(
      c.GetManifest({.name = "a", .version = 2, .offset = bytes.size() + 1, .length = 10}, &payload).status().code(),
      Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoard
