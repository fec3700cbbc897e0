#include "common/mountinfo.h"

#include "common/file_util.h"

namespace hoard {

std::string UnescapeMountPath(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out += static_cast<char>(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

Result<std::string> MountDevice(const std::string& path) {
  Result<std::string> info = ReadFile("/proc/self/mountinfo");
  if (!info.ok()) return info.status();
  std::string found;
  std::string_view rest(*info);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    // Fields are separated by single spaces (spaces inside are escaped):
    // id, parent id, major:minor, root, mount point, ...
    size_t starts[5] = {0};
    bool complete = true;
    for (int field = 1; field < 5; ++field) {
      const size_t sp = line.find(' ', starts[field - 1]);
      if (sp == std::string_view::npos) {
        complete = false;
        break;
      }
      starts[field] = sp + 1;
    }
    if (!complete) continue;
    const std::string_view mount_point = line.substr(starts[4], line.find(' ', starts[4]) - starts[4]);
    // Later lines are mounted on top of earlier ones: the last match wins.
    if (UnescapeMountPath(mount_point) == path) found = line.substr(starts[2], starts[3] - 1 - starts[2]);
  }
  if (found.empty()) return Status::NotFound("nothing is mounted at " + path);
  return found;
}

}  // namespace hoard
