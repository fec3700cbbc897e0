#include "common/direct_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing.h"

namespace hoard {
namespace {

// Resident pages of the file at `path`, as mincore(2) counts them.
size_t ResidentPages(const std::string& path, size_t size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  if (!fd.valid() || size == 0) return 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return 0;
  std::vector<unsigned char> vec((size + 4095) / 4096);
  size_t n = 0;
  if (::mincore(map, size, vec.data()) == 0) {
    for (unsigned char v : vec) n += v & 1;
  }
  ::munmap(map, size);
  return n;
}

class DirectIoTest : public ::testing::Test {
 protected:
  // Writes `data` (split into a data part and a 32-byte tail, as a chunk file
  // and its trailer) to a new file; returns its path.
  std::string Write(DirectIo& io, const std::string& name, const std::string& data, const std::string& tail) {
    const std::string path = tmp_.Sub(name);
    UniqueFd fd = io.Open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    EXPECT_TRUE(fd.valid()) << std::strerror(errno);
    direct_ = (::fcntl(fd.get(), F_GETFL) & O_DIRECT) != 0;
    Status s = io.WriteWhole(fd.get(), {data, tail});
    EXPECT_TRUE(s.ok()) << s.ToString();
    return path;
  }

  testing::TempDir tmp_{"hoard-direct-io"};
  bool direct_ = false;
};

TEST_F(DirectIoTest, TheFileHoldsExactlyThePartsAtEverySize) {
  DirectIo io;
  const std::string tail = testing::PseudoRandomBytes(32, 99);
  for (size_t size : {size_t{0}, size_t{1}, size_t{4064}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{112640},
                      DirectIo::kPiece - 32, DirectIo::kPiece, DirectIo::kPiece + 4097, 3 * DirectIo::kPiece + 5}) {
    const std::string data = testing::PseudoRandomBytes(size, size);
    const std::string path = Write(io, "f" + std::to_string(size), data, tail);
    // The filesystem under /tmp here (ext4) takes direct I/O.
    EXPECT_TRUE(direct_) << "size " << size;
    Result<std::string> back = ReadFile(path);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->size(), size + tail.size()) << "size " << size;
    EXPECT_TRUE(*back == data + tail) << "size " << size;
  }
}

// The point of it: the bytes went to the disk, not into the page cache.
TEST_F(DirectIoTest, ADirectWriteLeavesNothingInThePageCache) {
  DirectIo io;
  const std::string data = testing::PseudoRandomBytes(4u << 20, 5);
  const std::string path = Write(io, "big", data, "");
  ASSERT_TRUE(direct_);
  EXPECT_EQ(ResidentPages(path, data.size()), 0u);

  DirectIo buffered(/*enabled=*/false);
  const std::string path2 = Write(buffered, "buffered", data, "");
  EXPECT_FALSE(direct_);
  EXPECT_GT(ResidentPages(path2, data.size()), 0u);
  EXPECT_TRUE(*ReadFile(path2) == data);
}

TEST_F(DirectIoTest, AFailedWriteReturnsItsErrorAndStaysDirect) {
  DirectIo io;
  const std::string path = tmp_.Sub("full");
  UniqueFd fd = io.Open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_TRUE(fd.valid());
  const std::string data = testing::PseudoRandomBytes(3 * DirectIo::kPiece, 6);
  // The disk fills after the first piece.
  Status s = io.WriteWhole(fd.get(), {data, "trailer"},
                           [](uint64_t written) { return written > 0 ? Status::NoSpace("injected") : Status::Ok(); });
  EXPECT_EQ(s.code(), Code::kNoSpace);
  // Only a filesystem refusing direct I/O turns it off.
  EXPECT_TRUE(io.enabled());
}

}  // namespace
}  // namespace hoard
