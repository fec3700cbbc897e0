#include "common/build_info.h"

namespace hoard {

// Defined in build_info_data.cc, which common/build_info.cmake writes into
// the build tree.
namespace build_info_data {
extern const char kVersion[];
extern const char kCommit[];
extern const bool kDirty;
}  // namespace build_info_data

std::string BuildInfo::CommitLabel() const {
  std::string label(commit);
  if (dirty) label += "-dirty";
  return label;
}

const BuildInfo& ThisBuild() {
  static const BuildInfo build{build_info_data::kVersion, build_info_data::kCommit, build_info_data::kDirty};
  return build;
}

std::string VersionLine(std::string_view program, const BuildInfo& build) {
  std::string line(program);
  line += " ";
  line += build.version;
  line += " (commit ";
  line += build.commit;
  if (build.dirty) line += ", dirty";
  line += ")";
  return line;
}

std::string ProgramName(const char* argv0) {
  std::string_view path = argv0 == nullptr ? "" : argv0;
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace hoard
