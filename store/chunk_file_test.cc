#include "store/chunk_file.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/hash.h"

namespace hoard {
namespace {

std::string Trailer(const ChunkMeta& t) {
  char buf[kChunkMetaSize];
  EncodeChunkMeta(t, buf);
  return std::string(buf, sizeof(buf));
}

TEST(ChunkTrailerTest, EncodesLittleEndianWithMagic) {
  std::string b = Trailer({.length = 0x0102, .checksum = 0xAABBCCDDEEFF0011ULL, .dataset_uid = 7});
  ASSERT_EQ(b.size(), kChunkMetaSize);
  EXPECT_EQ(b.substr(0, 8), "HRDCHNK1");  // the magic reads as text on disk
  EXPECT_EQ(static_cast<unsigned char>(b[8]), 0x02);
  EXPECT_EQ(static_cast<unsigned char>(b[9]), 0x01);
  EXPECT_EQ(static_cast<unsigned char>(b[16]), 0x11);
  EXPECT_EQ(static_cast<unsigned char>(b[23]), 0xAA);
  EXPECT_EQ(static_cast<unsigned char>(b[24]), 7);
}

TEST(ChunkTrailerTest, RoundTrips) {
  ChunkMeta in{.length = 1000, .checksum = 0x123456789ABCDEF0ULL, .dataset_uid = 0xFFFFFFFFFFFFFFFFULL};
  Result<ChunkMeta> out = DecodeChunkMeta(Trailer(in), 1000 + kChunkMetaSize, ChunkLayout::kTrailer);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->length, in.length);
  EXPECT_EQ(out->checksum, in.checksum);
  EXPECT_EQ(out->dataset_uid, in.dataset_uid);
}

TEST(ChunkTrailerTest, RejectsBadMagic) {
  std::string b = Trailer({.length = 10, .checksum = 1, .dataset_uid = 2});
  b[0] ^= 1;
  EXPECT_EQ(DecodeChunkMeta(b, 10 + kChunkMetaSize, ChunkLayout::kTrailer).status().code(), Code::kCorruption);
}

TEST(ChunkTrailerTest, RejectsLengthThatDisagreesWithFileSize) {
  std::string b = Trailer({.length = 10, .checksum = 1, .dataset_uid = 2});
  EXPECT_EQ(DecodeChunkMeta(b, 11 + kChunkMetaSize, ChunkLayout::kTrailer).status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeChunkMeta(b, 9 + kChunkMetaSize, ChunkLayout::kTrailer).status().code(), Code::kCorruption);
  // A garbage length must not wrap around when compared with the file size.
  std::string huge = Trailer({.length = ~0ULL - 10, .checksum = 1, .dataset_uid = 2});
  EXPECT_EQ(DecodeChunkMeta(huge, 20, ChunkLayout::kTrailer).status().code(), Code::kCorruption);
}

TEST(ChunkTrailerTest, RejectsWrongSizedInput) {
  std::string b = Trailer({.length = 0, .checksum = 0, .dataset_uid = 0});
  EXPECT_EQ(DecodeChunkMeta(b.substr(0, 31), kChunkMetaSize, ChunkLayout::kTrailer).status().code(), Code::kCorruption);
}

class ChunkFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/chunk_file_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  // Writes `bytes` to a file and returns an fd open on it.
  UniqueFd WriteAndOpen(const std::string& bytes) {
    std::string path = JoinPath(dir_, "f");
    EXPECT_TRUE(WriteFileAtomic(path, bytes).ok());
    return UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  }

  // A well-formed chunk file holding `data`.
  static std::string ChunkBytes(const std::string& data, uint64_t uid = 5) {
    return data + Trailer({.length = data.size(), .checksum = Checksum64(data.data(), data.size()), .dataset_uid = uid});
  }

  std::string dir_;
};

TEST_F(ChunkFileTest, ReadsTrailerAndVerifiesGoodFile) {
  // Larger than the verify buffer, so the streaming path is exercised.
  std::string data((1 << 20) * 2 + 12345, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 9));
  UniqueFd fd = WriteAndOpen(ChunkBytes(data, 42));
  ASSERT_TRUE(fd.valid());
  Result<ChunkMeta> t = ReadChunkMeta(fd.get(), data.size() + kChunkMetaSize);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->length, data.size());
  EXPECT_EQ(t->dataset_uid, 42u);
  EXPECT_TRUE(VerifyChunkFile(fd.get(), *t).ok());
}

