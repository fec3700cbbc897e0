#include "common/page_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"

namespace hoard {
namespace {

// A file dropped from the page cache reads as not cached, by either way of
// asking, and as cached again once read; a page dropped in the middle is
// noticed.
TEST(PageCacheTest, AFileDroppedFromTheCacheIsNotCachedUntilReadAgain) {
  testing::TempDir dir("hoard-pagecache");
  const std::string path = dir.path() + "/f";
  const std::string bytes = testing::PseudoRandomBytes(1 << 20, 5);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(PwriteAll(fd.get(), bytes.data(), bytes.size(), 0).ok());
  ASSERT_EQ(::fsync(fd.get()), 0);
  ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
  for (auto ask : {&FullyCached, &internal::FullyCachedByMincore}) {
    Result<bool> cached = ask(fd.get(), 0, bytes.size());
    ASSERT_TRUE(cached.ok()) << cached.status().ToString();
    EXPECT_FALSE(*cached);
  }
  std::string back(bytes.size(), '\0');
  ASSERT_TRUE(PreadAll(fd.get(), back.data(), back.size(), 0).ok());
  for (auto ask : {&FullyCached, &internal::FullyCachedByMincore}) {
    Result<bool> cached = ask(fd.get(), 0, bytes.size());
    ASSERT_TRUE(cached.ok());
    EXPECT_TRUE(*cached);
  }
  // One page in the middle dropped.
  ASSERT_EQ(::posix_fadvise(fd.get(), 512 << 10, 4096, POSIX_FADV_DONTNEED), 0);
  EXPECT_FALSE(*FullyCached(fd.get(), 0, bytes.size()));
  EXPECT_FALSE(*internal::FullyCachedByMincore(fd.get(), 0, bytes.size()));
  // Ranges that miss that page are still cached; one that touches it is not.
  for (auto ask : {&FullyCached, &internal::FullyCachedByMincore}) {
    EXPECT_TRUE(*ask(fd.get(), 0, 512 << 10));
    EXPECT_TRUE(*ask(fd.get(), (512 << 10) + 4096, 100 << 10));
    EXPECT_FALSE(*ask(fd.get(), (512 << 10) - 10, 20));
    EXPECT_TRUE(*ask(fd.get(), 7, 0));
  }
}

}  // namespace
}  // namespace hoard
