#include "striping/manifest.h"

#include <sys/stat.h>

#include <map>
#include <random>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "common/alloc_budget.h"
#include "common/file_util.h"
#include "common/testing.h"
#include "striping/assignment.h"

namespace hoard {
namespace {

constexpr uint64_t kUid = 0xABCDEF;
constexpr uint64_t kChunk = 1 << 20;

// A small tree with every kind of entry, added in a scrambled order.
std::string BuildSample() {
  ManifestBuilder b(kUid, 3, kChunk);
  b.SetRoot(S_IFDIR | 0755, 10, 20, 111);
  b.Add("train/cat 1.jpg", S_IFREG | 0644, 1000, 1000, 5, 222);
  b.Add("train", S_IFDIR | 0750, 1000, 1000, 0, 333);
  b.Add("empty", S_IFREG | 0600, 0, 0, 0, 444);
  b.Add("big.bin", S_IFREG | 0644, 0, 0, 3 * kChunk + 7, 555);
  b.Add("train/ünïcode ☃.txt", S_IFREG | 0644, 1, 2, kChunk, 666);
  b.Add("latest", S_IFLNK | 0777, 0, 0, 5, 777, "train");
  b.Add("train/sub", S_IFDIR | 0755, 0, 0, 0, 888);
  b.Add("train/sub/deep", S_IFREG | 0444, 0, 0, 1, 999);
  Result<std::string> bytes = b.Finish(1234);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

// Parse and Load run under the decode budget (common/alloc_budget.h) like
// every decoder; a manifest is used in place, so they charge next to
// nothing whatever its size.
TEST(ManifestTest, ParsingAllocatesNothingPerEntry) {
  ManifestBuilder b(kUid, 1, kChunk);
  b.SetRoot(S_IFDIR | 0755, 0, 0, 1);
  for (int d = 0; d < 100; ++d) {
    b.Add("d" + std::to_string(d), S_IFDIR | 0755, 0, 0, 0, 1);
    for (int f = 0; f < 1000; ++f) {
      b.Add("d" + std::to_string(d) + "/f" + std::to_string(f), S_IFREG | 0644, 0, 0, 3 * kChunk, 1);
    }
  }
  Result<std::string> bytes = b.Finish(1);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  testing::TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.Sub("m"), *bytes).ok());
  size_t parse_peak = 0, load_peak = 0;
  {
    AllocBudget outer(SIZE_MAX);
    Result<Manifest> m = Manifest::Parse(*bytes);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->entry_count(), 100101u);
    parse_peak = outer.peak();
  }
  {
    AllocBudget outer(SIZE_MAX);
    Result<Manifest> m = Manifest::Load(dir.Sub("m"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    load_peak = outer.peak();
  }
  // Parse's copy of the bytes (the test's, passed by value) and a shared_ptr.
  EXPECT_LT(parse_peak, bytes->size() + 4096);
  EXPECT_LT(load_peak, 4096u);
}

TEST(ManifestTest, BuildParseAndLookup) {
  Result<Manifest> m = Manifest::Parse(BuildSample());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->dataset_uid(), kUid);
  EXPECT_EQ(m->version(), 3u);
  EXPECT_EQ(m->chunk_size(), kChunk);
  EXPECT_EQ(m->entry_count(), 9u);
  EXPECT_EQ(m->file_count(), 5u);
  EXPECT_EQ(m->total_bytes(), 5 + 0 + 3 * kChunk + 7 + kChunk + 1);
  // 1 + 0 + 4 + 1 + 1 chunks.
  EXPECT_EQ(m->total_chunks(), 7u);
  EXPECT_EQ(m->created_unix(), 1234);

  const EntryRecord& root = m->entry(0);
  EXPECT_TRUE(root.is_dir());
  EXPECT_EQ(root.uid, 10u);
  EXPECT_EQ(root.child_count(), 4u);  // big.bin empty latest train

  auto cat = m->Resolve("train/cat 1.jpg");
  ASSERT_TRUE(cat);
  EXPECT_EQ(m->entry(*cat).size, 5u);
  EXPECT_EQ(m->entry(*cat).mtime_ns, 222);
  EXPECT_EQ(m->entry(*cat).uid, 1000u);
  EXPECT_EQ(m->Path(*cat), "train/cat 1.jpg");
  EXPECT_EQ(m->entry(*cat).file_key(), MakeFileKey(kUid, "train/cat 1.jpg", 5, 222));

  auto uni = m->Resolve("train/ünïcode ☃.txt");
  ASSERT_TRUE(uni);
  EXPECT_EQ(m->name(*uni), "ünïcode ☃.txt");

  auto link = m->Resolve("latest");
  ASSERT_TRUE(link);
  EXPECT_TRUE(m->entry(*link).is_symlink());
  EXPECT_EQ(m->symlink_target(*link), "train");

  auto deep = m->Resolve("train/sub/deep");
  ASSERT_TRUE(deep);
  EXPECT_EQ(m->entry(*deep).mode, S_IFREG | 0444u);
  EXPECT_EQ(m->entry(m->entry(*deep).parent).mode, S_IFDIR | 0755u);

  EXPECT_FALSE(m->Resolve("train/nope"));
  EXPECT_FALSE(m->Resolve("big.bin/x")) << "a file has no children";
  EXPECT_EQ(m->Resolve(""), 0u);
}

TEST(ManifestTest, ChildrenAreContiguousSortedAndChunkOrdinalsDense) {
  Result<Manifest> m = Manifest::Parse(BuildSample());
  ASSERT_TRUE(m.ok());
  for (uint32_t i = 0; i < m->entry_count(); ++i) {
    const EntryRecord& e = m->entry(i);
    if (!e.is_dir()) continue;
    for (uint32_t c = e.first_child(); c < e.first_child() + e.child_count(); ++c) {
      EXPECT_EQ(m->entry(c).parent, i);
      if (c > e.first_child()) {
        EXPECT_LT(m->name(c - 1), m->name(c));
      }
    }
  }
  std::vector<uint64_t> ordinals;
  ForEachChunk(*m, [&](const ChunkRef& c) { ordinals.push_back(c.ordinal); });
  ASSERT_EQ(ordinals.size(), m->total_chunks());
  for (size_t i = 0; i < ordinals.size(); ++i) EXPECT_EQ(ordinals[i], i);
}

TEST(ManifestTest, EveryChunkHasExactlyReplicasOwners) {
  Result<Manifest> m = Manifest::Parse(BuildSample());
  ASSERT_TRUE(m.ok());
  Placement p({{"a", 1}, {"b", 1}, {"c", 1}});
  auto all = AssignAll(*m, p, 2);
  std::map<uint64_t, int> owners;
  uint64_t bytes = 0;
  for (const auto& share : all) {
    for (uint64_t o : share.ordinals) ++owners[o];
    bytes += share.bytes;
  }
  EXPECT_EQ(bytes, 2 * m->total_bytes());
  ASSERT_EQ(owners.size(), m->total_chunks());
  for (auto [ordinal, count] : owners) EXPECT_EQ(count, 2) << ordinal;
  for (uint32_t member = 0; member < 3; ++member) {
    std::vector<ChunkRef> mine = OwnedChunks(*m, p, 2, member);
    ASSERT_EQ(mine.size(), all[member].ordinals.size());
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i].ordinal, all[member].ordinals[i]);
  }
}

