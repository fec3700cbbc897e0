// File: origin/nfs_origin.h
//
// NfsOrigin reads an NFSv3 export: the Origin (origin/origin.h) for an
// nfs:// source. The URL is parsed by origin/nfs_url.h; connections,
// export discovery, timeouts and the retry after a broken connection are the
// pool's (origin/nfs_pool.h). This file is the read path on top: Walk, Stat,
// Open and the files' ReadAt and Restat.
//
// The root: Create checks that the origin root inside the export exists and
// is a directory (kNotFound, kInvalidArgument otherwise).
//
// Files: an NfsOrigin file does NOT hold a connection between ReadAt calls
// (see nfs_pool.h for why). Open leaves the file's handle cached on the
// connection it used, and ReadAt prefers a connection that already has it,
// so the common open-then-read-several-ranges pattern costs one LOOKUP
// chain, not one per ReadAt. A handle reopened on another connection is
// checked against the file id seen at Open: a file replaced since then
// gives kStale. Reads are split to the server's READ size.
//
// Error codes: an answer's errno goes through CodeFromErrno (common/status.h)
// and OriginReadError (origin_path.h): NFS3ERR_NOENT/NOTDIR -> kNotFound,
// NFS3ERR_STALE -> kStale, NFS3ERR_JUKEBOX -> kUnavailable, timeouts and
// transport errors -> kUnavailable, symlinks, directories or special files
// where a file is needed -> kInvalidArgument, everything else -> kIoError.
// Messages name the source URL and the path.
//
// Directory sizes are reported as 0, as by every origin.
//
// Symlinks: Walk reports them and Stat/Open never follow the last component.
// Unlike PosixOrigin, a symlink in an intermediate component of a path given
// to Stat/Open IS followed: libnfs resolves paths on the client and offers no
// way to refuse that short of one LSTAT per component. libnfs refuses links
// that leave the mounted export ("Symbolic link points outside export"), so
// such a path can reach at most the rest of the same export. Walk never
// produces these paths.
//
// Thread-safety: as Origin. Files share the pool (not the NfsOrigin object)
// and stay usable if the origin is destroyed first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "origin/nfs_pool.h"
#include "origin/origin.h"

namespace hoard {

class NfsOrigin : public Origin {
 public:
  // Connects, finds the export, mounts it (NfsConnectionPool::Open) and
  // checks the root (see above).
  static Result<std::unique_ptr<NfsOrigin>> Create(const std::string& source, const OriginOptions& options);
  // The same on a pool already open, which the origin then shares (the
  // checkpoint origin writes through it).
  static Result<std::unique_ptr<NfsOrigin>> Create(std::shared_ptr<NfsConnectionPool> pool);
  ~NfsOrigin() override;

  const std::string& source() const override { return pool_->source(); }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override;
  Result<OriginEntry> Stat(std::string_view path) override;
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override;

  // The export that was mounted, e.g. "/srv/data".
  const std::string& export_path() const { return pool_->export_path(); }
  // The origin root inside the export ("" when the URL names the export).
  const std::string& root_in_export() const { return pool_->root_in_export(); }
  // The largest READ the server accepts, in bytes; reads are split to it.
  uint64_t read_max() const { return pool_->read_max(); }

 private:
  explicit NfsOrigin(std::shared_ptr<NfsConnectionPool> pool);

  const std::shared_ptr<NfsConnectionPool> pool_;
};

}  // namespace hoard
