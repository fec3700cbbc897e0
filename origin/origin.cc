#include "origin/origin.h"

#include "origin/nfs_origin.h"
#include "origin/posix_origin.h"

namespace hoard {

Result<size_t> Origin::Read(std::string_view path, uint64_t offset, size_t len, char* buf) {
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<OriginFile> file, Open(path));
  return file->ReadAt(offset, len, buf);
}

Result<std::unique_ptr<Origin>> OpenOrigin(const std::string& source, const OriginOptions& options) {
  if (source.starts_with("nfs://")) {
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<NfsOrigin> origin, NfsOrigin::Create(source, options));
    return std::unique_ptr<Origin>(std::move(origin));
  }
  if (source.starts_with("/")) {
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<PosixOrigin> origin, PosixOrigin::Create(source));
    return std::unique_ptr<Origin>(std::move(origin));
  }
  return Status::InvalidArgument("origin source must be 'nfs://host[:port]/export/path' or an absolute directory path, got '" +
                                 source + "'");
}

bool IsSafeName(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  if (name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

}  // namespace hoard
