// File: common/build_info.h
//
// What this binary was built from: the project's version (CMake's project()
// VERSION) and the git commit of the source tree at build time, and whether
// that tree had uncommitted changes. Every program prints it for --version
// (`hoard-node 0.1.0 (commit 1a2b3c4d5e6f)`); every daemon exports it as the
// gauge hoard_build_info{version,commit} (common/metrics_server.h); node
// agents and mounts report it to the coordinator, so `hoard status` shows a
// rolling upgrade while it happens.
//
// The values come from build_info_data.cc, which the build generates in the
// build tree (common/build_info.cmake): it runs git at every build and
// rewrites the file only when the commit or the dirty flag changed, so a new
// commit recompiles that one file, not the programs. A tree that is not a git
// checkout of its own (a source tarball, even one unpacked inside another
// repository) says commit "unknown".
//
// Thread-safety: constants, read from any thread.
#pragma once

#include <string>
#include <string_view>

namespace hoard {

struct BuildInfo {
  std::string_view version;  // "0.1.0"
  std::string_view commit;   // 12 hex digits, or "unknown"
  bool dirty = false;        // built from a tree with uncommitted changes

  // The commit as the build is named on the wire, in metrics and in `hoard
  // status`: `commit`, with "-dirty" appended when dirty (as `git describe
  // --dirty`), since two dirty builds of one commit may differ.
  std::string CommitLabel() const;
};

// This binary's build.
const BuildInfo& ThisBuild();

// What --version prints (without the newline): "NAME VERSION (commit SHA)",
// or "NAME VERSION (commit SHA, dirty)".
std::string VersionLine(std::string_view program, const BuildInfo& build = ThisBuild());

// The last component of argv[0]: the name a program was run by.
std::string ProgramName(const char* argv0);

}  // namespace hoard
