#include "origin/ckpt_origin.h"

#include "origin/nfs_ckpt_origin.h"
#include "origin/posix_ckpt_origin.h"
#include "common/file_util.h"
#include "proto/messages.h"  // proto/ckpt_messages.h: IsSafeCkptPath

namespace hoard {

Status CheckCkptPath(std::string_view source, std::string_view path, bool root_ok) {
  if ((path.empty() && !root_ok) || !proto::IsSafeCkptPath(path)) {
    std::string shown(path);
    for (char& c : shown) {
      if (c == '\0') c = '?';  // a NUL would cut the message short
    }
    return Status::InvalidArgument(std::string(source) + ": bad checkpoint path '" + shown + "'");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CkptOrigin>> OpenCkptOrigin(const std::string& source, const OriginOptions& options) {
  std::unique_ptr<CkptOrigin> origin;
  if (source.starts_with("nfs://")) {
    HOARD_ASSIGN_OR_RETURN(origin, OpenNfsCkptOrigin(source, options));
  } else if (source.starts_with("/")) {
    HOARD_RETURN_IF_ERROR(hoard::MakeDirs(source));
    HOARD_ASSIGN_OR_RETURN(origin, OpenPosixCkptOrigin(source));
  } else {
    return Status::InvalidArgument("checkpoint origin '" + source +
                                   "': want nfs://host[:port]/export/path or an absolute directory");
  }
  HOARD_RETURN_IF_ERROR(origin->MakeDirs(kCkptStagingDir));
  return origin;
}

}  // namespace hoard
