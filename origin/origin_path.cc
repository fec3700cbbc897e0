#include "origin/origin_path.h"

#include "origin/origin.h"

namespace hoard {

Result<std::vector<std::string_view>> SplitOriginPath(std::string_view path) {
  std::vector<std::string_view> parts;
  if (path.empty()) return parts;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!IsSafeName(part)) {
      std::string why = part.empty() ? "empty component (leading, trailing or double '/')"
                                     : "unsafe component '" + std::string(part) + "'";
      return Status::InvalidArgument("bad origin path '" + std::string(path) + "': " + why);
    }
    parts.push_back(part);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

Status OriginReadError(Status s) {
  switch (s.code()) {
    case Code::kNotDirectory: return Status::NotFound(s.message());
    case Code::kIsDirectory: return Status::InvalidArgument(s.message());
    default: return s;
  }
}

std::string JoinOriginPath(std::string_view dir, std::string_view name) {
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out.append(dir);
  if (!dir.empty()) out.push_back('/');
  out.append(name);
  return out;
}

}  // namespace hoard
