#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace hoard {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kUnavailable: return "Unavailable";
    case Code::kNoSpace: return "NoSpace";
    case Code::kCorruption: return "Corruption";
    case Code::kIoError: return "IoError";
    case Code::kStale: return "Stale";
    case Code::kInternal: return "Internal";
    case Code::kNotEmpty: return "NotEmpty";
    case Code::kIsDirectory: return "IsDirectory";
    case Code::kNotDirectory: return "NotDirectory";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kNotLeader: return "NotLeader";
  }
  return "Unknown";
}

Code CodeFromWire(uint32_t value) {
  if (value > static_cast<uint32_t>(Code::kNotLeader)) return Code::kInternal;
  return static_cast<Code>(value);
}

Code CodeFromErrno(int err) {
  // The one errno -> Code table (see status.h for why each row). A switch, so
  // that an errno listed twice (EAGAIN and EWOULDBLOCK are one value) does
  // not compile.
  switch (err) {
    case ENOENT:
      return Code::kNotFound;
    case EINVAL:
    case ENAMETOOLONG:
      return Code::kInvalidArgument;
    case EEXIST:
      return Code::kAlreadyExists;
    case ENOSPC:
    case EDQUOT:
      return Code::kNoSpace;
    case ENOTEMPTY:
      return Code::kNotEmpty;
    case EISDIR:
      return Code::kIsDirectory;
    case ENOTDIR:
    case ELOOP:
      return Code::kNotDirectory;
    case ESTALE:
      return Code::kStale;
    case ETIMEDOUT:
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case EAGAIN:
      return Code::kUnavailable;
    default:
      return Code::kIoError;
  }
}

int ErrnoFromCode(Code code) {
  // No default: a new Code must choose its errno here (-Wswitch).
  switch (code) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kAlreadyExists: return EEXIST;
    case Code::kNoSpace: return ENOSPC;
    case Code::kNotEmpty: return ENOTEMPTY;
    case Code::kIsDirectory: return EISDIR;
    case Code::kNotDirectory: return ENOTDIR;
    case Code::kPermissionDenied: return EACCES;
    case Code::kUnavailable:
    case Code::kNotLeader:  // as kUnavailable: no leader within the client's wait (status.h)
    case Code::kCorruption:
    case Code::kIoError:
    case Code::kStale:
    case Code::kInternal:
      return EIO;
  }
  return EIO;  // not a Code: a wire value CodeFromWire did not vet
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  return Status(CodeFromErrno(err), std::move(msg));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

}  // namespace hoard
