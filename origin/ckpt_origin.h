// File: origin/ckpt_origin.h
//
// CkptOrigin is where checkpoints end up (level P): an NFS export written with
// libnfs (`nfs://host[:port]/export/path`) or a local directory (an absolute
// path, the embedded default). Node agents upload a file generation to a
// temporary name under the staging directory; the coordinator then renames it
// into place, and mirrors the namespace operations (mkdir, rename, unlink,
// rmdir) of files that are already there. So a reader of the origin never sees
// a partially written file: a path holds either nothing, an older complete
// generation, or the new complete one.
//
// Paths are relative to the origin's root, '/'-separated, checked with
// proto::IsSafeCkptPath (kInvalidArgument otherwise). kStagingDir, a hidden
// directory at the root, holds the uploads in flight; nothing else in hoard
// writes there.
//
// Errors: kNotFound, kAlreadyExists, kNotEmpty, kIsDirectory, kNotDirectory
// (as POSIX says), kNoSpace (the server is full: retried later, nothing lost:
// the copies on the nodes stay), kUnavailable (unreachable or timed out:
// retried), kIoError (anything else).
//
// Thread-safety: a CkptOrigin may be used from many threads at once; a
// CkptWriter by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "origin/origin.h"

namespace hoard {

inline constexpr std::string_view kCkptStagingDir = ".hoard-staging";

// A file being uploaded. Close() is the point of durability: it flushes and
// fsyncs; a writer destroyed without Close() leaves a partial file behind,
// which its caller removes (or the next upload of that name replaces).
class CkptWriter {
 public:
  virtual ~CkptWriter() = default;
  virtual Status WriteAt(uint64_t offset, const char* data, size_t len) = 0;
  virtual Status Close() = 0;  // fsync + close
};

class CkptOrigin {
 public:
  virtual ~CkptOrigin() = default;
  virtual const std::string& source() const = 0;

  // Creates (or truncates) `path` for writing; its parent must exist.
  virtual Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) = 0;
  // Creates every missing directory of `path` (itself included), mode 0755.
  virtual Status MakeDirs(std::string_view path) = 0;
  // Atomically replaces `to` (a file, or an empty directory by a directory)
  // with `from`, as rename(2).
  virtual Status Rename(std::string_view from, std::string_view to) = 0;
  virtual Status Unlink(std::string_view path) = 0;
  virtual Status Rmdir(std::string_view path) = 0;
  // Creates a symlink at `path` to `target` (any text, not checked as a
  // path: it is the user's); its parent must exist. kAlreadyExists when
  // `path` exists.
  virtual Status Symlink(std::string_view target, std::string_view path) = 0;
  // Attributes (symlinks not followed); kNotFound when absent.
  virtual Result<OriginEntry> Stat(std::string_view path) = 0;
  // For reads of checkpoints that are only on the origin.
  virtual Result<std::unique_ptr<OriginFile>> Open(std::string_view path) = 0;
  // Free bytes on the origin's file system (statvfs / FSSTAT).
  virtual Result<uint64_t> FreeBytes() = 0;
};

// Opens `source` ("nfs://..." or an absolute local directory, created if
// missing) and creates its staging directory. Implementations:
// origin/posix_ckpt_origin.h, nfs_ckpt_origin.h, mem_ckpt_origin.h (tests).
Result<std::unique_ptr<CkptOrigin>> OpenCkptOrigin(const std::string& source, const OriginOptions& options = {});

// OK if `path` may be given to a CkptOrigin (proto::IsSafeCkptPath; "" names
// the root, accepted only when `root_ok`); else kInvalidArgument naming
// `source` and the path. Every implementation checks its paths with it.
Status CheckCkptPath(std::string_view source, std::string_view path, bool root_ok);

}  // namespace hoard
