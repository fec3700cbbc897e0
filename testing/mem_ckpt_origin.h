// File: testing/mem_ckpt_origin.h
//
// MemCkptOrigin: a checkpoint origin held in memory, for the tests of the
// layers above it (drainer, publisher). It has POSIX's semantics, as
// the local and the NFS origins do (origin/ckpt_origin_test.cc runs
// one suite against all three): parents must exist (kNotFound), a path
// through a file is kNotDirectory, Rename replaces a file, or an empty
// directory by a directory, atomically, and refuses a non-empty one
// (kNotEmpty), a file over a directory (kIsDirectory) and a directory into
// itself (kInvalidArgument).
//
// Durability model. A file is *complete* once a writer of it has closed
// successfully and no writer has created (truncated) it since. WriteAt
// changes the bytes at once (Stat and Open see them, as on a local disk),
// but only complete files appear in Files(). A writer destroyed without
// Close(), like a process that crashed before its fsync, leaves its file
// *partial*: visible under its name with the bytes written so far, listed by
// PartialFiles(), and counted in counters().partial_renames if it is renamed.
// So a test can check that nobody publishes a partial file: after the code
// under test runs, no partial file lies outside kCkptStagingDir and
// counters().partial_renames is 0.
//
//   MemCkptOrigin origin;
//   origin.SetCapacity(1 << 20);                                  // then kNoSpace
//   origin.FailNext(CkptOp::kRename, Status::Unavailable("down"));  // once
//   ... code under test ...
//   EXPECT_EQ(origin.Files().at("job/ckpt-1/model.pt"), bytes);
//   EXPECT_EQ(origin.counters().renames, 3u);
//
// Faults: FailNext(op, status, times) makes the next `times` calls of `op`
// (CkptOp::kAny: of any operation) fail with `status` before doing anything;
// a later FailNext for the same op replaces it. Capacity: the sum of all
// file sizes may not exceed it; a write that would is refused whole with
// kNoSpace. SetDelay(d) makes every call sleep d first, outside the lock.
// FaultsLeft(op) says how many calls the fault armed for `op` has still to
// fail (0 once it is used up), so a test can check the code under test met
// them all.
//
// Namespace log: NamespaceLog() lists the successful namespace operations in
// the order they happened, one string each: "mkdirs <path>", "rename <from>
// <to>", "unlink <path>", "rmdir <path>", for tests of the order in which the
// code under test changes the origin's namespace.
//
// Open files are snapshots of the bytes at Open.
//
// Thread-safety: every method may be called from any thread. Writers must not
// outlive their origin.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "origin/ckpt_origin.h"

namespace hoard {

enum class CkptOp {
  kAny, kCreate, kWrite, kClose, kMakeDirs, kRename, kUnlink, kRmdir, kStat, kOpen, kFreeBytes, kSymlink
};

class MemCkptOrigin : public CkptOrigin {
 public:
  explicit MemCkptOrigin(std::string source = "mem://ckpt");
  ~MemCkptOrigin() override;

  // --- CkptOrigin.
  const std::string& source() const override { return source_; }
  Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) override;
  Status MakeDirs(std::string_view path) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status Unlink(std::string_view path) override;
  Status Rmdir(std::string_view path) override;
  Status Symlink(std::string_view target, std::string_view path) override;
  Result<OriginEntry> Stat(std::string_view path) override;
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override;
  Result<uint64_t> FreeBytes() override;

  // --- Faults, capacity, latency.
  void FailNext(CkptOp op, Status status, int times = 1);
  void ClearFaults();
  int FaultsLeft(CkptOp op) const;  // calls of `op` still to fail (the fault armed for `op` itself)
  void SetCapacity(uint64_t bytes);  // default 1 TiB
  void SetDelay(std::chrono::nanoseconds delay);

  // --- Inspection.
  std::map<std::string, std::string> Files() const;  // complete files: path -> bytes
  std::map<std::string, std::string> Symlinks() const;  // path -> target
  std::set<std::string> PartialFiles() const;        // files not complete (being written, or abandoned)
  bool Exists(std::string_view path) const;          // a file or directory
  std::vector<std::string> NamespaceLog() const;     // successful namespace operations, in order (see above)
  struct Counters {
    uint64_t creates = 0;          // successful Create calls
    uint64_t renames = 0;          // successful renames
    uint64_t partial_renames = 0;  // ... of a partial file, or of a directory holding one
    uint64_t used_bytes = 0;       // sum of all file sizes
    uint64_t max_concurrent_calls = 0;  // the most calls sleeping their delay at once (SetDelay)
  };
  Counters counters() const;

  // Another handle on this origin, which forwards every call here (and must
  // not outlive it): what an opener hands out for a second connection.
  std::unique_ptr<CkptOrigin> Connection();

 private:
  struct Node;
  class Writer;
  friend class Writer;

  // Sleeps, then takes the fault for `op` if one is armed. Locks mu_.
  Status Enter(CkptOp op) EXCLUDES(mu_);
  // The node at `parts`, or kNotFound/kNotDirectory.
  Result<std::shared_ptr<Node>> FindLocked(std::string_view path) const REQUIRES(mu_);
  // The directory that holds the last component of `path`, and that name.
  Result<std::pair<std::shared_ptr<Node>, std::string>> ParentLocked(std::string_view path) const REQUIRES(mu_);
  // Unlink (op kUnlink) or Rmdir (kRmdir).
  Status Remove(CkptOp op, std::string_view path);
  Status WriteLocked(Node& file, uint64_t offset, const char* data, size_t len) REQUIRES(mu_);
  // True if `node` is a partial file or a directory that holds one.
  static bool HoldsPartial(const Node& node);
  // Calls visit(path, node) for every node below `dir` (path prefixed by `prefix`).
  static void ForEach(const Node& dir, const std::string& prefix,
                      const std::function<void(const std::string&, const Node&)>& visit);

  const std::string source_;
  mutable Mutex mu_;
  std::shared_ptr<Node> root_ GUARDED_BY(mu_);
  std::map<CkptOp, std::pair<Status, int>> faults_ GUARDED_BY(mu_);  // status, calls left
  uint64_t capacity_ GUARDED_BY(mu_) = uint64_t{1} << 40;
  std::chrono::nanoseconds delay_ GUARDED_BY(mu_){0};
  uint64_t in_delay_ GUARDED_BY(mu_) = 0;  // calls sleeping now
  Counters counters_ GUARDED_BY(mu_);
  std::vector<std::string> log_ GUARDED_BY(mu_);  // NamespaceLog()
};

}  // namespace hoard
