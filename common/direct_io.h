// File: common/direct_io.h
//
// Files written once, whole, and read later by someone else (chunk-store
// fills, the mount's read tier, checkpoint replicas) are written with
// O_DIRECT: the disk reads the bytes from an aligned buffer of the writing
// thread. Through the page cache, every byte would cost a CPU copy into a
// freshly allocated page (on a node filling at link speed, the largest single
// CPU cost of a fill: bench/RESULTS.md) and take memory from the readers the
// page cache serves, for bytes nobody reads soon.
//
// O_DIRECT wants block-aligned buffers, offsets and lengths, so a file is
// written in aligned pieces through the thread's buffer, the last one padded
// with zeros, and then cut to its length (ftruncate). Filesystems without
// direct I/O (tmpfs) refuse it at open (EINVAL), some only at the first write:
// DirectIo then clears O_DIRECT on that fd, writes buffered, and opens every
// later file without it.
//
// Thread-safety: all methods may be called from any thread; each thread has
// its own buffer (kPiece bytes, allocated at its first direct write).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include <sys/types.h>

#include "common/file_util.h"
#include "common/result.h"

namespace hoard {

class DirectIo {
 public:
  static constexpr size_t kAlign = 4096;
  // Bytes per direct write(2), and the size of each thread's buffer.
  static constexpr size_t kPiece = 1u << 20;
  // `n` rounded up to whole kAlign blocks.
  static constexpr uint64_t RoundUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

  // `enabled` = false: always buffered (a test, or a store that wants its
  // bytes in the page cache).
  explicit DirectIo(bool enabled = true) : enabled_(enabled) {}

  // open(2) of `path` with `flags`, plus O_DIRECT while the filesystem takes
  // it. An invalid fd with errno set on failure.
  UniqueFd Open(const std::string& path, int flags, mode_t mode);

  // Writes `parts` back to back from offset 0 of `fd` (opened by Open), so
  // that the file holds exactly their bytes. `before_write` (fault injection,
  // may be empty) is called before each write(2) with the bytes written so
  // far; its error is returned as the write's.
  Status WriteWhole(int fd, std::initializer_list<std::string_view> parts,
                    const std::function<Status(uint64_t)>& before_write = {});

  // Whether files are still opened with O_DIRECT.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

 private:
  Status WriteDirect(int fd, std::initializer_list<std::string_view> parts, uint64_t total,
                     const std::function<Status(uint64_t)>& before_write);

  std::atomic<bool> enabled_;
};

// A buffer aligned for O_DIRECT reads and writes.
struct AlignedFree {
  void operator()(char* p) const;
};
using AlignedBuffer = std::unique_ptr<char, AlignedFree>;
// `size` bytes aligned to DirectIo::kAlign; null when out of memory.
AlignedBuffer AllocateAligned(size_t size);

}  // namespace hoard
