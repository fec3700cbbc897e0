// File: origin/nfs_origin.h
//
// NfsOrigin reads an NFSv3 export with libnfs's synchronous API (no kernel
// NFS client is needed, or available on our machines).
//
// Source URL: nfs://HOST[:PORT]/PATH[?mountport=M]
//   HOST  a name, an IPv4 address or a bracketed IPv6 address.
//   PORT  the server's NFS port. With it the NFS connection skips the
//         portmapper; the MOUNT protocol still asks the portmapper unless
//         `mountport` is given too. Without PORT both come from the
//         portmapper (port 111), as libnfs does by default.
//         (nfs-ganesha cannot serve MOUNT on the NFS port: with MNT_Port ==
//         NFS_Port it answers MOUNT calls with PROG_UNAVAIL, so a server
//         reached without a portmapper needs both ports; see
//         tests/lib/nfs_server.sh.)
//   PATH  absolute; taken literally (no %-decoding), repeated '/' collapse,
//         "." and ".." components are refused. The export is the longest
//         prefix of PATH the server lets us mount (the full path first, then
//         with trailing components stripped); the rest is the origin root
//         inside the export, which must be a directory.
//
// Connections: a libnfs context is not thread-safe, so the origin keeps a
// pool of up to OriginOptions::max_connections connected and mounted
// contexts. Each call leases one for its duration only; a caller that finds
// all of them leased waits for one. An NfsOrigin file does NOT hold a
// connection between ReadAt calls: holding one for a file's lifetime would let
// max_connections open files (or one thread holding two) starve or deadlock
// every other caller. Instead each connection caches the libnfs handles of
// the files recently opened on it (a handle belongs to the context that
// opened it), and ReadAt prefers a connection that already has its file's
// handle, so the common open-then-read-several-ranges pattern costs one
// LOOKUP chain, not one per ReadAt. A handle reopened on another connection
// is checked against the file id seen at Open: a file replaced since then
// gives kStale.
//
// Failures: every RPC is bounded by OriginOptions::timeout_ms
// (nfs_set_timeout); connecting and mounting, which libnfs does not bound
// (a TCP connect to a host that drops packets waits minutes), run through
// libnfs's async API under our own deadline. libnfs's own reconnect is off:
// a connection that breaks is dropped from the pool, the call is retried
// once on a fresh connection (an idle connection closed by the server fails
// that way), and if that fails too the caller gets kUnavailable. So a dead or
// frozen server yields kUnavailable within about timeout_ms per RPC, never a
// hang, and calls succeed again once it is back.
//
// Error codes: an answer's errno goes through CodeFromErrno (common/status.h)
// and, on the read path, OriginReadError (origin_path.h): NFS3ERR_NOENT/NOTDIR
// -> kNotFound, NFS3ERR_STALE -> kStale, NFS3ERR_JUKEBOX -> kUnavailable,
// timeouts and transport errors -> kUnavailable, symlinks, directories or
// special files where a file is needed -> kInvalidArgument, everything else
// -> kIoError. Messages name the source URL and the path.
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

#include "origin/origin.h"

struct nfs_context;

namespace hoard {

// The parts of an NFS origin URL.
struct NfsUrl {
  std::string host;     // without brackets for IPv6
  int port = 0;         // NFS port; 0 = ask the portmapper
  int mount_port = 0;   // MOUNT port; 0 = ask the portmapper
  std::string path;     // normalised: "/" or "/a/b", no trailing '/'

  // kInvalidArgument with the reason for anything malformed.
  static Result<NfsUrl> Parse(std::string_view url);

  // Where the export may be: `path` and each directory above it, longest
  // first ("/a/b", "/a", "/").
  std::vector<std::string> ExportCandidates() const;
  // What is left of `path` below the export `candidate` ("b" for "/a"; ""
  // for the path itself).
  std::string BelowExport(const std::string& candidate) const;
};

class NfsConnectionPool;

class NfsOrigin : public Origin {
 public:
  // Connects, finds the export, mounts it and checks the root (see above).
  static Result<std::unique_ptr<NfsOrigin>> Create(const std::string& source, const OriginOptions& options);
  ~NfsOrigin() override;

  const std::string& source() const override { return source_; }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override;
  Result<OriginEntry> Stat(std::string_view path) override;
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override;

  // The export that was mounted, e.g. "/srv/data".
  const std::string& export_path() const { return export_path_; }
  // The origin root inside the export ("" when the URL names the export).
  const std::string& root_in_export() const { return root_; }
  // The largest READ the server accepts, in bytes; reads are split to it.
  uint64_t read_max() const { return read_max_; }

  // For the writable checkpoint origin (origin/nfs_ckpt_origin.h), which
  // shares this origin's connections, timeouts and retry rule rather than
  // keeping a second pool. Runs `op` on a leased connection; `op` returns 0
  // (or any value >= 0) or a libnfs error (a negative errno). A timeout or a
  // broken transport gives kUnavailable, and after a broken transport (not a
  // timeout) `op` runs once more on a fresh connection, so `op` must be
  // idempotent or detect its second run itself. An error answer from the
  // server gives Status::FromErrno(-rc, "SOURCE: WHAT 'PATH': libnfs's
  // message"), so EEXIST, ENOTEMPTY, ENOTDIR, ENOSPC... keep their POSIX
  // meaning (NFS3ERR_STALE is kStale, NFS3ERR_JUKEBOX kUnavailable).
  // Handles opened by `op` belong to that connection: close them in `op`.
  Status RunCall(std::string_view what, std::string_view path, const std::function<int(nfs_context*)>& op);
  // The path libnfs wants (absolute inside the export) for an origin path.
  std::string NfsPath(std::string_view path) const;

 private:
  NfsOrigin(std::string source, std::string export_path, std::string root, uint64_t read_max,
            std::shared_ptr<NfsConnectionPool> pool);

  const std::string source_;
  const std::string export_path_;
  const std::string root_;
  const uint64_t read_max_;
  const std::shared_ptr<NfsConnectionPool> pool_;
};

}  // namespace hoard
