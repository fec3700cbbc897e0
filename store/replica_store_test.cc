// ReplicaStore on a real directory: durable replicas, torn files detected,
// whole-file copies served only when they match, eviction that honours the
// mount's flock, and no partial file on a full disk (fault injection).
#include "store/replica_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/testing.h"

namespace hoard {
namespace {

using testing::PseudoRandomBytes;
using Clock = std::chrono::system_clock;

uint64_t Sum(const std::string& s) { return Checksum64(s.data(), s.size()); }

class ReplicaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open(std::function<Status(uint64_t)> before_write = nullptr) {
    store_.reset();
    auto s = ReplicaStore::Open({.dir = JoinPath(tmp_.path(), "ckpt"),
                                 .logger = spdlog::null_logger_mt("replica-store-" + std::to_string(++count_)),
                                 .before_write = std::move(before_write)});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }

  // Writes the mount's whole-file copy of `id`.
  void WriteWholeFile(uint64_t id, const std::string& bytes) {
    ASSERT_TRUE(WriteFileAtomic(ReplicaStore::WholeFilePath(tmp_.path(), id), bytes).ok());
  }

  size_t FilesIn(const std::string& sub) {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator(JoinPath(store_->dir(), sub))) n += e.is_regular_file();
    return n;
  }

  testing::TempDir tmp_;
  std::unique_ptr<ReplicaStore> store_;
  static inline int count_ = 0;
};

TEST_F(ReplicaStoreTest, PutThenReadReturnsTheBytes) {
  const std::string bytes = PseudoRandomBytes(5000, 1);
  ASSERT_TRUE(store_->Put(7, 2, 3, Sum(bytes), bytes).ok());
  Result<std::string> r = store_->Read(7, 2, 3, Sum(bytes), 8192, bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, bytes);
  EXPECT_TRUE(store_->HasReplica(7, 2, 3, Sum(bytes)));
  ReplicaStore::Listing l = store_->List();
  ASSERT_EQ(l.chunks.size(), 1u);
  EXPECT_EQ(l.chunks[0], (ReplicaStore::Held{.id = 7, .gen = 2, .index = 3, .length = 5000, .checksum = Sum(bytes)}));
  EXPECT_EQ(store_->usage().chunks, 1u);
  EXPECT_GT(store_->usage().chunk_bytes, 5000u);
  // Other generation, other index, other checksum: not this replica.
  EXPECT_EQ(store_->Read(7, 1, 3, Sum(bytes), 8192, 5000).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Read(7, 2, 4, Sum(bytes), 8192, 5000).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Read(7, 2, 3, Sum(bytes) + 1, 8192, 5000).status().code(), Code::kNotFound);
}

// Replicas are written with direct I/O, in whole blocks, then cut to their
// length: every length reads back exactly, trailer included.
TEST_F(ReplicaStoreTest, EveryLengthReadsBackExactly) {
  uint32_t index = 0;
  for (size_t len : {1, 100, 4071, 4072, 4073, 4096, 4097, 8191, 1 << 20, (1 << 20) + 3}) {
    const std::string bytes = PseudoRandomBytes(len, len);
    ASSERT_TRUE(store_->Put(4, 1, index, Sum(bytes), bytes).ok()) << len;
    struct stat st;
    ASSERT_EQ(::stat(store_->ChunkPath(4, 1, index, Sum(bytes)).c_str(), &st), 0);
    EXPECT_EQ(uint64_t(st.st_size), len + 24) << len;
    Result<std::string> r = store_->Read(4, 1, index, Sum(bytes), 2 << 20, len);
    ASSERT_TRUE(r.ok()) << len << ": " << r.status().ToString();
    EXPECT_TRUE(*r == bytes) << len;
    ++index;
  }
}

TEST_F(ReplicaStoreTest, PutRejectsBytesThatDoNotMatchTheirChecksum) {
  const std::string bytes = PseudoRandomBytes(100, 2);
  EXPECT_EQ(store_->Put(1, 1, 0, Sum(bytes) ^ 1, bytes).code(), Code::kCorruption);
  EXPECT_FALSE(store_->HasReplica(1, 1, 0, Sum(bytes)));
  EXPECT_FALSE(store_->HasReplica(1, 1, 0, Sum(bytes) ^ 1));
  EXPECT_EQ(FilesIn("chunks"), 0u);
}

