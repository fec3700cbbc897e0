#include "store/chunk_store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "common/file_util.h"
#include "store/chunk_file.h"

namespace hoard {
namespace {

namespace fs = std::filesystem;

ChunkKey Key(uint64_t file, uint32_t index = 0) {
  ChunkKey k;
  k.file.lo = file * 0x9E3779B97F4A7C15ULL;
  k.file.hi = ~file * 0xC2B2AE3D27D4EB4FULL;
  k.index = index;
  return k;
}

std::string Data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Every regular file under `dir`, relative paths, sorted.
// Files under the store's chunks/ (the store also keeps its LOCK file).
std::vector<std::string> ListFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string rel = fs::relative(it->path(), dir).string();
    if (it->is_regular_file() && rel != "LOCK") out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t CountTmpFiles(const std::string& dir) {
  size_t n = 0;
  for (const std::string& f : ListFiles(dir)) n += f.ends_with(".tmp");
  return n;
}

uint64_t DiskBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& f : ListFiles(dir)) total += fs::file_size(fs::path(dir) / f);
  return total;
}

void FlipByte(const std::string& path, off_t offset) {
  UniqueFd fd(::open(path.c_str(), O_RDWR));
  ASSERT_TRUE(fd.valid()) << path;
  char c;
  ASSERT_EQ(::pread(fd.get(), &c, 1, offset), 1);
  c ^= 0x5a;
  ASSERT_EQ(::pwrite(fd.get(), &c, 1, offset), 1);
}

class ChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/chunk_store_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = JoinPath(root_, "store");
    log_stream_ = std::make_shared<std::ostringstream>();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*log_stream_);
    logger_ = std::make_shared<spdlog::logger>("chunk_store_test", sink);
  }

  void TearDown() override {
    store_.reset();
    (void)RemoveTree(root_);
  }

  Result<std::unique_ptr<ChunkStore>> OpenStore(uint64_t capacity = 0) {
    ChunkStore::Options o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.logger = logger_;
    return ChunkStore::Open(o);
  }

  // (Re)opens store_; fails the test on error.
  void Reopen(uint64_t capacity = 0) {
    store_.reset();
    Result<std::unique_ptr<ChunkStore>> s = OpenStore(capacity);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }

  // The whole chunk, read in one call.
  Result<std::string> ReadAll(const ChunkKey& key) {
    Result<uint64_t> len = store_->Length(key);
    if (!len.ok()) return len.status();
    std::string buf(*len, '\0');
    Result<size_t> n = store_->Read(key, 0, buf.size(), buf.data());
    if (!n.ok()) return n.status();
    buf.resize(*n);
    return buf;
  }

  std::string Logs() {
    logger_->flush();
    return log_stream_->str();
  }

  std::string root_;
  std::string dir_;
  std::shared_ptr<std::ostringstream> log_stream_;
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<ChunkStore> store_;
};

TEST_F(ChunkStoreTest, OpenRequiresALogger) {
  ChunkStore::Options o;
  o.dir = dir_;
  EXPECT_EQ(ChunkStore::Open(o).status().code(), Code::kInvalidArgument);
}