TEST_F(ChunkFileTest, VerifyCatchesAFlippedByte) {
  std::string data(100000, 'x');
  std::string bytes = ChunkBytes(data);
  bytes[77777] ^= 0x10;
  UniqueFd fd = WriteAndOpen(bytes);
  Result<ChunkMeta> t = ReadChunkMeta(fd.get(), bytes.size());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(VerifyChunkFile(fd.get(), *t).code(), Code::kCorruption);
}

TEST_F(ChunkFileTest, VerifyCatchesAShortFile) {
  std::string data(1000, 'y');
  UniqueFd fd = WriteAndOpen(data.substr(0, 500));
  ChunkMeta t{.length = data.size(), .checksum = Checksum64(data.data(), data.size()), .dataset_uid = 1};
  EXPECT_EQ(VerifyChunkFile(fd.get(), t).code(), Code::kCorruption);
}

TEST_F(ChunkFileTest, EmptyChunkIsJustATrailer) {
  UniqueFd fd = WriteAndOpen(ChunkBytes(""));
  Result<ChunkMeta> t = ReadChunkMeta(fd.get(), kChunkMetaSize);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->length, 0u);
  EXPECT_TRUE(VerifyChunkFile(fd.get(), *t).ok());
}

TEST_F(ChunkFileTest, FileTooShortForATrailerIsCorrupt) {
  UniqueFd fd = WriteAndOpen("short");
  EXPECT_EQ(ReadChunkMeta(fd.get(), 5).status().code(), Code::kCorruption);
}

TEST_F(ChunkFileTest, OnePassReadAndVerify) {
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + (i >> 11));
  std::string bytes = ChunkBytes(data, 9);
  UniqueFd fd = WriteAndOpen(bytes);
  ASSERT_TRUE(fd.valid());
  // Scratch sizes that split the trailer across reads, end exactly at the
  // data, or swallow the whole file in one read.
  for (size_t scratch : {size_t(7), size_t(4096), data.size(), size_t(1) << 20}) {
    std::string buf(scratch, '\0');
    Result<ChunkMeta> t = ReadAndVerifyChunkFile(fd.get(), bytes.size(), buf.data(), buf.size());
    ASSERT_TRUE(t.ok()) << scratch << ": " << t.status().ToString();
    EXPECT_EQ(t->length, data.size());
    EXPECT_EQ(t->dataset_uid, 9u);
  }
  std::string buf(65536, '\0');
  // A flipped data byte, a flipped trailer byte, a short file: all corrupt.
  for (size_t at : {size_t(12345), bytes.size() - 20}) {
    std::string bad = bytes;
    bad[at] ^= 0x01;
    UniqueFd bfd = WriteAndOpen(bad);
    EXPECT_EQ(ReadAndVerifyChunkFile(bfd.get(), bad.size(), buf.data(), buf.size()).status().code(),
              Code::kCorruption)
        << at;
  }
  UniqueFd sfd = WriteAndOpen(bytes.substr(0, 1000));
  EXPECT_EQ(ReadAndVerifyChunkFile(sfd.get(), bytes.size(), buf.data(), buf.size()).status().code(),
            Code::kCorruption);
  EXPECT_EQ(ReadAndVerifyChunkFile(sfd.get(), 10, buf.data(), buf.size()).status().code(), Code::kCorruption);
}

TEST_F(ChunkFileTest, TheFilesystemHereTakesTheXattr) {
  // The tests of the xattr layout below mean something only if it is used.
  Result<ChunkLayout> layout = ProbeChunkLayout(dir_);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(*layout, ChunkLayout::kXattr);
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "the probe file was left behind";
}