TEST_F(ReplicaStoreTest, TornOrCorruptReplicaIsNeverServedAndIsRemoved) {
  const std::string bytes = PseudoRandomBytes(4096, 3);
  ASSERT_TRUE(store_->Put(1, 1, 0, Sum(bytes), bytes).ok());
  ASSERT_TRUE(store_->Put(1, 1, 1, Sum(bytes), bytes).ok());
  // Cut short, as a crash before the data reached the disk leaves it.
  ASSERT_EQ(::truncate(store_->ChunkPath(1, 1, 0, Sum(bytes)).c_str(), 3000), 0);
  EXPECT_EQ(store_->Read(1, 1, 0, Sum(bytes), 4096, 4096).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->HasReplica(1, 1, 0, Sum(bytes)));
  // One flipped byte in the data.
  UniqueFd fd(::open(store_->ChunkPath(1, 1, 1, Sum(bytes)).c_str(), O_WRONLY));
  ASSERT_TRUE(PwriteAll(fd.get(), "x", 1, 100).ok());
  EXPECT_EQ(store_->Read(1, 1, 1, Sum(bytes), 4096, 4096).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->HasReplica(1, 1, 1, Sum(bytes)));
}

TEST_F(ReplicaStoreTest, WholeFileCopyServedOnlyWhileItHoldsTheCommittedBytes) {
  const uint64_t cs = 1000;
  std::string file = PseudoRandomBytes(2500, 4);
  WriteWholeFile(9, file);
  const std::string c1 = file.substr(1000, 1000), c2 = file.substr(2000, 500);
  Result<std::string> r = store_->Read(9, 5, 1, Sum(c1), cs, 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, c1);
  r = store_->Read(9, 5, 2, Sum(c2), cs, 500);  // the short last chunk
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, c2);
  // The mount rewrote chunk 1 (a newer, uncommitted generation) and
  // truncated the file: the committed bytes are gone from it.
  file[1500] ^= 0x55;
  WriteWholeFile(9, file.substr(0, 2200));
  EXPECT_EQ(store_->Read(9, 5, 1, Sum(c1), cs, 1000).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Read(9, 5, 2, Sum(c2), cs, 500).status().code(), Code::kNotFound);
  // A replica of the chunk still serves it.
  ASSERT_TRUE(store_->Put(9, 5, 1, Sum(c1), c1).ok());
  EXPECT_EQ(*store_->Read(9, 5, 1, Sum(c1), cs, 1000), c1);
}

// The mount reads its own node's copies with ReadCopy, without the store
// object: the same answers as Read, and a damaged replica is skipped (to the
// whole-file copy) but left for the node agent to remove.
TEST_F(ReplicaStoreTest, ReadCopyReadsReplicasAndWholeFilesWithoutTheStore) {
  const std::string ckpt = store_->dir();
  const std::string a = PseudoRandomBytes(4096, 11);
  ASSERT_TRUE(store_->Put(3, 2, 0, Sum(a), a).ok());
  Result<std::string> r = ReplicaStore::ReadCopy(ckpt, 3, 2, 0, Sum(a), 4096, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, a);
  EXPECT_EQ(ReplicaStore::ReadCopy(ckpt, 3, 1, 0, Sum(a), 4096, 4096).status().code(), Code::kNotFound)
      << "another generation";
  EXPECT_EQ(ReplicaStore::ReadCopy(ckpt, 3, 2, 0, Sum(a) + 1, 4096, 4096).status().code(), Code::kNotFound);

  // Chunk 1 from the whole-file copy, only while it holds those bytes.
  const std::string file = PseudoRandomBytes(6000, 12);
  WriteWholeFile(3, file);
  const std::string c1 = file.substr(4096);
  r = ReplicaStore::ReadCopy(ckpt, 3, 2, 1, Sum(c1), 4096, c1.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, c1);
  WriteWholeFile(3, file.substr(0, 5000));
  EXPECT_EQ(ReplicaStore::ReadCopy(ckpt, 3, 2, 1, Sum(c1), 4096, c1.size()).status().code(), Code::kNotFound);

  // A flipped byte in the replica of chunk 0: not served, not removed here.
  UniqueFd fd(::open(store_->ChunkPath(3, 2, 0, Sum(a)).c_str(), O_WRONLY));
  ASSERT_TRUE(PwriteAll(fd.get(), "x", 1, 10).ok());
  EXPECT_EQ(ReplicaStore::ReadCopy(ckpt, 3, 2, 0, Sum(a), 4096, 4096).status().code(), Code::kNotFound);
  EXPECT_TRUE(store_->HasReplica(3, 2, 0, Sum(a)));
}