TEST(ManifestTest, BuilderRejectsBadTrees) {
  {
    ManifestBuilder b(1, 1, kChunk);
    b.Add("a/b", S_IFREG | 0644, 0, 0, 1, 0);
    EXPECT_EQ(b.Finish(0).status().code(), Code::kInvalidArgument) << "missing parent";
  }
  {
    ManifestBuilder b(1, 1, kChunk);
    b.Add("a", S_IFREG | 0644, 0, 0, 1, 0);
    b.Add("a", S_IFREG | 0644, 0, 0, 1, 0);
    EXPECT_EQ(b.Finish(0).status().code(), Code::kInvalidArgument) << "duplicate";
  }
  {
    ManifestBuilder b(1, 1, kChunk);
    b.Add("..", S_IFREG | 0644, 0, 0, 1, 0);
    EXPECT_EQ(b.Finish(0).status().code(), Code::kInvalidArgument) << "unsafe name";
  }
  {
    ManifestBuilder b(1, 1, 12345);
    EXPECT_EQ(b.Finish(0).status().code(), Code::kInvalidArgument) << "chunk size";
  }
}

TEST(ManifestTest, EmptyDatasetIsValid) {
  ManifestBuilder b(1, 1, kChunk);
  Result<std::string> bytes = b.Finish(0);
  ASSERT_TRUE(bytes.ok());
  Result<Manifest> m = Manifest::Parse(*bytes);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->entry_count(), 1u);
  EXPECT_EQ(m->total_chunks(), 0u);
}

