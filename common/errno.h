// File: common/errno.h
//
// The one place where a hoard Status becomes an errno for the kernel: both
// trees of the mount (the datasets' and the checkpoints') reply with it. The
// table itself is ErrnoFromCode (common/status.h), next to the errno -> Code
// table it must agree with, so that common/status_test.cc pins both.
//
// Thread-safety: a pure function.
#pragma once

#include "common/status.h"

namespace hoard {

// The errno for status.code(), as ErrnoFromCode gives it (0 for OK).
int ToErrno(const Status& status);

}  // namespace hoard
