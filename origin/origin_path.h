// File: origin/origin_path.h
//
// Validation of the relative paths that Origin methods take (see origin.h):
// '/'-separated components without a leading or trailing '/', each one a safe
// name (IsSafeName), "" for the root. Every Origin implementation checks its
// input with SplitOriginPath before touching storage, so a path such as
// "../etc/passwd" or "a//b" is rejected the same way everywhere.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

// The components of `path`, or kInvalidArgument naming the offending part.
// The views point into `path`.
Result<std::vector<std::string_view>> SplitOriginPath(std::string_view path);

// "dir/name", or "name" when dir is the root "".
std::string JoinOriginPath(std::string_view dir, std::string_view name);

}  // namespace hoard