TEST_F(ChunkFileTest, XattrLayoutHoldsOnlyTheBytes) {
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + (i >> 10));
  UniqueFd fd = WriteAndOpen(data);
  const ChunkMeta meta{.length = data.size(), .checksum = Checksum64(data.data(), data.size()), .dataset_uid = 3};
  ASSERT_TRUE(WriteChunkMetaXattr(fd.get(), meta).ok());

  Result<ChunkMeta> m = ReadChunkMeta(fd.get(), data.size());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->layout, ChunkLayout::kXattr);
  EXPECT_EQ(m->length, data.size());
  EXPECT_EQ(m->file_size(), data.size());
  EXPECT_EQ(m->dataset_uid, 3u);
  EXPECT_TRUE(VerifyChunkFile(fd.get(), *m).ok());
  std::string buf(4096, '\0');
  Result<ChunkMeta> v = ReadAndVerifyChunkFile(fd.get(), data.size(), buf.data(), buf.size());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->layout, ChunkLayout::kXattr);
  // The record must fit the file: a file that lost bytes is corrupt, as is
  // one whose bytes were changed.
  EXPECT_EQ(ReadChunkMeta(fd.get(), data.size() - 1).status().code(), Code::kCorruption);
  std::string bad = data;
  bad[4242] ^= 0x40;
  UniqueFd bfd = WriteAndOpen(bad);
  ASSERT_TRUE(WriteChunkMetaXattr(bfd.get(), meta).ok());
  EXPECT_EQ(ReadAndVerifyChunkFile(bfd.get(), bad.size(), buf.data(), buf.size()).status().code(), Code::kCorruption);
  Result<ChunkMeta> bm = ReadChunkMeta(bfd.get(), bad.size());
  ASSERT_TRUE(bm.ok());
  EXPECT_EQ(VerifyChunkFile(bfd.get(), *bm).code(), Code::kCorruption);
}

TEST_F(ChunkFileTest, MoveTrailerToXattrConvertsInPlaceAndSurvivesACutShortConversion) {
  std::string data(70000, 'q');
  data[5] = 'r';
  const std::string path = JoinPath(dir_, "f");
  UniqueFd fd = WriteAndOpen(ChunkBytes(data, 11));
  Result<ChunkMeta> t = ReadChunkMeta(fd.get(), data.size() + kChunkMetaSize);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->layout, ChunkLayout::kTrailer);

  // Cut short after the xattr was set: still read as a trailer file.
  ChunkMeta x = *t;
  x.layout = ChunkLayout::kXattr;
  ASSERT_TRUE(WriteChunkMetaXattr(fd.get(), x).ok());
  Result<ChunkMeta> half = ReadChunkMeta(fd.get(), data.size() + kChunkMetaSize);
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ(half->layout, ChunkLayout::kTrailer);
  EXPECT_EQ(half->length, data.size());

  ASSERT_TRUE(MoveTrailerToXattr(fd.get(), path, *half).ok());
  Result<std::string> after = ReadFile(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, data);
  Result<ChunkMeta> done = ReadChunkMeta(fd.get(), data.size());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->layout, ChunkLayout::kXattr);
  EXPECT_EQ(done->dataset_uid, 11u);
  EXPECT_TRUE(VerifyChunkFile(fd.get(), *done).ok());

  // A damaged xattr makes the file corrupt, whatever else it holds; so does
  // a trailer that is not the record the xattr has.
  UniqueFd g = WriteAndOpen(ChunkBytes(data, 11));
  ASSERT_EQ(::fsetxattr(g.get(), kChunkMetaXattr, "garbage", 7, 0), 0);
  EXPECT_EQ(ReadChunkMeta(g.get(), data.size() + kChunkMetaSize).status().code(), Code::kCorruption);
  ChunkMeta other = x;
  other.dataset_uid = 12;
  ASSERT_TRUE(WriteChunkMetaXattr(g.get(), other).ok());
  EXPECT_EQ(ReadChunkMeta(g.get(), data.size() + kChunkMetaSize).status().code(), Code::kCorruption);
  std::string buf(4096, '\0');
  EXPECT_EQ(ReadAndVerifyChunkFile(g.get(), data.size() + kChunkMetaSize, buf.data(), buf.size()).status().code(),
            Code::kCorruption);
}

}  // namespace

}  // namespace hoard

namespace hoard {
namespace {

class BlockSumsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/block_sums_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  // A chunk file in the xattr layout holding `data`, with block sums.
  UniqueFd Chunk(const std::string& data, const std::string& name = "c") {
    const std::string path = JoinPath(dir_, name);
    EXPECT_TRUE(WriteFileAtomic(path, data).ok());
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    EXPECT_TRUE(WriteChunkMetaXattr(fd.get(), Meta(data)).ok());
    EXPECT_TRUE(WriteBlockSums(fd.get(), data).ok());
    return fd;
  }
  static ChunkMeta Meta(const std::string& data) {
    return {.length = data.size(), .checksum = Checksum64(data.data(), data.size()), .dataset_uid = 1};
  }

