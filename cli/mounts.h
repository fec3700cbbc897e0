// File: cli/mounts.h
//
// Finding and removing the FUSE mount of a local cluster. Paths are compared
// resolved and with /proc/self/mountinfo's escapes (\040 for a space...)
// decoded, so a cluster directory reached through a symlink or holding
// spaces is still recognised.
//
// Thread-safety: single-threaded CLI code.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard::cli {

// True if something is mounted at `path`, which must be resolved (mountinfo
// holds resolved paths).
bool Mounted(const std::string& path);

// Unmounts `path` if anything is mounted there: politely, then lazily (a
// reader still holding a file keeps a lazy unmount from blocking).
Status Unmount(const std::string& path);

}  // namespace hoard::cli