TEST_F(ChunkStoreTest, PutThenReadAtVariousOffsets) {
  Reopen();
  const std::string data = Data(100'000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  EXPECT_TRUE(store_->Contains(Key(1)));
  ASSERT_TRUE(store_->Length(Key(1)).ok());
  EXPECT_EQ(*store_->Length(Key(1)), data.size());

  struct Case {
    uint64_t offset;
    size_t len;
    size_t want;
  };
  for (const Case& c : std::vector<Case>{{0, 100'000, 100'000},
                                         {0, 1, 1},
                                         {1, 4096, 4096},
                                         {4095, 8193, 8193},
                                         {50'000, 10, 10},
                                         {99'999, 1, 1},
                                         {99'000, 5000, 1000},  // clipped at the end
                                         {100'000, 10, 0},      // offset == length: nothing left
                                         {123, 0, 0}}) {
    std::string buf(c.len + 1, '#');
    Result<size_t> n = store_->Read(Key(1), c.offset, c.len, buf.data());
    ASSERT_TRUE(n.ok()) << "offset " << c.offset << ": " << n.status().ToString();
    EXPECT_EQ(*n, c.want) << "offset " << c.offset;
    EXPECT_EQ(buf.substr(0, *n), data.substr(c.offset, c.want)) << "offset " << c.offset;
    EXPECT_EQ(buf[*n], '#') << "Read wrote past the bytes it reported, offset " << c.offset;
  }
}

TEST_F(ChunkStoreTest, ReadPastTheEndIsInvalid) {
  Reopen();
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(10, 1)).ok());
  char buf[4];
  EXPECT_EQ(store_->Read(Key(1), 11, sizeof(buf), buf).status().code(), Code::kInvalidArgument);
}

TEST_F(ChunkStoreTest, AbsentChunk) {
  Reopen();
  char buf[4];
  EXPECT_EQ(store_->Read(Key(9), 0, sizeof(buf), buf).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Length(Key(9)).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->Contains(Key(9)));
  EXPECT_TRUE(store_->Remove(Key(9)).ok());
}

TEST_F(ChunkStoreTest, EmptyChunk) {
  Reopen();
  ASSERT_TRUE(store_->Put(Key(1), 7, "").ok());
  char buf[1];
  Result<size_t> n = store_->Read(Key(1), 0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(store_->usage().used_bytes, 0u);
}

TEST_F(ChunkStoreTest, OpenMovesTrailersToXattrs) {
  // Chunk files of the first format: the record in a trailer after the bytes.
  Reopen();
  store_.reset();
  std::map<uint32_t, std::string> data;
  for (uint32_t i = 0; i < 3; ++i) {
    data[i] = Data(10'000 + i * 4096, i);
    char trailer[kChunkMetaSize];
    EncodeChunkMeta({.length = data[i].size(), .checksum = Checksum64(data[i].data(), data[i].size()),
                     .dataset_uid = 5},
                    trailer);
    const std::string path = ChunkStore::ChunkPath(dir_, Key(i));
    ASSERT_TRUE(MakeDirs(DirName(path)).ok());
    ASSERT_TRUE(WriteFileAtomic(path, data[i] + std::string(trailer, sizeof trailer)).ok());
  }

  Reopen();
  EXPECT_NE(Logs().find("moved the trailers of 3 chunk files"), std::string::npos) << Logs();
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string path = ChunkStore::ChunkPath(dir_, Key(i));
    EXPECT_EQ(fs::file_size(path), data[i].size());
    EXPECT_EQ(::getxattr(path.c_str(), kChunkMetaXattr, nullptr, 0), ssize_t(kChunkMetaSize));
    Result<std::string> got = ReadAll(Key(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, data[i]);
  }
  EXPECT_EQ(store_->usage().used_bytes, DiskBytes(dir_));
  // Converted files open as they are the next time: nothing more to move.
  log_stream_->str("");
  Reopen();
  EXPECT_EQ(store_->usage().chunks, 3u);
  EXPECT_EQ(Logs().find("moved the trailers"), std::string::npos) << Logs();
}

TEST_F(ChunkStoreTest, FileLayoutMatchesChunkFileFormat) {
  Reopen();
  const ChunkKey key = Key(3, 17);
  const std::string data = Data(5000, 3);
  ASSERT_TRUE(store_->Put(key, 99, data).ok());

  const std::string name = key.Name();
  const std::string path = ChunkStore::ChunkPath(dir_, key);
  EXPECT_EQ(path, dir_ + "/chunks/" + name.substr(0, 2) + "/" + name);
  EXPECT_EQ(ListFiles(dir_), std::vector<std::string>{"chunks/" + name.substr(0, 2) + "/" + name});

  // The file is exactly the chunk's bytes (offset o of the chunk is offset o
  // of the file), and the record is in the xattr.
  Result<std::string> bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, data);
  char record[64];
  const ssize_t n = ::getxattr(path.c_str(), kChunkMetaXattr, record, sizeof(record));
  ASSERT_EQ(n, static_cast<ssize_t>(kChunkMetaSize)) << std::strerror(errno);
  Result<ChunkMeta> t = DecodeChunkMeta(std::string_view(record, n), bytes->size(), ChunkLayout::kXattr);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->length, data.size());
  EXPECT_EQ(t->dataset_uid, 99u);
  EXPECT_EQ(t->checksum, Checksum64(data.data(), data.size()));
}

TEST_F(ChunkStoreTest, PutOfAPresentChunkIsANoOp) {
  Reopen();
  const std::string first = Data(1000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, first).ok());
  const ChunkStore::Usage before = store_->usage();
  ASSERT_TRUE(store_->Put(Key(1), 7, first).ok());
  // Different bytes under the same key are not written either.
  ASSERT_TRUE(store_->Put(Key(1), 8, Data(2000, 2)).ok());
  const ChunkStore::Usage after = store_->usage();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.chunks, 1u);
  Result<std::string> got = ReadAll(Key(1));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, first);
  EXPECT_EQ(ListFiles(dir_).size(), 1u);
}