TEST_F(ReplicaStoreTest, EvictionKeepsListedFilesAndFilesTheMountHoldsLocked) {
  const std::string b = PseudoRandomBytes(64, 5);
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(store_->Put(id, 1, 0, Sum(b), b).ok());
    WriteWholeFile(id, b);
  }
  // The mount is writing file 2.
  UniqueFd mount_fd(::open(ReplicaStore::WholeFilePath(tmp_.path(), 2).c_str(), O_RDWR));
  ASSERT_EQ(::flock(mount_fd.get(), LOCK_SH), 0);
  // Asked "later" than every file: the grace period does not protect them.
  const auto later = Clock::now() + std::chrono::hours(1);
  EXPECT_EQ(store_->DropFilesExcept({3}, later), 3u);  // replicas of 1 and 2, files/1
  ReplicaStore::Listing l = store_->List();
  ASSERT_EQ(l.chunks.size(), 1u);
  EXPECT_EQ(l.chunks[0].id, 3u);
  EXPECT_EQ(l.files, (std::vector<uint64_t>{2, 3}));
  // Unlocked (written and committed): now it goes.
  ASSERT_EQ(::flock(mount_fd.get(), LOCK_UN), 0);
  EXPECT_EQ(store_->DropFilesExcept({3}, later), 1u);
  EXPECT_EQ(store_->List().files, (std::vector<uint64_t>{3}));
}

TEST_F(ReplicaStoreTest, EvictionSparesFilesWrittenWhileTheKeepListWasComputed) {
  const std::string b = PseudoRandomBytes(64, 6);
  ASSERT_TRUE(store_->Put(4, 1, 0, Sum(b), b).ok());
  WriteWholeFile(4, b);
  EXPECT_EQ(store_->DropFilesExcept({}, Clock::now()), 0u);
  EXPECT_TRUE(store_->HasReplica(4, 1, 0, Sum(b)));
  EXPECT_EQ(store_->List().files.size(), 1u);
}

TEST_F(ReplicaStoreTest, FullDiskFailsCleanlyWithoutAPartialFile) {
  // The disk fills after the data, before the trailer.
  Open([](uint64_t written) { return written > 0 ? Status::NoSpace("injected ENOSPC") : Status::Ok(); });
  const std::string b = PseudoRandomBytes(10000, 7);
  EXPECT_EQ(store_->Put(1, 1, 0, Sum(b), b).code(), Code::kNoSpace);
  EXPECT_FALSE(store_->HasReplica(1, 1, 0, Sum(b)));
  EXPECT_EQ(FilesIn("chunks"), 0u) << "no .tmp left behind";
  EXPECT_EQ(store_->usage().chunk_bytes, 0u);
}

TEST_F(ReplicaStoreTest, OpenRemovesInterruptedPuts) {
  const std::string tmp = store_->ChunkPath(1, 1, 0, 77) + ".tmp.0";
  ASSERT_TRUE(WriteFileAtomic(tmp, "partial").ok());
  Open();
  EXPECT_EQ(FilesIn("chunks"), 0u);
}

TEST_F(ReplicaStoreTest, DropReplicasDeletesExactlyTheNamedCopies) {
  const std::string b = PseudoRandomBytes(64, 8), late = PseudoRandomBytes(64, 9);
  for (uint64_t gen : {1, 2, 3}) ASSERT_TRUE(store_->Put(5, gen, 0, Sum(b), b).ok());
  ASSERT_TRUE(store_->Put(5, 2, 0, Sum(late), late).ok());  // bytes gen 2's commit did not count
  ASSERT_TRUE(store_->Put(6, 1, 0, Sum(b), b).ok());
  EXPECT_EQ(store_->DropReplicas({{5, 1, 0, Sum(b)}, {5, 2, 0, Sum(late)}, {5, 9, 0, Sum(b)}}), 2u);
  EXPECT_FALSE(store_->HasReplica(5, 1, 0, Sum(b)));
  EXPECT_FALSE(store_->HasReplica(5, 2, 0, Sum(late)));
  EXPECT_TRUE(store_->HasReplica(5, 2, 0, Sum(b)));  // same chunk, other bytes: another file
  EXPECT_TRUE(store_->HasReplica(5, 3, 0, Sum(b)));
  EXPECT_TRUE(store_->HasReplica(6, 1, 0, Sum(b)));
}

