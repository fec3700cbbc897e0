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
  }
  return "Unknown";
}

Code CodeFromWire(uint32_t value) {
  if (value > static_cast<uint32_t>(Code::kPermissionDenied)) return Code::kInternal;
  return static_cast<Code>(value);
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return NoSpace(std::move(msg));
    case ENOENT:
      return NotFound(std::move(msg));
    case EINVAL:
    case ENAMETOOLONG:
      return InvalidArgument(std::move(msg));
    case EEXIST:
      return AlreadyExists(std::move(msg));
    case ENOTEMPTY:
      return NotEmpty(std::move(msg));
    case EISDIR:
      return IsDirectory(std::move(msg));
    case ENOTDIR:
      return NotDirectory(std::move(msg));
    case ETIMEDOUT:
    case ECONNREFUSED:
    case EHOSTUNREACH:
      return Unavailable(std::move(msg));
    default:
      return IoError(std::move(msg));
  }
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
