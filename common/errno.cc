#include "common/errno.h"

namespace hoard {

int ToErrno(const Status& status) { return ErrnoFromCode(status.code()); }

}  // namespace hoard