TEST(ManifestTest, EveryTruncationAndMostBitFlipsAreRejected) {
  const std::string good = BuildSample();
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_EQ(Manifest::Parse(good.substr(0, len)).status().code(), Code::kCorruption) << len;
  }
  // The checksum catches flips in the body; header flips break a count, the
  // magic or the checksum itself. Either way nothing corrupt is accepted.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string bad = good;
    size_t pos = rng() % bad.size();
    bad[pos] ^= static_cast<char>(1 + rng() % 255);
    Result<Manifest> m = Manifest::Parse(bad);
    if (m.ok()) {
      // Only fields no reader relies on may differ: uid, version, created.
      EXPECT_TRUE((pos >= 16 && pos < 32) || (pos >= 80 && pos < 88)) << "accepted a flip at " << pos;
    }
  }
}

// A structurally hostile manifest with a *valid* checksum must still be
// rejected: the checksum is not a security boundary.
TEST(ManifestTest, ValidChecksumDoesNotExcuseBadStructure) {
  std::string bytes = BuildSample();
  auto recompute = [](std::string* b) {
    uint64_t sum = Checksum64(b->data() + Manifest::kHeaderSize, b->size() - Manifest::kHeaderSize);
    std::memcpy(b->data() + 88, &sum, 8);
  };
  auto entry = [&](std::string* b, uint32_t i) {
    return reinterpret_cast<EntryRecord*>(b->data() + Manifest::kHeaderSize) + i;
  };
  {
    std::string b = bytes;
    entry(&b, 2)->parent = 5;  // a parent that does not precede its child
    recompute(&b);
    EXPECT_EQ(Manifest::Parse(b).status().code(), Code::kCorruption);
  }
  {
    std::string b = bytes;
    entry(&b, 1)->name_off = 1u << 30;  // name outside the blob
    recompute(&b);
    EXPECT_EQ(Manifest::Parse(b).status().code(), Code::kCorruption);
  }
  {
    std::string b = bytes;
    entry(&b, 0)->aux = 1 | (uint64_t(100) << 32);  // root claims 100 children
    recompute(&b);
    EXPECT_EQ(Manifest::Parse(b).status().code(), Code::kCorruption);
  }
  {
    std::string b = bytes;
    Result<Manifest> m = Manifest::Parse(bytes);
    uint32_t big = *m->Resolve("big.bin");
    entry(&b, big)->size += kChunk;  // chunk numbering no longer dense
    recompute(&b);
    EXPECT_EQ(Manifest::Parse(b).status().code(), Code::kCorruption);
  }
  {
    std::string b = bytes;
    Result<Manifest> m = Manifest::Parse(bytes);
    uint32_t cat = *m->Resolve("train/cat 1.jpg");
    b[Manifest::kHeaderSize + m->entry_count() * sizeof(EntryRecord) + m->entry(cat).name_off] = '/';
    recompute(&b);
    EXPECT_EQ(Manifest::Parse(b).status().code(), Code::kCorruption) << "a '/' inside a name";
  }
}

TEST(ManifestTest, LoadMapsAFile) {
  char tmpl[] = "/tmp/hoard-manifest-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string path = JoinPath(tmpl, "m");
  ASSERT_TRUE(WriteFileAtomic(path, BuildSample()).ok());
  Result<Manifest> m = Manifest::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Manifest copy = *m;  // copies share the mapping
  m = Status::NotFound("drop the original");
  EXPECT_TRUE(copy.Resolve("train/sub/deep"));
  EXPECT_EQ(Manifest::Load(JoinPath(tmpl, "missing")).status().code(), Code::kNotFound);
  (void)RemoveTree(tmpl);
}

TEST(ManifestTest, HundredThousandEntriesStayUnderHundredBytesEach) {
  ManifestBuilder b(1, 1, kDefaultChunkSize);
  for (int d = 0; d < 100; ++d) {
    std::string dir = "n" + std::to_string(1000000 + d);
    b.Add(dir, S_IFDIR | 0755, 0, 0, 0, 0);
    for (int f = 0; f < 1000; ++f) {
      b.Add(dir + "/ILSVRC_" + std::to_string(d * 1000 + f) + ".JPEG", S_IFREG | 0644, 0, 0, 112 * 1024, 0);
    }
  }
  Result<std::string> bytes = b.Finish(0);
  ASSERT_TRUE(bytes.ok());
  Result<Manifest> m = Manifest::Parse(std::move(*bytes));
  ASSERT_TRUE(m.ok());
  EXPECT_LT(double(m->bytes().size()) / m->entry_count(), 100.0);
  auto e = m->Resolve("n1000042/ILSVRC_42999.JPEG");
  ASSERT_TRUE(e);
  EXPECT_EQ(m->entry(*e).size, 112u * 1024);
}

}  // namespace
}  // namespace hoard