TEST_F(ChunkStoreTest, UsageCountsTheChunkFiles) {
  Reopen(1 << 20);
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(1000, 1)).ok());
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(3000, 2)).ok());
  const ChunkStore::Usage u = store_->usage();
  EXPECT_EQ(u.used_bytes, 4000u);
  EXPECT_EQ(u.used_bytes, DiskBytes(dir_));
  EXPECT_EQ(u.capacity_bytes, 1u << 20);
  EXPECT_EQ(u.chunks, 2u);
}

TEST_F(ChunkStoreTest, UsageCountsRemovedChunks) {
  Reopen();
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(1000, 1)).ok());
  ASSERT_TRUE(store_->Put(Key(2), 8, Data(3000, 2)).ok());
  ASSERT_TRUE(store_->Put(Key(3), 8, Data(500, 3)).ok());
  EXPECT_EQ(store_->usage().removed_chunks, 0u);
  ASSERT_TRUE(store_->Remove(Key(1)).ok());
  ASSERT_TRUE(store_->Remove(Key(1)).ok());  // absent: not counted again
  EXPECT_EQ(store_->RemoveDataset(8), 2u);
  const ChunkStore::Usage u = store_->usage();
  EXPECT_EQ(u.removed_chunks, 3u);
  EXPECT_EQ(u.removed_bytes, 4500u);
  EXPECT_EQ(u.chunks, 0u);
}

TEST_F(ChunkStoreTest, ASecondStoreOnTheSameDirectoryIsRefused) {
  Result<std::unique_ptr<ChunkStore>> first = OpenStore();
  ASSERT_TRUE(first.ok());
  Result<std::unique_ptr<ChunkStore>> second = OpenStore();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  first->reset();
  EXPECT_TRUE(OpenStore().ok()) << "the lock goes with the store";
}

TEST_F(ChunkStoreTest, ReopenRebuildsIndexAndUsage) {
  Reopen();
  std::map<uint64_t, std::string> data;
  for (uint64_t i = 0; i < 20; ++i) {
    data[i] = Data(100 + i * 37, static_cast<uint32_t>(i));
    ASSERT_TRUE(store_->Put(Key(i, static_cast<uint32_t>(i)), 100 + i % 3, data[i]).ok());
  }
  const ChunkStore::Usage before = store_->usage();

  Reopen();
  const ChunkStore::Usage after = store_->usage();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.chunks, 20u);
  std::map<uint64_t, uint64_t> seen_uid;
  store_->ForEach([&](const ChunkKey& key, uint64_t uid, uint64_t length) {
    EXPECT_EQ(key, Key(key.index, key.index));
    EXPECT_EQ(length, data[key.index].size());
    seen_uid[key.index] = uid;
  });
  ASSERT_EQ(seen_uid.size(), 20u);
  for (uint64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(seen_uid[i], 100 + i % 3);
    Result<std::string> got = ReadAll(Key(i, static_cast<uint32_t>(i)));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, data[i]);
  }
}

