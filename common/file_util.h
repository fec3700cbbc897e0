// File: common/file_util.h
//
// Small POSIX helpers shared by the daemons: an owning fd, whole-file reads,
// crash-safe whole-file replacement, and directory creation.
//
// Thread-safety: free functions are safe to call concurrently on different
// paths. A UniqueFd is owned by one thread at a time.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

// Owns a file descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Reads a whole file; kNotFound if it does not exist.
Result<std::string> ReadFile(const std::string& path);

// Replaces `path` with `data` so that a crash leaves either the old or the new
// content, never a mix: writes PATH.tmp, fsyncs it, renames it over PATH and
// fsyncs the directory.
Status WriteFileAtomic(const std::string& path, std::string_view data);

// Writes all of `data` at `offset`, retrying short writes and EINTR.
Status PwriteAll(int fd, const void* data, size_t len, off_t offset);
// Reads exactly `len` bytes at `offset`; kIoError on a short file.
Status PreadAll(int fd, void* data, size_t len, off_t offset);

// Opens (creating) `path` and takes an exclusive flock on it, for "one
// process per directory": kUnavailable naming `what` if another process holds
// it. The lock lasts as long as the returned fd (and dies with the process).
Result<UniqueFd> LockFile(const std::string& path, const std::string& what);

// mkdir -p.
Status MakeDirs(const std::string& path);
// rm -rf; OK if the path does not exist.
Status RemoveTree(const std::string& path);

// fsyncs a directory, so a rename or create inside it survives a crash.
Status SyncDir(const std::string& path);

// The directory part of a path ("a/b/c" -> "a/b", "c" -> ".").
std::string DirName(const std::string& path);

// Joins two path pieces with exactly one '/'.
std::string JoinPath(std::string_view a, std::string_view b);

}  // namespace hoard
