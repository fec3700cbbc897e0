#include "fuse/errno.h"

#include <cerrno>

namespace hoard::fuse {

int ToErrno(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kNoSpace: return ENOSPC;
    case Code::kAlreadyExists: return EEXIST;
    case Code::kNotEmpty: return ENOTEMPTY;
    case Code::kIsDirectory: return EISDIR;
    case Code::kNotDirectory: return ENOTDIR;
    case Code::kPermissionDenied: return EACCES;
    case Code::kUnavailable:
    case Code::kCorruption:
    case Code::kIoError:
    case Code::kStale:
    case Code::kInternal:
      return EIO;
  }
  return EIO;
}

}  // namespace hoard::fuse
