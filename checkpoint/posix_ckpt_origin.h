// File: checkpoint/posix_ckpt_origin.h
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
// Thread-safety: as CkptOrigin. The root descriptor is shared read-only;
// each call uses its own descriptors.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/ckpt_origin.h"

namespace hoard {

// Opens the existing directory `root` (absolute). OpenCkptOrigin calls it for
// a local source, after creating the directory.
Result<std::unique_ptr<CkptOrigin>> OpenPosixCkptOrigin(const std::string& root);

}  // namespace hoard
