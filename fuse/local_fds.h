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
// several HoardFs in one process) never share an fd. A hit is never wrong: a
// chunk key names one immutable version of the bytes.
//
// Lifetime of an fd: a request may use several cached fds at once (one per
// chunk it touches) and hands them to the kernel only at its reply, so an fd
// evicted while the request runs is not closed at once but moved to the
// request's Deferred list, closed after the reply. Entries older than the
// reader's generation (bumped every poll and when a dataset goes away) are
// dropped at the thread's next request, so a chunk file deleted from the
// store (eviction, dataset removal) is released within a poll interval by
// every busy thread; an idle thread releases it at its next request or when
// libfuse ends it.
//
// Bounds: kSlots fds per FUSE worker thread.
//
// Thread-safety: each thread has its own instance (ForThisThread); an instance
// is never shared. Deferred belongs to one request on one thread.
#pragma once

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "striping/chunk_key.h"

namespace hoard::fuse {

class LocalFds {
 public:
  static constexpr size_t kSlots = 16;

  // Fds a request evicted; closed when the request is done (destructor).
  class Deferred {
   public:
    Deferred() = default;
    Deferred(const Deferred&) = delete;
    Deferred& operator=(const Deferred&) = delete;
    ~Deferred() {
      for (size_t i = 0; i < count_ && i < fixed_.size(); ++i) ::close(fixed_[i]);
      for (int fd : overflow_) ::close(fd);
    }
    void Add(int fd) {
      if (count_ < fixed_.size()) fixed_[count_] = fd;
      else overflow_.push_back(fd);  // a request touching > 24 chunks: rare
      ++count_;
    }

   private:
    std::array<int, 24> fixed_;
    size_t count_ = 0;
    std::vector<int> overflow_;
  };

  static LocalFds& ForThisThread() {
    thread_local LocalFds cache;
    return cache;
  }

  LocalFds() = default;
  LocalFds(const LocalFds&) = delete;
  LocalFds& operator=(const LocalFds&) = delete;
  ~LocalFds() {
    for (Entry& e : entries_) Close(e, nullptr);
  }

  // The cached fd of `key` for reader `owner` at `generation`, or -1. Entries
  // of an older generation are dropped first (into `deferred`). The fd stays
  // owned by the cache; it is valid until `deferred` is destroyed.
  int Find(uint64_t owner, uint64_t generation, const ChunkKey& key, Deferred* deferred) {
    if (generation != generation_) {
      for (Entry& e : entries_) Close(e, deferred);
      generation_ = generation;
      return -1;
    }
    for (const Entry& e : entries_) {
      if (e.fd >= 0 && e.owner == owner && e.key == key) return e.fd;
    }
    return -1;
  }

  // Takes ownership of `fd`; the entry it replaces goes to `deferred`.
  void Put(uint64_t owner, const ChunkKey& key, int fd, Deferred* deferred) {
    Entry& e = entries_[next_];
    Close(e, deferred);
    e = Entry{owner, key, fd};
    next_ = (next_ + 1) % kSlots;
  }

 private:
  struct Entry {
    uint64_t owner = 0;
    ChunkKey key;
    int fd = -1;
  };

  static void Close(Entry& e, Deferred* deferred) {
    if (e.fd < 0) return;
    if (deferred != nullptr) deferred->Add(e.fd);
    else ::close(e.fd);
    e.fd = -1;
  }

  std::array<Entry, kSlots> entries_;
  size_t next_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace hoard::fuse
