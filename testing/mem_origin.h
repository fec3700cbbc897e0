// File: testing/mem_origin.h
//
// MemOrigin: an origin held in memory, for the tests of the components above
// the origin (node, striping, prefetch, fuse). Besides files, directories and
// symlinks with chosen attributes it offers:
//
//   - faults:   FailPath("a/b", Status::Unavailable("down")) makes every call
//               that touches "a/b" or anything below it fail with that status
//               (Stat, Open, ReadAt of files opened before or after, and Walk
//               when it reaches the path); FailAll for every call. A fault may
//               be limited to the next N calls, to test retries.
//   - latency:  SetDelay(d) makes every call sleep d first (outside the lock,
//               so concurrent calls overlap as they would on a server).
//   - counters: ReadCount(path) / BytesRead(path) / OpenCount(path) count
//               ReadAt calls, bytes and opens per path, so a test can assert
//               "fetched from the origin exactly once".
//
//   MemOrigin origin;
//   ASSERT_TRUE(origin.AddFile("train/0001.jpg", std::string(100'000, 'x')).ok());
//   origin.FailPath("train", Status::Unavailable("nfs down"), /*times=*/1);
//   ... code under test ...
//   EXPECT_EQ(origin.ReadCount("train/0001.jpg"), 1u);
//
// Semantics follow a local file system: Add* creates missing parent
// directories; adding an existing path replaces it in place (an open file
// then reads the new bytes, as with a file rewritten on NFS); Remove unlinks
// but an already open file keeps reading the bytes it had. Paths are checked
// like every origin's (origin_path.h).
//
// Files opened from a MemOrigin must not outlive it.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "origin/origin.h"

namespace hoard {

// Attributes for MemOrigin::Add*. A `perm` of 0 means the usual default:
// 0644 for files, 0755 for directories, 0777 for symlinks. The file type bits
// of OriginEntry::mode are added by MemOrigin.
struct MemAttributes {
  uint32_t perm = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 1'700'000'000'000'000'000;  // 2023-11-14
};

class MemOrigin : public Origin {
 public:
  explicit MemOrigin(std::string source = "mem://");
  ~MemOrigin() override;

  // --- Content. kInvalidArgument for a bad path, for "" (the root is always
  // there), or when a parent is not a directory; replacing a directory that
  // has entries with a file or symlink is refused the same way.
  Status AddFile(std::string_view path, std::string bytes, const MemAttributes& attrs = {});
  Status AddDir(std::string_view path, const MemAttributes& attrs = {});
  Status AddSymlink(std::string_view path, std::string target, const MemAttributes& attrs = {});
  // Rewrites an existing file in place (the same file, as `>` in a shell
  // does, unlike AddFile, which replaces it as a rename would): open files
  // see the new bytes and attributes. kNotFound if it is not a file.
  Status RewriteFile(std::string_view path, std::string bytes, const MemAttributes& attrs);
  // Removes a path and everything below it; kNotFound if absent.
  Status Remove(std::string_view path);

  // --- Faults. `times` < 0: until cleared; otherwise the fault fails that
  // many calls and then disappears. A later fault for the same path replaces
  // the earlier one. The most specific fault (longest path) wins over a
  // shorter one, FailAll over all.
  void FailPath(std::string_view path, Status status, int times = -1);
  void FailAll(Status status, int times = -1);
  void ClearFaults();

  // --- Latency added to every Walk, Stat, Open and ReadAt.
  void SetDelay(std::chrono::nanoseconds delay);

  // --- Counters, since construction or ResetCounters. Failed calls count too
  // (they are calls the origin saw).
  uint64_t ReadCount(std::string_view path) const;   // ReadAt calls
  uint64_t BytesRead(std::string_view path) const;   // bytes returned by ReadAt
  uint64_t OpenCount(std::string_view path) const;   // Open calls (Read = Open + ReadAt)
  uint64_t TotalReadCount() const;
  uint64_t TotalBytesRead() const;
  void ResetCounters();

  // --- Origin.
  const std::string& source() const override { return source_; }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override;
  Result<OriginEntry> Stat(std::string_view path) override;
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override;

 private:
  struct Node;
  struct Fault {
    Status status;
    int remaining = -1;  // < 0: forever
  };
  struct Counters {
    uint64_t reads = 0;
    uint64_t bytes = 0;
    uint64_t opens = 0;
  };
  class File;

  Status Add(std::string_view path, std::shared_ptr<Node> node);
  // The node at `path`, nullptr if absent.
  std::shared_ptr<Node> FindLocked(std::string_view path) const REQUIRES(mu_);
  // The fault that applies to `path` (FailAll's too unless told not to),
  // consuming one of its `times`; OK if none.
  Status TakeFaultLocked(std::string_view path, bool include_fail_all = true) REQUIRES(mu_);
  void Sleep() const;
  OriginEntry EntryOf(const std::string& path, const Node& node) const;
  Result<OriginEntry> RestatFile(const std::string& path, const std::shared_ptr<Node>& node);
  Result<size_t> ReadFile(const std::string& path, const std::shared_ptr<Node>& node, uint64_t offset, size_t len,
                          char* buf);

  const std::string source_;
  mutable Mutex mu_;
  std::shared_ptr<Node> root_ GUARDED_BY(mu_);
  std::map<std::string, Fault, std::less<>> faults_ GUARDED_BY(mu_);
  std::optional<Fault> fail_all_ GUARDED_BY(mu_);
  std::chrono::nanoseconds delay_ GUARDED_BY(mu_){0};
  std::map<std::string, Counters, std::less<>> counters_ GUARDED_BY(mu_);
  Counters total_ GUARDED_BY(mu_);
};

}  // namespace hoard
