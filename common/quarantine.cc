#include "common/quarantine.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/file_util.h"

namespace hoard {

Status QuarantineDir::Move(const std::string& path, std::string_view kind) const {
  HOARD_RETURN_IF_ERROR(MakeDirs(dir_));
  const std::string base = std::filesystem::path(path).filename().string();
  const std::string to = JoinPath(dir_, std::to_string(std::time(nullptr)) + "-" + std::string(kind) + "-" + base);
  if (::rename(path.c_str(), to.c_str()) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::FromErrno(errno, "quarantine " + path);
  }
  Trim();
  return Status::Ok();
}

void QuarantineDir::Trim() const {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) names.push_back(e.path().filename().string());
  if (ec || names.size() <= kKeep) return;
  // Names start with the time: the oldest sort first (equal times: any order).
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    const long long ta = std::atoll(a.c_str()), tb = std::atoll(b.c_str());
    return ta != tb ? ta < tb : a < b;
  });
  for (size_t i = 0; i + kKeep < names.size(); ++i) std::filesystem::remove(JoinPath(dir_, names[i]), ec);
}

}  // namespace hoard