TEST_F(ReplicaStoreTest, AWholeFileCopyIsDroppedOnlyWhenStampedWithThatGenerationOrOlder) {
  auto make = [&](uint64_t id, std::optional<uint64_t> stamp) {
    const std::string path = ReplicaStore::WholeFilePath(tmp_.path(), id);
    EXPECT_TRUE(WriteFileAtomic(path, "bytes").ok());
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (stamp) ReplicaStore::StampGeneration(fd.get(), *stamp);
    return path;
  };
  const std::string old = make(1, 3), newer = make(2, 9), unstamped = make(3, std::nullopt), locked = make(4, 1);
  UniqueFd writer(::open(locked.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_EQ(::flock(writer.get(), LOCK_SH), 0);  // a mount writing it
  {
    UniqueFd fd(::open(old.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(ReplicaStore::StampedGeneration(fd.get()), std::optional<uint64_t>(3)) << "no user xattrs here?";
  }
  EXPECT_EQ(store_->DropWholeFiles({{1, 5}, {2, 5}, {3, 5}, {4, 5}, {77, 5}}), 1u);
  auto exists = [](const std::string& p) { return ::access(p.c_str(), F_OK) == 0; };
  EXPECT_FALSE(exists(old));
  EXPECT_TRUE(exists(newer));
  EXPECT_TRUE(exists(unstamped));
  EXPECT_TRUE(exists(locked));
}

// A write-behind Put the writer gave up on (it timed out) may be stored after
// the commit's Put of the chunk's new bytes to the same holder: the bytes the
// commit counted must stay readable (they were one file name before).
TEST_F(ReplicaStoreTest, ALatePutOfOtherBytesLeavesTheCountedReplicaAlone) {
  const std::string old_bytes = PseudoRandomBytes(5000, 20), new_bytes = PseudoRandomBytes(5000, 21);
  ASSERT_TRUE(store_->Put(8, 3, 0, Sum(new_bytes), new_bytes).ok());  // the commit's
  ASSERT_TRUE(store_->Put(8, 3, 0, Sum(old_bytes), old_bytes).ok());  // the late one
  Result<std::string> r = store_->Read(8, 3, 0, Sum(new_bytes), 8192, new_bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == new_bytes);
  r = ReplicaStore::ReadCopy(store_->dir(), 8, 3, 0, Sum(new_bytes), 8192, new_bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == new_bytes);
}

// Replicas stored by a version that named them without the checksum are
// renamed when the store opens, and read as before; a torn one is not served.
TEST_F(ReplicaStoreTest, ReplicasNamedWithoutTheirChecksumAreRenamedAtOpen) {
  const std::string a = PseudoRandomBytes(3000, 22), b = PseudoRandomBytes(3000, 23);
  ASSERT_TRUE(store_->Put(9, 1, 0, Sum(a), a).ok());
  ASSERT_TRUE(store_->Put(9, 1, 1, Sum(b), b).ok());
  const std::string legacy0 = JoinPath(store_->dir(), "chunks/9-1-0"), legacy1 = JoinPath(store_->dir(), "chunks/9-1-1");
  ASSERT_EQ(::rename(store_->ChunkPath(9, 1, 0, Sum(a)).c_str(), legacy0.c_str()), 0);
  ASSERT_EQ(::rename(store_->ChunkPath(9, 1, 1, Sum(b)).c_str(), legacy1.c_str()), 0);
  ASSERT_EQ(::truncate(legacy1.c_str(), 1000), 0);  // torn
  Open();
  Result<std::string> r = store_->Read(9, 1, 0, Sum(a), 4096, a.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == a);
  EXPECT_EQ(store_->Read(9, 1, 1, Sum(b), 4096, b.size()).status().code(), Code::kNotFound);
  // The torn one is listed (it takes space) and evicted with its file.
  EXPECT_EQ(store_->List().chunks.size(), 2u);
  EXPECT_EQ(store_->DropFilesExcept({}, Clock::now() + std::chrono::hours(1)), 2u);
  EXPECT_EQ(FilesIn("chunks"), 0u);
}

}  // namespace
}  // namespace hoard
