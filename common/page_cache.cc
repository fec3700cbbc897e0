#include "common/page_cache.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

namespace hoard {
namespace {

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

// As include/uapi/linux/mman.h (not in Debian 12's headers).
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

std::atomic<bool> no_cachestat{false};

Result<bool> ByMincore(int fd, uint64_t offset, uint64_t length, uint64_t page) {
  const uint64_t from = offset / page * page;
  const uint64_t span = offset + length - from;
  void* map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(from));
  if (map == MAP_FAILED) return Status::FromErrno(errno, "mmap for mincore");
  std::vector<unsigned char> vec((span + page - 1) / page);
  const int rc = ::mincore(map, span, vec.data());
  const int err = errno;
  ::munmap(map, span);
  if (rc != 0) return Status::FromErrno(err, "mincore");
  for (unsigned char v : vec) {
    if (!(v & 1)) return false;
  }
  return true;
}

}  // namespace

Result<bool> FullyCached(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return true;
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t pages = (offset + length + page - 1) / page - offset / page;
  if (!no_cachestat.load(std::memory_order_relaxed)) {
    // cachestat counts whole pages overlapping the range.
    CachestatRange range{offset, length};
    Cachestat cs{};
    if (::syscall(__NR_cachestat, fd, &range, &cs, 0) == 0) return cs.nr_cache >= pages;
    if (errno != ENOSYS) return Status::FromErrno(errno, "cachestat");
    no_cachestat.store(true, std::memory_order_relaxed);
  }
  return ByMincore(fd, offset, length, page);
}

namespace internal {
Result<bool> FullyCachedByMincore(int fd, uint64_t offset, uint64_t length) {
  return length == 0 ? Result<bool>(true) : ByMincore(fd, offset, length, uint64_t(::sysconf(_SC_PAGESIZE)));
}
}  // namespace internal

}  // namespace hoard