TEST_F(ChunkStoreTest, OpenRemovesLeftoverTmpAndBadTrailerFiles) {
  Reopen();
  const std::string good = Data(3000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, good).ok());
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(3000, 2)).ok());
  ASSERT_TRUE(store_->Put(Key(3), 7, Data(3000, 3)).ok());
  store_.reset();

  // A Put cut short by a crash.
  const std::string tmp = ChunkStore::ChunkPath(dir_, Key(4)) + ".123.0.tmp";
  ASSERT_TRUE(MakeDirs(DirName(tmp)).ok());
  ASSERT_TRUE(WriteFileAtomic(tmp, Data(500, 4)).ok());
  // A chunk whose record's magic is damaged.
  {
    const std::string p2 = ChunkStore::ChunkPath(dir_, Key(2));
    char record[kChunkMetaSize];
    ASSERT_EQ(::getxattr(p2.c_str(), kChunkMetaXattr, record, sizeof(record)), ssize_t(kChunkMetaSize));
    record[1] ^= 0x10;
    ASSERT_EQ(::setxattr(p2.c_str(), kChunkMetaXattr, record, sizeof(record), 0), 0);
  }
  // A chunk truncated so its record's length disagrees with the file size.
  ASSERT_EQ(::truncate(ChunkStore::ChunkPath(dir_, Key(3)).c_str(), 2000), 0);
  // Something the store did not write: left alone.
  const std::string stranger = JoinPath(DirName(ChunkStore::ChunkPath(dir_, Key(1))), "README");
  ASSERT_TRUE(WriteFileAtomic(stranger, "hello").ok());

  Reopen();
  EXPECT_TRUE(store_->Contains(Key(1)));
  EXPECT_FALSE(store_->Contains(Key(2)));
  EXPECT_FALSE(store_->Contains(Key(3)));
  EXPECT_FALSE(store_->Contains(Key(4)));
  EXPECT_EQ(store_->usage().chunks, 1u);
  EXPECT_EQ(store_->usage().used_bytes, good.size());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(ChunkStore::ChunkPath(dir_, Key(2))));
  EXPECT_FALSE(fs::exists(ChunkStore::ChunkPath(dir_, Key(3))));
  EXPECT_TRUE(fs::exists(stranger));
  Result<std::string> got = ReadAll(Key(1));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, good);

  const std::string logs = Logs();
  EXPECT_NE(logs.find(tmp), std::string::npos) << logs;
  EXPECT_NE(logs.find(ChunkStore::ChunkPath(dir_, Key(2))), std::string::npos) << logs;
  EXPECT_NE(logs.find(ChunkStore::ChunkPath(dir_, Key(3))), std::string::npos) << logs;
}

TEST_F(ChunkStoreTest, FlippedByteOnDiskIsCorruptionAndTheChunkIsDropped) {
  Reopen();
  const std::string data = Data(200'000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(1000, 2)).ok());
  const std::string path = ChunkStore::ChunkPath(dir_, Key(1));
  FlipByte(path, 150'000);

  // The first read checks the whole chunk, even when it asks for other bytes.
  char buf[16];
  Result<size_t> n = store_->Read(Key(1), 0, sizeof(buf), buf);
  EXPECT_EQ(n.status().code(), Code::kCorruption);
  EXPECT_FALSE(store_->Contains(Key(1)));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(store_->usage().used_bytes, 1000u);
  EXPECT_NE(Logs().find("corrupt"), std::string::npos);
  EXPECT_EQ(store_->Read(Key(1), 0, sizeof(buf), buf).status().code(), Code::kNotFound);

  // The caller fetches it again.
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  Result<std::string> got = ReadAll(Key(1));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data);
}

// Drops a file's pages from the page cache (after writing them back), as
// memory pressure would: the next read of them comes from the disk.
void DropCache(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid()) << path;
  ASSERT_EQ(::fdatasync(fd.get()), 0);
  ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
}

// A check is good only while the checked bytes stay cached: a part read is
// served from the page cache without a check while the whole chunk is
// there, and once any page was dropped the whole chunk is checked again
// (not just the range's blocks: read-ahead would bring the neighbours in
// unchecked), so rot in block 2 is caught by a read of block 0.
TEST_F(ChunkStoreTest, APartReadIsCheckedAgainOnceItsPagesLeftTheCache) {
  Reopen();
  const std::string data = Data(3 * kSumBlockBytes + 5000, 1);  // four blocks
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  ASSERT_TRUE(ReadAll(Key(1)).ok());  // checked, and now cached
  const std::string path = ChunkStore::ChunkPath(dir_, Key(1));
  char buf[10];
  // Cached since the check: a part read is served as it is.
  Result<size_t> n = store_->Read(Key(1), 100, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, sizeof(buf)), data.substr(100, sizeof(buf)));

  FlipByte(path, 2 * kSumBlockBytes + 10);  // in block 2
  DropCache(path);
  n = store_->Read(Key(1), 100, sizeof(buf), buf);
  EXPECT_EQ(n.status().code(), Code::kCorruption);
  EXPECT_FALSE(store_->Contains(Key(1)));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(store_->corrupt_chunks(), 1u);
  EXPECT_TRUE(fs::exists(store_->quarantine_dir()) && !fs::is_empty(store_->quarantine_dir()))
      << "the bad file is kept for an operator";
}

