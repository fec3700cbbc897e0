#include "fuse/errno.h"

namespace hoard::fuse {

int ToErrno(const Status& status) { return ErrnoFromCode(status.code()); }

}  // namespace hoard::fuse
