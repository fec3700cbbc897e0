#include "striping/manifest_diff.h"

#include <sys/stat.h>

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "striping/assignment.h"

namespace hoard {
namespace {

constexpr uint64_t kUid = 0x5eed;
constexpr uint64_t kChunk = 64 << 10;

struct Item {
  uint32_t mode;
  uint64_t size;
  int64_t mtime;
  std::string target;
};
using Tree = std::map<std::string, Item>;

Manifest Build(const Tree& tree, uint32_t version, int64_t created = 1000) {
  ManifestBuilder b(kUid, version, kChunk);
  b.SetRoot(S_IFDIR | 0755, 0, 0, 1);
  for (const auto& [path, it] : tree) b.Add(path, it.mode, 0, 0, it.size, it.mtime, it.target);
  Result<std::string> bytes = b.Finish(created);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<Manifest> m = Manifest::Parse(*bytes);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

Tree Sample() {
  return {{"a.bin", {S_IFREG | 0644, 3 * kChunk + 1, 10, ""}},
          {"b.bin", {S_IFREG | 0644, 100, 10, ""}},
          {"d", {S_IFDIR | 0755, 0, 10, ""}},
          {"d/x", {S_IFREG | 0644, 5, 10, ""}},
          {"d/y", {S_IFREG | 0644, kChunk, 10, ""}},
          {"gone", {S_IFDIR | 0755, 0, 10, ""}},
          {"gone/z", {S_IFREG | 0644, 7, 10, ""}},
          {"link", {S_IFLNK | 0777, 1, 10, "d"}}};
}

TEST(ManifestDiffTest, ARewalkOfAnUnchangedTreeIsTheSameNamespace) {
  Manifest v1 = Build(Sample(), 1, 1000);
  Manifest v2 = Build(Sample(), 2, 2000);
  EXPECT_TRUE(SameNamespace(v1, v2));
  ManifestDiff d = DiffManifests(v1, v2);
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.fetch_bytes, 0u);
  EXPECT_TRUE(d.files.empty());
}

TEST(ManifestDiffTest, CountsFilesByKeyAndEverythingElseAsOther) {
  Tree t = Sample();
  Manifest v1 = Build(t, 1);
  t["a.bin"].mtime = 11;                           // same size, new mtime: changed
  t["b.bin"].size = 200;                           // new size: changed
  t["d/x"].mode = S_IFREG | 0600;                  // mode only: other
  t["link"].target = "gone";                       // symlink target: other
  t["new.bin"] = {S_IFREG | 0644, 2 * kChunk, 10, ""};  // added
  t.erase("gone/z");                               // removed with its directory
  t.erase("gone");
  t["d/y"] = {S_IFDIR | 0755, 0, 10, ""};          // a file replaced by a directory
  t["d/y/in"] = {S_IFREG | 0644, 3, 10, ""};
  Manifest v2 = Build(t, 2);

  EXPECT_FALSE(SameNamespace(v1, v2));
  ManifestDiff d = DiffManifests(v1, v2);
  EXPECT_EQ(d.files_changed, 2u);
  EXPECT_EQ(d.files_added, 2u);    // new.bin, d/y/in
  EXPECT_EQ(d.files_removed, 2u);  // gone/z, d/y (the file)
  // d/x's mode, link's target, gone (dir removed), d/y (dir added).
  EXPECT_EQ(d.other_changes, 4u);
  EXPECT_EQ(d.fetch_bytes, (3 * kChunk + 1) + 200 + 2 * kChunk + 3);
  EXPECT_EQ(d.fetch_chunks, 4u + 1 + 2 + 1);
  EXPECT_EQ(d.dropped_bytes, (3 * kChunk + 1) + 100 + 7 + kChunk);
  std::map<std::string, std::string> listed;
  for (const ManifestChange& c : d.files) listed[c.path] = ManifestChangeName(c.kind);
  EXPECT_EQ(listed, (std::map<std::string, std::string>{{"a.bin", "changed"},
                                                        {"b.bin", "changed"},
                                                        {"new.bin", "added"},
                                                        {"gone/z", "removed"},
                                                        {"d/y", "removed"},
                                                        {"d/y/in", "added"}}));
  // Changed files are fetched again whole: their new sizes.
  EXPECT_EQ(d.changed_bytes, (3 * kChunk + 1) + 200);
  // The other changes are listed too, saying what changed.
  std::map<std::string, std::string> others;
  for (const OtherChange& c : d.others) others[c.path] = c.what;
  EXPECT_EQ(others, (std::map<std::string, std::string>{{"d/x", "file mode, owner or mtime changed"},
                                                        {"link", "symlink target changed"},
                                                        {"gone", "directory removed"},
                                                        {"d/y", "directory added"}}));
  // The lists are bounded; the counts are not.
  ManifestDiff few = DiffManifests(v1, v2, 2);
  EXPECT_EQ(few.files.size(), 2u);
  EXPECT_EQ(few.files_added + few.files_changed + few.files_removed, 6u);
  EXPECT_EQ(few.others.size(), 2u);
  EXPECT_EQ(few.other_changes, 4u);
}

TEST(ManifestDiffTest, ADirectoryMtimeAloneIsANewNamespace) {
  Tree t = Sample();
  Manifest v1 = Build(t, 1);
  t["d"].mtime = 99;
  Manifest v2 = Build(t, 2);
  EXPECT_FALSE(SameNamespace(v1, v2));
  ManifestDiff d = DiffManifests(v1, v2);
  EXPECT_EQ(d.other_changes, 1u);
  EXPECT_EQ(d.files_added + d.files_changed + d.files_removed, 0u);
  EXPECT_EQ(d.fetch_bytes, 0u);
}

// The property a refresh relies on: an unchanged file keeps its chunk keys
// and so its owners, even when entries before it come and go and its entry
// index and chunk ordinals shift.
TEST(ManifestDiffTest, UnchangedFilesKeepTheirKeysAndOwnersWhenOrdinalsShift) {
  Tree t = Sample();
  Manifest v1 = Build(t, 1);
  t["0first.bin"] = {S_IFREG | 0644, 5 * kChunk, 10, ""};  // sorts first: shifts every entry and ordinal
  t.erase("b.bin");
  Manifest v2 = Build(t, 2);
  Placement placement({{"n1", 1}, {"n2", 2}, {"n3", 1}, {"n4", 1}});
  for (const char* path : {"a.bin", "d/x", "d/y", "gone/z"}) {
    const uint32_t e1 = *v1.Resolve(path), e2 = *v2.Resolve(path);
    EXPECT_NE(v1.entry(e1).first_chunk(), v2.entry(e2).first_chunk()) << path << ": the test should shift ordinals";
    ASSERT_EQ(v1.chunk_count(e1), v2.chunk_count(e2));
    for (uint32_t i = 0; i < v1.chunk_count(e1); ++i) {
      EXPECT_EQ(v1.chunk_key(e1, i), v2.chunk_key(e2, i)) << path;
      EXPECT_EQ(placement.Owners(v1.chunk_key(e1, i), 2), placement.Owners(v2.chunk_key(e2, i), 2)) << path;
    }
  }
  // The diff's kept runs map each of their old ordinals to the new one, and
  // nothing else (b.bin's chunk, gone in v2, maps to nothing).
  ManifestDiff d = DiffManifests(v1, v2);
  uint64_t mapped = 0;
  for (uint64_t o = 0; o < v1.total_chunks(); ++o) mapped += KeptOrdinal(d.kept, o).has_value() ? 1 : 0;
  EXPECT_EQ(mapped, v1.total_chunks() - 1);
  for (const char* path : {"a.bin", "d/x", "d/y", "gone/z"}) {
    const uint32_t e1 = *v1.Resolve(path), e2 = *v2.Resolve(path);
    for (uint32_t i = 0; i < v1.chunk_count(e1); ++i) {
      EXPECT_EQ(KeptOrdinal(d.kept, v1.entry(e1).first_chunk() + i), v2.entry(e2).first_chunk() + i) << path;
    }
  }
  EXPECT_FALSE(KeptOrdinal(d.kept, v1.entry(*v1.Resolve("b.bin")).first_chunk()).has_value());
  EXPECT_FALSE(KeptOrdinal(d.kept, v1.total_chunks()).has_value());
  EXPECT_LT(d.kept.size(), 4u) << "adjacent files merge into one run";
  // And what a node owns of them is the same set of chunks.
  for (uint32_t member = 0; member < 4; ++member) {
    std::set<ChunkKey> before, after;
    for (const ChunkRef& c : OwnedChunks(v1, placement, 2, member)) {
      if (v1.Path(c.entry) != "b.bin") before.insert(v1.chunk_key(c.entry, c.index));
    }
    for (const ChunkRef& c : OwnedChunks(v2, placement, 2, member)) {
      if (v2.Path(c.entry) != "0first.bin") after.insert(v2.chunk_key(c.entry, c.index));
    }
    EXPECT_EQ(before, after) << "member " << member;
  }
}

}  // namespace
}  // namespace hoard
