// File: fuse/errno.h
//
// The one place where a hoard Status becomes an errno for the kernel.
#pragma once

#include "common/status.h"

namespace hoard::fuse {

// kNotFound -> ENOENT, kInvalidArgument -> EINVAL, kNoSpace -> ENOSPC,
// kAlreadyExists -> EEXIST, kStale -> EIO (the origin changed under a pinned
// version: the reader must not get mixed bytes), everything else -> EIO.
int ToErrno(const Status& status);

}  // namespace hoard::fuse
