// File: fuse/local_fds.h
//
// LocalFds is a small per-thread cache of open local chunk files.
//
// A warm read is one pread-or-splice from a chunk file; opening that file per
// request (path formatting, open, fstat, close) would cost more than the read
// itself for 128 KiB requests. Each FUSE worker thread keeps the last few chunk
// files it served open, so a request for a chunk it read recently costs a scan
// of kSlots entries: no lock, no allocation, no system call.
//
// Entries are keyed by (reader id, chunk key): several mounts (tests run
// several HoardFs in one process) never share an fd. A chunk file removed from
// the store (eviction, dataset removal) stays readable through a cached fd
// until the entry is evicted; its bytes are still the chunk's bytes (a chunk
// key names one immutable version), so a hit is never wrong, and a removed
// file's space returns at most kSlots cache misses of this thread later, or
// when the thread ends.
//
// Bounds: kSlots fds per FUSE worker thread.
//
// Thread-safety: each thread has its own instance (ForThisThread); an instance
// is never shared.
#pragma once

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "striping/chunk_key.h"

namespace hoard::fuse {

class LocalFds {
 public:
  static constexpr size_t kSlots = 16;

  static LocalFds& ForThisThread() {
    thread_local LocalFds cache;
    return cache;
  }

  LocalFds() = default;
  LocalFds(const LocalFds&) = delete;
  LocalFds& operator=(const LocalFds&) = delete;
  ~LocalFds() { Clear(); }

  // The cached fd of `key` for reader `owner`, or -1. The fd stays owned by
  // the cache and is valid until this thread's next Put.
  int Find(uint64_t owner, const ChunkKey& key) const {
    for (const Entry& e : entries_) {
      if (e.fd >= 0 && e.owner == owner && e.key == key) return e.fd;
    }
    return -1;
  }

  // Takes ownership of `fd`, closing the oldest entry's fd if the cache is full.
  void Put(uint64_t owner, const ChunkKey& key, int fd) {
    Entry& e = entries_[next_];
    if (e.fd >= 0) ::close(e.fd);
    e = Entry{owner, key, fd};
    next_ = (next_ + 1) % kSlots;
  }

  size_t open_count() const {
    size_t n = 0;
    for (const Entry& e : entries_) n += e.fd >= 0;
    return n;
  }

 private:
  struct Entry {
    uint64_t owner = 0;
    ChunkKey key;
    int fd = -1;
  };

  void Clear() {
    for (Entry& e : entries_) {
      if (e.fd >= 0) ::close(e.fd);
      e.fd = -1;
    }
  }

  std::array<Entry, kSlots> entries_;
  size_t next_ = 0;
};

}  // namespace hoard::fuse
