#include "cli/mounts.h"

#include "cli/process.h"
#include "common/file_util.h"

namespace hoard::cli {

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

bool Mounted(const std::string& path) {
  Result<std::string> info = ReadFile("/proc/self/mountinfo");
  if (!info.ok()) return false;
  std::string_view rest(*info);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    // Fields are separated by single spaces (spaces inside are escaped); the
    // mount point is the fifth.
    size_t start = 0;
    for (int field = 0; field < 4 && start != std::string_view::npos; ++field) {
      start = line.find(' ', start);
      if (start != std::string_view::npos) ++start;
    }
    if (start == std::string_view::npos) continue;
    if (UnescapeMountPath(line.substr(start, line.find(' ', start) - start)) == path) return true;
  }
  return false;
}

Status Unmount(const std::string& path) {
  if (!Mounted(path)) return Status::Ok();
  if (RunQuiet({"fusermount3", "-u", path}).ok() && !Mounted(path)) return Status::Ok();
  (void)RunQuiet({"fusermount3", "-u", "-z", path});
  if (Mounted(path)) return Status::IoError("cannot unmount " + path + "; is a process using it?");
  return Status::Ok();
}

}  // namespace hoard::cli
