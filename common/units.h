// File: common/units.h
//
// Byte counts as people write and read them: "4M", "10GiB", "512k" in, and
// "1.5 GiB" out. Suffixes are binary (k = 1024). Durations: "7d", "12h".
// Lists of endpoints as options give them: "tcp://a:1, tcp://b:2".
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

// Accepts a number with an optional suffix k, m, g, t (any case, optionally
// followed by "i", "iB" or "B"). kInvalidArgument otherwise.
Result<uint64_t> ParseBytes(std::string_view text);

// "0 B", "999 B", "1.0 KiB", "12.3 MiB", "1.50 GiB".
std::string FormatBytes(double bytes);

// Seconds from a number with an optional unit s, m, h, d or w ("7d", "90m",
// "30"; no unit: seconds). kInvalidArgument otherwise.
Result<uint64_t> ParseDurationSeconds(std::string_view text);

// The items of a comma-separated list, blanks (spaces, tabs) around each
// trimmed, empty and repeated items dropped, in their first order.
std::vector<std::string> SplitCommaList(std::string_view list);

}  // namespace hoard
