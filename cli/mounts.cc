#include "cli/mounts.h"

#include "cli/process.h"
#include "common/file_util.h"
#include "common/mountinfo.h"

namespace hoard::cli {

bool Mounted(const std::string& path) { return MountDevice(path).ok(); }

Status Unmount(const std::string& path) {
  if (!Mounted(path)) return Status::Ok();
  if (RunQuiet({"fusermount3", "-u", path}).ok() && !Mounted(path)) return Status::Ok();
  (void)RunQuiet({"fusermount3", "-u", "-z", path});
  if (Mounted(path)) return Status::IoError("cannot unmount " + path + "; is a process using it?");
  return Status::Ok();
}

}  // namespace hoard::cli
