// File: common/mountinfo.h
//
// Reading /proc/self/mountinfo: whether a path is a mount point, and the
// device number ("major:minor") of the mount there, which names the mount's
// knobs under /sys/class/bdi. Paths are compared after undoing mountinfo's
// escapes (\040 for a space...), and must be given resolved (mountinfo holds
// resolved paths).
//
// Thread-safety: pure functions (they read the file each call).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

// mountinfo writes a space, tab, newline and backslash in a path as \040,
// \011, \012 and \134; this undoes it.
std::string UnescapeMountPath(std::string_view s);

// "major:minor" of the topmost mount at `path`; kNotFound if nothing is
// mounted there.
Result<std::string> MountDevice(const std::string& path);

}  // namespace hoard