// A whole chunk (what peers and mounts ask for) is checked in the buffer it
// is returned in, every time: even bytes the page cache holds.
TEST_F(ChunkStoreTest, AWholeReadIsCheckedEveryTime) {
  std::vector<std::pair<ChunkKey, uint64_t>> told;
  store_.reset();
  ChunkStore::Options o{.dir = dir_, .logger = logger_};
  o.on_corrupt = [&](const ChunkKey& k, uint64_t uid) { told.emplace_back(k, uid); };
  store_ = *ChunkStore::Open(o);
  const std::string data = Data(10'000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  ASSERT_TRUE(ReadAll(Key(1)).ok());
  FlipByte(ChunkStore::ChunkPath(dir_, Key(1)), 9000);  // through the page cache
  EXPECT_EQ(ReadAll(Key(1)).status().code(), Code::kCorruption);
  EXPECT_FALSE(store_->Contains(Key(1)));
  ASSERT_EQ(told.size(), 1u) << "the owner is told, to fetch it again";
  EXPECT_EQ(told[0].first, Key(1));
  EXPECT_EQ(told[0].second, 7u);
}

// Scrub reads the disk, not the page cache, and quarantines what rotted.
TEST_F(ChunkStoreTest, ScrubReadsTheDiskAndQuarantinesWhatRotted) {
  Reopen();
  const std::string data = Data(2 * kSumBlockBytes, 3);
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(5000, 4)).ok());
  Result<ChunkStore::ScrubResult> r = store_->Scrub(Key(1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->corrupt);
  EXPECT_EQ(r->bytes, data.size());
  const std::string path = ChunkStore::ChunkPath(dir_, Key(1));
  FlipByte(path, 77);
  DropCache(path);
  r = store_->Scrub(Key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->corrupt);
  EXPECT_FALSE(store_->Contains(Key(1)));
  EXPECT_TRUE(store_->Contains(Key(2)));
  EXPECT_TRUE(store_->Scrub(Key(1))->gone);
  EXPECT_FALSE(store_->Scrub(Key(2))->corrupt);
  size_t quarantined = 0;
  for (const auto& e : fs::directory_iterator(store_->quarantine_dir())) {
    ++quarantined;
    EXPECT_NE(e.path().filename().string().find("-store-"), std::string::npos) << e.path();
  }
  EXPECT_EQ(quarantined, 1u);
}

TEST_F(ChunkStoreTest, OverCapacityIsNoSpaceAndWritesNothing) {
  const uint64_t chunk = 10'000;
  Reopen(3 * chunk + 100);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(store_->Put(Key(i), 7, Data(chunk, 1)).ok());
  const ChunkStore::Usage before = store_->usage();
  const std::vector<std::string> files_before = ListFiles(dir_);

  Status s = store_->Put(Key(3), 7, Data(chunk, 2));
  EXPECT_EQ(s.code(), Code::kNoSpace);
  EXPECT_NE(s.message().find(dir_), std::string::npos) << s.ToString();
  EXPECT_FALSE(store_->Contains(Key(3)));
  EXPECT_EQ(store_->usage().used_bytes, before.used_bytes);
  EXPECT_EQ(store_->usage().chunks, before.chunks);
  EXPECT_EQ(ListFiles(dir_), files_before);

  // A chunk larger than the whole capacity.
  EXPECT_EQ(store_->Put(Key(4), 7, Data(4 * chunk, 3)).code(), Code::kNoSpace);

  // Eviction makes room.
  ASSERT_TRUE(store_->Remove(Key(0)).ok());
  EXPECT_TRUE(store_->Put(Key(3), 7, Data(chunk, 2)).ok());
  EXPECT_EQ(store_->usage().used_bytes, before.used_bytes);
}

// The capacity is the node's (store/disk_usage.h): the checkpoint copies
// and the read tier beside the store count against it too.
TEST_F(ChunkStoreTest, OtherKindsOnTheDiskCountAgainstTheCapacity) {
  const uint64_t chunk = 10'000;
  Reopen(5 * chunk + 500);  // room for the records of a filesystem without xattrs
  ASSERT_TRUE(store_->Put(Key(0), 7, Data(chunk, 1)).ok());
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(chunk, 2)).ok());
  store_->SetOtherBytes(2 * chunk);
  EXPECT_EQ(store_->usage().other_bytes, 2 * chunk);
  EXPECT_TRUE(store_->usage().Fits(chunk));
  EXPECT_FALSE(store_->usage().Fits(2 * chunk));
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(chunk, 3)).ok()) << "2 + 2 + 1 chunks fit in 5";
  Status s = store_->Put(Key(3), 7, Data(chunk, 4));
  EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find("checkpoints and the read tier"), std::string::npos) << s.ToString();
  EXPECT_FALSE(store_->Contains(Key(3)));
  EXPECT_EQ(store_->usage().chunks, 3u);
  EXPECT_LT(store_->usage().used_bytes, 4 * chunk) << "the other kinds are not the store's own";
  // The others shrank (the read tier trimmed itself): room again.
  store_->SetOtherBytes(chunk);
  EXPECT_TRUE(store_->Put(Key(3), 7, Data(chunk, 4)).ok());
  // Others grown past what is left (a checkpoint is never refused): the
  // store holds what it holds, and admits nothing more.
  store_->SetOtherBytes(4 * chunk);
  EXPECT_FALSE(store_->usage().Fits(1));
  EXPECT_EQ(store_->Put(Key(4), 7, Data(100, 5)).code(), Code::kNoSpace);
  EXPECT_EQ(store_->usage().chunks, 4u);
}

