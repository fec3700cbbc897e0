// File: origin/nfs_ckpt_origin.h
//
// An NFSv3 export as the checkpoint origin, written with
// libnfs's synchronous API. The URL (origin/nfs_url.h), the export
// discovery, the connection pool (OriginOptions::max_connections), the
// per-RPC timeout (OriginOptions::timeout_ms -> kUnavailable, never a hang)
// and the retry of a call once after a broken connection are those of the
// read origin: this origin runs every write through
// NfsConnectionPool::RunCall (origin/nfs_pool.h), and serves Stat and Open
// with an NfsOrigin (origin/nfs_origin.h) on the same pool.
//
// Writers hold no connection between calls (for the same reason read files
// do not: a caller holding writers could starve everyone else of the pool).
// Each WriteAt opens the file on a leased connection (a LOOKUP chain, no
// truncation), writes in pieces of at most the server's wsize and closes the
// handle; Close() opens it once more and sends COMMIT (nfs_fsync).
//
// Writes are FILE_SYNC (O_SYNC), not UNSTABLE: NFSv3 lets a server that
// reboots lose UNSTABLE data it acknowledged, and the client can tell only
// by the write verifier, which libnfs does not expose. Since the pool also
// reconnects silently (a retried call), a server restart in the middle of an
// upload would go unseen and a file with holes could be renamed into place.
// With FILE_SYNC every acknowledged WRITE is on the server's stable storage;
// the price is a server-side sync per WRITE (at most wsize bytes).

// Retries: a call retried on a fresh connection after a broken one may
// find its own first attempt already done. MakeDirs tolerates EEXIST
// anyway; Unlink/Rmdir that find the path gone on a retry, and a Rename that
// on a retry finds `from` gone and `to` present, count as done.
//
// What nfs-ganesha 5 (VFS FSAL, as Debian 12 ships it) does, checked by
// origin/ckpt_origin_test.cc: RENAME over an existing file replaces it
// atomically, over an empty directory too, and over a non-empty directory it
// answers NFS3ERR_NOTEMPTY (kNotEmpty): POSIX's semantics, so no
// remove-before-rename is needed (which would open a window where the path
// holds nothing). A file onto a directory is NFS3ERR_ISDIR (kIsDirectory), a
// directory onto a file NFS3ERR_NOTDIR (kNotDirectory). On a read-only
// export MKDIR of an existing directory answers NFS3ERR_ROFS, not EXIST, so
// OpenCkptOrigin fails at once (kIoError) rather than at the first upload.
// Whether a COMMIT reached the server's disk cannot be observed by a test;
// we rely on the server honouring it.
//
// Error codes: the server's answer maps as errno does, through the one table
// of common/status.cc (CodeFromErrno: NOENT -> kNotFound, NOTDIR ->
// kNotDirectory, STALE -> kStale, JUKEBOX -> kUnavailable, ...); timeouts and
// transport errors give kUnavailable.
//
// Thread-safety: as CkptOrigin.
#pragma once

#include <memory>
#include <string>

#include "origin/ckpt_origin.h"

namespace hoard {

// Connects and mounts as NfsConnectionPool::Open (origin/nfs_pool.h); the
// root must exist and be a directory, as for NfsOrigin::Create. OpenCkptOrigin calls it for an nfs:// source.
Result<std::unique_ptr<CkptOrigin>> OpenNfsCkptOrigin(const std::string& source, const OriginOptions& options);

}  // namespace hoard
