#include "common/disk_stats.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <sstream>

#include "common/file_util.h"

namespace hoard {

Result<DiskStats> DiskStats::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  const std::string stat_path = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                                std::to_string(minor(st.st_dev)) + "/stat";
  DiskStats d(stat_path);
  HOARD_RETURN_IF_ERROR(d.BytesRead().status());
  return d;
}

Result<uint64_t> DiskStats::BytesRead() const {
  Result<std::string> text = ReadFile(stat_path_);
  if (!text.ok()) return text.status();
  // reads, reads merged, sectors read, ... (Documentation/block/stat.rst)
  std::istringstream in(*text);
  uint64_t reads = 0, merged = 0, sectors = 0;
  if (!(in >> reads >> merged >> sectors)) return Status::InvalidArgument(stat_path_ + ": unexpected format");
  return sectors * 512;
}

}  // namespace hoard
