#include "common/file_locks.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

FileLock Posix(uint64_t session, uint64_t owner, LockType type, uint64_t start, uint64_t end) {
  return FileLock{.file = 7, .session = session, .owner = owner, .type = type, .start = start, .end = end};
}

FileLock Flock(uint64_t session, uint64_t owner, LockType type) {
  return FileLock{.file = 7, .session = session, .owner = owner, .flock = true, .type = type};
}

TEST(FileLocksTest, ExclusiveFlockExcludesEveryOtherOwnerUntilReleased) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Flock(1, 10, LockType::kWrite)).has_value());
  // Another mount (session) with the same kernel owner value is another owner.
  std::optional<FileLock> c = locks.Set(Flock(2, 10, LockType::kWrite));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->session, 1u);
  EXPECT_TRUE(locks.Set(Flock(2, 11, LockType::kRead)).has_value());
  locks.ReleaseOwner(7, 1, 10, /*flock=*/true);
  EXPECT_FALSE(locks.Set(Flock(2, 11, LockType::kRead)).has_value());
  EXPECT_FALSE(locks.Set(Flock(3, 12, LockType::kRead)).has_value());  // shared with shared
  EXPECT_TRUE(locks.Set(Flock(1, 10, LockType::kWrite)).has_value());
}

TEST(FileLocksTest, FlockAndPosixLocksAreIndependentAsOnLinux) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Flock(1, 10, LockType::kWrite)).has_value());
  EXPECT_FALSE(locks.Set(Posix(2, 20, LockType::kWrite, 0, UINT64_MAX)).has_value());
  locks.ReleaseOwner(7, 1, 10, /*flock=*/false);  // POSIX release leaves the flock
  EXPECT_TRUE(locks.Test(Flock(3, 30, LockType::kRead)).has_value());
}

TEST(FileLocksTest, RangesConflictOnlyWhereTheyOverlapAndOneIsExclusive) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 100, 199)).has_value());
  EXPECT_FALSE(locks.Set(Posix(2, 1, LockType::kWrite, 200, 299)).has_value());
  EXPECT_FALSE(locks.Set(Posix(2, 1, LockType::kRead, 0, 99)).has_value());
  std::optional<FileLock> c = locks.Test(Posix(3, 1, LockType::kRead, 150, 150));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->start, 100u);
  EXPECT_EQ(c->end, 199u);
  EXPECT_EQ(c->type, LockType::kWrite);
  EXPECT_FALSE(locks.Test(Posix(3, 1, LockType::kRead, 0, 50)).has_value());
  EXPECT_TRUE(locks.Test(Posix(3, 1, LockType::kWrite, 0, 50)).has_value());
}

TEST(FileLocksTest, UnlockingTheMiddleOfARangeKeepsBothEnds) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 0, 999)).has_value());
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kUnlock, 400, 599)).has_value());
  EXPECT_FALSE(locks.Test(Posix(2, 1, LockType::kWrite, 400, 599)).has_value());
  EXPECT_TRUE(locks.Test(Posix(2, 1, LockType::kWrite, 399, 399)).has_value());
  EXPECT_TRUE(locks.Test(Posix(2, 1, LockType::kWrite, 600, 600)).has_value());
  std::vector<FileLock> held = locks.Held(1);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].end, 399u);
  EXPECT_EQ(held[1].start, 600u);
}

TEST(FileLocksTest, AnOwnersNewLockReplacesItsOldOneOnTheRangeAndMerges) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kRead, 0, 99)).has_value());
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kRead, 100, 199)).has_value());
  EXPECT_EQ(locks.size(), 1u);  // merged
  // Upgrading part of it: the write lock replaces the read lock there.
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 50, 149)).has_value());
  EXPECT_EQ(locks.size(), 3u);
  EXPECT_TRUE(locks.Test(Posix(2, 1, LockType::kRead, 60, 60)).has_value());
  EXPECT_FALSE(locks.Test(Posix(2, 1, LockType::kRead, 10, 10)).has_value());
  // Another owner's shared lock blocks an upgrade.
  EXPECT_FALSE(locks.Set(Posix(2, 1, LockType::kRead, 0, 10)).has_value());
  EXPECT_TRUE(locks.Set(Posix(1, 1, LockType::kWrite, 0, 10)).has_value());
}

TEST(FileLocksTest, ALockToTheEndOfAnyFileReachesEveryOffset) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 1000, UINT64_MAX)).has_value());
  EXPECT_TRUE(locks.Test(Posix(2, 1, LockType::kRead, UINT64_MAX - 1, UINT64_MAX)).has_value());
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 0, 999)).has_value());
  EXPECT_EQ(locks.size(), 1u);  // merged up to the end
}

TEST(FileLocksTest, ADeadSessionLosesEveryLockItHeld) {
  FileLocks locks;
  EXPECT_FALSE(locks.Set(Posix(1, 1, LockType::kWrite, 0, 9)).has_value());
  EXPECT_FALSE(locks.Set(Flock(1, 2, LockType::kWrite)).has_value());
  EXPECT_FALSE(locks.Set(FileLock{.file = 8, .session = 1, .owner = 1, .flock = true, .type = LockType::kRead})
                   .has_value());
  EXPECT_FALSE(locks.Set(Posix(2, 1, LockType::kRead, 20, 29)).has_value());
  EXPECT_EQ(locks.DropSession(1), 3u);
  EXPECT_FALSE(locks.Test(Posix(3, 1, LockType::kWrite, 0, 9)).has_value());
  EXPECT_TRUE(locks.Test(Posix(3, 1, LockType::kWrite, 25, 25)).has_value());
  EXPECT_TRUE(locks.Held(1).empty());
}

}  // namespace
}  // namespace hoard
