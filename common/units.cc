#include "common/units.h"

#include <algorithm>

#include <cctype>
#include <cmath>
#include <cstdio>

namespace hoard {

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  size_t i = 0;
  uint64_t value = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
    uint64_t next = value * 10 + uint64_t(t[i] - '0');
    if (next / 10 != value) return Status::InvalidArgument("byte count too large: " + std::string(text));
    value = next;
    ++i;
  }
  if (i == 0) return Status::InvalidArgument("not a byte count: '" + std::string(text) + "'");
  std::string suffix;
  for (; i < t.size(); ++i) suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(t[i])));
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      case 'b': shift = 0; break;
      default: return Status::InvalidArgument("unknown unit in '" + std::string(text) + "'");
    }
    std::string rest = suffix.substr(1);
    if (suffix[0] == 'b' ? !rest.empty() : !(rest.empty() || rest == "i" || rest == "ib" || rest == "b")) {
      return Status::InvalidArgument("unknown unit in '" + std::string(text) + "'");
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return Status::InvalidArgument("byte count too large: " + std::string(text));
  }
  return value << shift;
}

Result<uint64_t> ParseDurationSeconds(std::string_view text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (value > UINT64_MAX / 10 - 9) return Status::InvalidArgument("duration too long: " + std::string(text));
    value = value * 10 + uint64_t(text[i++] - '0');
  }
  if (i == 0) return Status::InvalidArgument("not a duration: '" + std::string(text) + "' (e.g. 7d, 12h, 30m, 45s)");
  const std::string_view unit = text.substr(i);
  uint64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "m") scale = 60;
  else if (unit == "h") scale = 3600;
  else if (unit == "d") scale = 86400;
  else if (unit == "w") scale = 7 * 86400;
  else return Status::InvalidArgument("unknown unit in '" + std::string(text) + "' (s, m, h, d or w)");
  if (value > UINT64_MAX / scale) return Status::InvalidArgument("duration too long: " + std::string(text));
  return value * scale;
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else std::snprintf(buf, sizeof buf, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

std::vector<std::string> SplitCommaList(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view e = list.substr(start, comma - start);
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
    if (!e.empty() && std::find(out.begin(), out.end(), e) == out.end()) out.emplace_back(e);
    start = comma + 1;
  }
  return out;
}

}  // namespace hoard