  std::string dir_;
  std::string scratch_ = std::string(100'000, '\0');  // not a multiple of a block
};

TEST_F(BlockSumsTest, OneSumPerBlockOnlyForChunksOfSeveralBlocks) {
  EXPECT_EQ(EncodeBlockSums(std::string(kSumBlockBytes, 'x')), "");
  const std::string data(2 * kSumBlockBytes + 1, 'y');
  const std::string sums = EncodeBlockSums(data);
  ASSERT_EQ(sums.size(), 3u * 8);
  UniqueFd fd = Chunk(data);
  Result<std::optional<std::vector<uint64_t>>> back = ReadBlockSums(fd.get(), data.size());
  ASSERT_TRUE(back.ok() && back->has_value());
  ASSERT_EQ((*back)->size(), 3u);
  EXPECT_EQ((**back)[2], Checksum64(data.data() + 2 * kSumBlockBytes, 1));
  // Sums that do not fit the length are corruption.
  EXPECT_EQ(ReadBlockSums(fd.get(), 5 * kSumBlockBytes).status().code(), Code::kCorruption);
  EXPECT_FALSE(ReadBlockSums(fd.get(), kSumBlockBytes)->has_value()) << "one block needs none";
}

// A range is checked by its blocks alone: a rotten block elsewhere does not
// fail it, one under it does; every check also covers the whole-chunk paths.
TEST_F(BlockSumsTest, ARangeIsCheckedByTheBlocksUnderIt) {
  std::string data(3 * kSumBlockBytes + 777, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + (i >> 11));
  const ChunkMeta meta = Meta(data);
  UniqueFd fd = Chunk(data);
  EXPECT_TRUE(VerifyChunkRange(fd.get(), meta, 0, data.size(), scratch_.data(), scratch_.size()).ok());
  // Rot in block 1.
  char c = 0;
  ASSERT_EQ(::pread(fd.get(), &c, 1, kSumBlockBytes + 5), 1);
  c ^= 0x10;
  ASSERT_EQ(::pwrite(fd.get(), &c, 1, kSumBlockBytes + 5), 1);
  auto check = [&](uint64_t off, uint64_t len) {
    return VerifyChunkRange(fd.get(), meta, off, len, scratch_.data(), scratch_.size()).code();
  };
  EXPECT_EQ(check(0, 4096), Code::kOk);
  EXPECT_EQ(check(2 * kSumBlockBytes, kSumBlockBytes + 777), Code::kOk);
  EXPECT_EQ(check(3 * kSumBlockBytes + 700, 500), Code::kOk) << "the short last block";
  EXPECT_EQ(check(kSumBlockBytes + 4000, 10), Code::kCorruption);
  EXPECT_EQ(check(kSumBlockBytes - 10, 20), Code::kCorruption) << "a range across the boundary";
  EXPECT_EQ(VerifyChunkFile(fd.get(), meta).code(), Code::kCorruption);
  std::string big(256 << 10, '\0');
  EXPECT_EQ(ReadAndVerifyChunkFile(fd.get(), data.size(), big.data(), big.size()).status().code(),
            Code::kCorruption);

  // Rotten sums with good bytes are caught too (the whole checksum agrees,
  // the block does not): never a block served on a wrong sum.
  UniqueFd g = Chunk(data, "g");
  std::string sums = EncodeBlockSums(data);
  sums[8] ^= 1;  // block 1's sum
  ASSERT_EQ(::fsetxattr(g.get(), kChunkSumsXattr, sums.data(), sums.size(), 0), 0);
  EXPECT_EQ(VerifyChunkRange(g.get(), meta, kSumBlockBytes, 1, scratch_.data(), scratch_.size()).code(),
            Code::kCorruption);
  EXPECT_EQ(VerifyChunkFile(g.get(), meta).code(), Code::kCorruption);
}

// A file without block sums (written before they existed) is checked whole.
TEST_F(BlockSumsTest, WithoutSumsTheWholeChunkIsChecked) {
  std::string data(2 * kSumBlockBytes, 'z');
  const std::string path = JoinPath(dir_, "old");
  ASSERT_TRUE(WriteFileAtomic(path, data).ok());
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  const ChunkMeta meta = Meta(data);
  ASSERT_TRUE(WriteChunkMetaXattr(fd.get(), meta).ok());
  EXPECT_TRUE(VerifyChunkRange(fd.get(), meta, 10, 10, scratch_.data(), scratch_.size()).ok());
  const char bad = 'q';
  ASSERT_EQ(::pwrite(fd.get(), &bad, 1, 2 * kSumBlockBytes - 1), 1);
  EXPECT_EQ(VerifyChunkRange(fd.get(), meta, 10, 10, scratch_.data(), scratch_.size()).code(), Code::kCorruption);
}

}  // namespace
}  // namespace hoard
