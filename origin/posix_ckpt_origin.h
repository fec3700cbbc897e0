// File: origin/posix_ckpt_origin.h
//
// A local directory as the checkpoint origin (the embedded
// default; also any file system the host mounts, kernel NFS included).
//
// Confinement: the root is opened once; every path is checked with
// proto::IsSafeCkptPath and then resolved from the root descriptor one
// component at a time with openat(O_NOFOLLOW), never by joining strings, so
// neither ".." nor a symlink planted in the tree can make an operation act
// outside the root. A symlink in an intermediate component is refused
// (kNotDirectory, as ELOOP/ENOTDIR from O_NOFOLLOW|O_DIRECTORY).
//
// Durability: Close() fsyncs the file and then its directory (so the name
// exists on disk before anyone renames it); Rename fsyncs both parent
// directories after rename(2); MakeDirs fsyncs each directory it creates
// together with its parent. A crash therefore never loses an operation that
// returned OK.
//
// Reads (Stat, Open) go through a PosixOrigin on the same root.
//
// Mounted anew: every call first stats the root's path (one stat(2)); when
// it names another directory than the one opened (a file system mounted over
// the path, or unmounted from it, under the running daemon), the origin
// opens the new one, creates its staging directory there (as OpenCkptOrigin
// does) and works in it from then on. Without this, a process that opened
// the origin before the mount kept writing to the covered directory and one
// that opened it after wrote to the new file system: a node's uploads were
// never where the coordinator looked for them, and the node uploaded the
// same file again and again (issue 28). A path that names nothing, or no
// directory, for a moment leaves the directory opened in use.
//
// Thread-safety: as CkptOrigin. The root is swapped under a mutex; a call
// keeps the root it started with; each call uses its own descriptors.
#pragma once

#include <memory>
#include <string>

#include "origin/ckpt_origin.h"

namespace hoard {

// Opens the existing directory `root` (absolute). OpenCkptOrigin calls it for
// a local source, after creating the directory.
Result<std::unique_ptr<CkptOrigin>> OpenPosixCkptOrigin(const std::string& root);

}  // namespace hoard
