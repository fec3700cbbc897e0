// File: fuse/errno.h
//
// The one place where a hoard Status becomes an errno for the kernel. The
// table itself is ErrnoFromCode (common/status.h), next to the errno -> Code
// table it must agree with, so that common/status_test.cc pins both.
#pragma once

#include "common/status.h"

namespace hoard::fuse {

// The errno for status.code(), as ErrnoFromCode gives it (0 for OK).
int ToErrno(const Status& status);

}  // namespace hoard::fuse
