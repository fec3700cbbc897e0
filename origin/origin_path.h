// File: origin/origin_path.h
//
// Validation of the relative paths that Origin methods take (see origin.h):
// '/'-separated components without a leading or trailing '/', each one a safe
// name (IsSafeName), "" for the root. Every Origin implementation checks its
// input with SplitOriginPath before touching storage, so a path such as
// "../etc/passwd" or "a//b" is rejected the same way everywhere, and every
// read-only origin codes a failed lookup the same way (OriginReadError).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

// The components of `path`, or kInvalidArgument naming the offending part.
// The views point into `path`.
Result<std::vector<std::string_view>> SplitOriginPath(std::string_view path);

// "dir/name", or "name" when dir is the root "".
std::string JoinOriginPath(std::string_view dir, std::string_view name);

// An error of the origin's storage (its errno already coded by CodeFromErrno,
// common/status.h) as a read-only origin reports it, whether the storage is a
// local directory or an NFS export: a path through a file or a symlink
// (kNotDirectory) is simply no such path (kNotFound), and a directory where a
// file is needed (kIsDirectory) is a request that never succeeds
// (kInvalidArgument). The writable checkpoint origins keep both codes: the
// checkpoint namespace must answer POSIX's ENOTDIR and EISDIR. Other codes,
// and the message, pass through.
Status OriginReadError(Status s);

}  // namespace hoard
