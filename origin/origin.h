// File: origin/origin.h
//
// The origin is the central storage a dataset comes from: an NFS export read
// with libnfs (`nfs://host[:port]/export/path`) or a local directory (an
// absolute path; the embedded default that needs no server). hoard only reads
// the origin: it walks it once when a dataset is added, and reads byte ranges
// of files when it fills chunks.
//
// Paths given to and returned by an Origin are relative to the origin's root,
// '/'-separated, without a leading '/', and never contain "." or ".."
// components; "" is the root itself. A name the origin holds that cannot be
// represented safely (contains '/' or NUL, or is "." / "..") is skipped by
// Walk with a warning, never passed on.
//
// Errors: kNotFound (no such path), kUnavailable (server unreachable or timed
// out: retry later), kStale (the file changed since it was opened),
// kInvalidArgument (bad URL, or not a file where a file is needed), kIoError
// (anything else). Implementations code an errno with Status::FromErrno and
// then OriginReadError (origin_path.h).
//
// Thread-safety: an Origin may be used from many threads at once; an
// OriginFile by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

enum class EntryType : uint8_t { kFile = 0, kDir = 1, kSymlink = 2 };

struct OriginEntry {
  std::string path;  // relative to the origin root; "" for the root
  EntryType type = EntryType::kFile;
  uint32_t mode = 0;  // permission bits and file type bits, as st_mode
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;     // bytes for files, target length for symlinks
  int64_t mtime_ns = 0;  // nanoseconds since the epoch
  std::string symlink_target;  // only for kSymlink
};

// An open origin file, for reading several ranges without re-resolving the path.
class OriginFile {
 public:
  virtual ~OriginFile() = default;
  // Reads up to `len` bytes at `offset`; fewer only at end of file.
  virtual Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) = 0;
  // The file's attributes as of the open.
  virtual const OriginEntry& attributes() const = 0;
  // The file's attributes now (one GETATTR on the open handle for NFS), so a
  // caller can check that the bytes it read belong to the version it opened.
  virtual Result<OriginEntry> Restat() = 0;
};

struct OriginOptions {
  // Per-call timeout for network origins; a call that exceeds it fails with
  // kUnavailable.
  int timeout_ms = 10'000;
  // Maximum concurrent connections to an NFS server from this process.
  int max_connections = 4;
};

class Origin {
 public:
  virtual ~Origin() = default;

  // The source string the origin was opened from.
  virtual const std::string& source() const = 0;

  // Calls `visit` once for every entry below the root (not the root itself), in
  // no particular order. Stops at and returns the first error `visit` returns.
  // Entries that are neither files, directories nor symlinks are skipped.
  virtual Status Walk(const std::function<Status(const OriginEntry&)>& visit) = 0;

  // Attributes of one path ("" for the root). Symlinks are not followed.
  virtual Result<OriginEntry> Stat(std::string_view path) = 0;

  virtual Result<std::unique_ptr<OriginFile>> Open(std::string_view path) = 0;

  // Open + ReadAt, for one-off reads.
  Result<size_t> Read(std::string_view path, uint64_t offset, size_t len, char* buf);
};

// Opens `source`: "nfs://host[:port]/export/path" or an absolute local directory.
// For NFS this connects and mounts (the export is the longest prefix of the path
// the server accepts); kUnavailable if the server does not answer, kNotFound if
// the path does not exist, kInvalidArgument for a malformed source.
Result<std::unique_ptr<Origin>> OpenOrigin(const std::string& source, const OriginOptions& options = {});

// True if `name` may be used as one path component (not empty, not "." or "..",
// no '/' or NUL, at most 255 bytes).
bool IsSafeName(std::string_view name);

}  // namespace hoard