TEST_F(ChunkStoreTest, RacingPutsNeverExceedCapacity) {
  constexpr int kThreads = 16;
  constexpr int kPerThread = 8;
  constexpr uint64_t kChunk = 4096;
  constexpr uint64_t kFits = 37;
  const uint64_t capacity = kFits * kChunk;
  Reopen(capacity);

  std::atomic<bool> go{false};
  std::atomic<bool> done{false};
  std::atomic<int> ok{0}, no_space{0}, other{0};
  std::atomic<uint64_t> max_used{0};
  std::thread watcher([&] {
    while (!done.load()) {
      uint64_t used = store_->usage().used_bytes;
      uint64_t prev = max_used.load();
      while (used > prev && !max_used.compare_exchange_weak(prev, used)) {
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string data = Data(kChunk, static_cast<uint32_t>(t));
      while (!go.load()) {
      }
      for (int i = 0; i < kPerThread; ++i) {
        Status s = store_->Put(Key(static_cast<uint64_t>(t) * 1000 + static_cast<uint64_t>(i)), 7, data);
        if (s.ok()) {
          ++ok;
        } else if (s.code() == Code::kNoSpace) {
          ++no_space;
        } else {
          ++other;
        }
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  done = true;
  watcher.join();

  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load(), static_cast<int>(kFits));
  EXPECT_EQ(no_space.load(), kThreads * kPerThread - static_cast<int>(kFits));
  EXPECT_LE(max_used.load(), capacity);
  EXPECT_EQ(store_->usage().used_bytes, capacity);
  EXPECT_EQ(store_->usage().chunks, kFits);
  EXPECT_EQ(DiskBytes(dir_), capacity);
  EXPECT_EQ(CountTmpFiles(dir_), 0u);
}

TEST_F(ChunkStoreTest, RacingPutsOfOneChunkStoreItOnce) {
  Reopen();
  constexpr int kThreads = 16;
  constexpr uint64_t kRounds = 10;
  // Large enough that the Puts of one round overlap.
  const std::string data = Data(1 << 20, 1);
  std::atomic<int> arrived{0};
  std::atomic<int> failures{0};
  std::atomic<int> missing_after_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (uint64_t round = 0; round < kRounds; ++round) {
        // All threads start each round's Put together.
        arrived.fetch_add(1);
        while (arrived.load() < kThreads * static_cast<int>(round + 1)) {
        }
        if (!store_->Put(Key(round), 7, data).ok()) ++failures;
        // OK means stored, even when another thread did the writing.
        if (!store_->Contains(Key(round))) ++missing_after_ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(missing_after_ok.load(), 0);
  EXPECT_EQ(store_->usage().chunks, kRounds);
  EXPECT_EQ(store_->usage().used_bytes, kRounds * data.size());
  EXPECT_EQ(DiskBytes(dir_), store_->usage().used_bytes);
  EXPECT_EQ(ListFiles(dir_).size(), kRounds);
  Result<std::string> got = ReadAll(Key(0));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, data);
}

TEST_F(ChunkStoreTest, RemoveDeletesTheChunkFile) {
  Reopen();
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(1000, 1)).ok());
  ASSERT_TRUE(store_->Put(Key(2), 7, Data(1000, 2)).ok());
  ASSERT_TRUE(store_->Remove(Key(1)).ok());
  EXPECT_FALSE(store_->Contains(Key(1)));
  EXPECT_FALSE(fs::exists(ChunkStore::ChunkPath(dir_, Key(1))));
  EXPECT_TRUE(store_->Contains(Key(2)));
  EXPECT_EQ(store_->usage().used_bytes, 1000u);
  EXPECT_EQ(store_->usage().chunks, 1u);
  EXPECT_TRUE(store_->Remove(Key(1)).ok());  // already gone
}

TEST_F(ChunkStoreTest, RemoveDatasetRemovesOnlyThatDataset) {
  Reopen();
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(store_->Put(Key(i), 1, Data(100, 1)).ok());
  for (uint64_t i = 10; i < 15; ++i) ASSERT_TRUE(store_->Put(Key(i), 2, Data(200, 2)).ok());

  EXPECT_EQ(store_->RemoveDataset(1), 10u);
  EXPECT_EQ(store_->RemoveDataset(1), 0u);
  EXPECT_EQ(store_->RemoveDataset(3), 0u);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_FALSE(store_->Contains(Key(i)));
    EXPECT_FALSE(fs::exists(ChunkStore::ChunkPath(dir_, Key(i))));
  }
  for (uint64_t i = 10; i < 15; ++i) EXPECT_TRUE(store_->Contains(Key(i)));
  EXPECT_EQ(store_->usage().chunks, 5u);
  EXPECT_EQ(store_->usage().used_bytes, 5 * 200u);
  EXPECT_EQ(DiskBytes(dir_), store_->usage().used_bytes);

  size_t seen = 0;
  store_->ForEach([&](const ChunkKey&, uint64_t uid, uint64_t length) {
    EXPECT_EQ(uid, 2u);
    EXPECT_EQ(length, 200u);
    ++seen;
  });
  EXPECT_EQ(seen, 5u);
}

TEST_F(ChunkStoreTest, ForEachMayCallBackIntoTheStore) {
  Reopen();
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(store_->Put(Key(i), i % 2, Data(100, 1)).ok());
  // An evictor walks the store and removes as it goes; the callback runs
  // under no lock, so this must not deadlock.
  store_->ForEach([&](const ChunkKey& key, uint64_t uid, uint64_t) {
    if (uid == 0) {
      EXPECT_TRUE(store_->Remove(key).ok());
    }
  });
  EXPECT_EQ(store_->usage().chunks, 2u);
}

TEST_F(ChunkStoreTest, OpenFileKeepsReadingAfterRemove) {
  Reopen();
  const std::string data = Data(10'000, 1);
  ASSERT_TRUE(store_->Put(Key(1), 7, data).ok());
  // The FUSE mount reads local chunk files directly.
  UniqueFd fd(::open(ChunkStore::ChunkPath(dir_, Key(1)).c_str(), O_RDONLY));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(store_->Remove(Key(1)).ok());
  ASSERT_TRUE(store_->Put(Key(1), 7, Data(10'000, 2)).ok());  // a new file at the same path
  std::string buf(data.size(), '\0');
  ASSERT_EQ(::pread(fd.get(), buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()));
  EXPECT_EQ(buf, data);
}

TEST_F(ChunkStoreTest, ReadsRacingRemoveAndPutSeeWholeChunksOrNothing) {
  Reopen();
  // Every generation of the chunk has different bytes, so a reader that
  // mixed two files, or read a partial one, would be caught.
  constexpr size_t kSize = 64 * 1024;
  std::vector<std::string> versions;
  for (uint32_t v = 0; v < 4; ++v) versions.push_back(Data(kSize, 100 + v));
  ASSERT_TRUE(store_->Put(Key(1), 7, versions[0]).ok());

  std::atomic<bool> stop{false};
  std::atomic<int> reads_ok{0}, not_found{0}, bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      std::string buf(kSize, '\0');
      uint64_t i = 0;
      while (!stop.load()) {
        // Mix whole reads (which verify the first time) with small ones.
        const uint64_t off = (i++ % 2 == 0) ? 0 : (static_cast<uint64_t>(r) * 7919 + i * 131) % kSize;
        const size_t len = off == 0 ? kSize : 512;
        Result<size_t> n = store_->Read(Key(1), off, len, buf.data());
        if (!n.ok()) {
          (n.status().code() == Code::kNotFound ? not_found : bad)++;
          continue;
        }
        bool match = false;
        for (const std::string& v : versions) {
          if (*n == std::min<size_t>(len, kSize - off) && std::memcmp(buf.data(), v.data() + off, *n) == 0) {
            match = true;
          }
        }
        (match ? reads_ok : bad)++;
      }
    });
  }
  for (int round = 0; round < 300; ++round) {
    ASSERT_TRUE(store_->Remove(Key(1)).ok());
    ASSERT_TRUE(store_->Put(Key(1), 7, versions[(round + 1) % versions.size()]).ok());
  }
  stop = true;
  for (std::thread& t : readers) t.join();

  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads_ok.load(), 0);
  EXPECT_EQ(store_->usage().chunks, 1u);
  EXPECT_EQ(store_->usage().used_bytes, kSize);
  EXPECT_EQ(CountTmpFiles(dir_), 0u);
  EXPECT_EQ(Logs().find("corrupt"), std::string::npos) << Logs();
}

TEST_F(ChunkStoreTest, RacingPutsAndRemovesKeepIndexAndDiskInAgreement) {
  Reopen();
  constexpr uint64_t kKeys = 4;
  const std::string data = Data(32 * 1024, 1);
  std::atomic<bool> go{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {
      }
      for (int i = 0; i < 300; ++i) {
        const ChunkKey key = Key(static_cast<uint64_t>(i + t) % kKeys);
        // Half the threads fill, half evict, all on the same few keys.
        Status s = (t % 2 == 0) ? store_->Put(key, 7, data) : store_->Remove(key);
        if (!s.ok()) ++errors;
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(errors.load(), 0);
  // A Remove must never unlink the file of a Put that came after it.
  uint64_t indexed = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    const bool present = store_->Contains(Key(k));
    EXPECT_EQ(present, fs::exists(ChunkStore::ChunkPath(dir_, Key(k)))) << "key " << k;
    indexed += present;
  }
  EXPECT_EQ(store_->usage().chunks, indexed);
  EXPECT_EQ(store_->usage().used_bytes, DiskBytes(dir_));
  EXPECT_EQ(CountTmpFiles(dir_), 0u);
}

// A store on a tiny tmpfs, so the disk fills before the store's capacity.
class ChunkStoreFullDiskTest : public ChunkStoreTest {
 protected:
  void SetUp() override {
    ChunkStoreTest::SetUp();
    ASSERT_TRUE(MakeDirs(dir_).ok());
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=2m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs at " << dir_ << " (" << std::strerror(errno)
                   << "); this test needs root or CAP_SYS_ADMIN";
    }
    mounted_ = true;
  }

  void TearDown() override {
    store_.reset();
    if (mounted_ && ::umount2(dir_.c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount " << dir_ << ": " << std::strerror(errno);
    }
    ChunkStoreTest::TearDown();
  }

  bool mounted_ = false;
};

TEST_F(ChunkStoreFullDiskTest, FullDiskIsNoSpaceAndLeavesNoTmpFiles) {
  Reopen(1ULL << 30);  // far above the 2 MiB disk
  constexpr size_t kChunk = 256 * 1024;
  Status s;
  uint64_t stored = 0;
  for (; stored < 100; ++stored) {
    s = store_->Put(Key(stored), 7, Data(kChunk, static_cast<uint32_t>(stored)));
    if (!s.ok()) break;
  }
  ASSERT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  EXPECT_NE(s.message().find("chunk store " + dir_ + " is full"), std::string::npos) << s.ToString();
  EXPECT_GT(stored, 0u);
  EXPECT_LE(stored, 8u);
  EXPECT_FALSE(store_->Contains(Key(stored)));
  EXPECT_EQ(CountTmpFiles(dir_), 0u);
  EXPECT_EQ(store_->usage().chunks, stored);
  EXPECT_EQ(store_->usage().used_bytes, stored * kChunk);
  EXPECT_EQ(DiskBytes(dir_), store_->usage().used_bytes);

  // Still usable: what is there reads back, and freeing space lets Put work.
  Result<std::string> got = ReadAll(Key(0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, Data(kChunk, 0));
  ASSERT_TRUE(store_->Remove(Key(0)).ok());
  EXPECT_TRUE(store_->Put(Key(stored), 7, Data(kChunk, 1234)).ok());
  got = ReadAll(Key(stored));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, Data(kChunk, 1234));
}

TEST_F(ChunkStoreFullDiskTest, FullDiskDuringTheDataWriteIsNoSpace) {
  Reopen();
  // Leave less room than one chunk, so the Put fails after its .tmp file was
  // created and must clean it up.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, "filler"), std::string(2 * 1024 * 1024 - 64 * 1024, 'f')).ok());
  Status s = store_->Put(Key(1), 7, Data(256 * 1024, 1));
  EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  EXPECT_EQ(CountTmpFiles(dir_), 0u);
  EXPECT_EQ(store_->usage().used_bytes, 0u);
  // A chunk that fits still goes in.
  EXPECT_TRUE(store_->Put(Key(2), 7, Data(8 * 1024, 2)).ok());
}

}  // namespace
}  // namespace hoard
