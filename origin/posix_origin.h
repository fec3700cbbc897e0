// File: origin/posix_origin.h
//
// A local directory as an origin: the source is its absolute path. This is the
// embedded default (no server needed) and what tests use for a real file
// system.
//
// Confinement: the root directory is opened once and every later lookup walks
// down from that descriptor one component at a time with openat/fstatat and
// O_NOFOLLOW, never by concatenating path strings. So a symlink inside the
// tree (even one that points at "/" or "..") is reported as a symlink and
// never followed, and a directory renamed or replaced during a walk cannot
// lead the walk outside the root. Special files (fifos, sockets, devices) are
// skipped by Walk and refused by Stat/Open without being opened, since
// opening one can block or have side effects.
//
// Directory sizes are reported as 0 (they mean nothing to hoard and change
// with every create).
//
// Thread-safety: as Origin. The root descriptor is shared read-only; each call
// and each PosixFile uses its own descriptors.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_util.h"
#include "origin/origin.h"

namespace hoard {

class PosixOrigin : public Origin {
 public:
  // Opens the directory `root` (an absolute path; a symlink to a directory is
  // fine). kNotFound if it does not exist, kInvalidArgument if it is not a
  // directory or not absolute.
  static Result<std::unique_ptr<PosixOrigin>> Create(const std::string& root);

  const std::string& source() const override { return source_; }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override;
  Result<OriginEntry> Stat(std::string_view path) override;
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override;

 private:
  PosixOrigin(std::string source, UniqueFd root_fd);

  // An O_PATH descriptor for the directory that holds the last of `parts`
  // (the root for a one-component path); every component before it must be a
  // real directory, not a symlink.
  Result<UniqueFd> OpenParent(const std::vector<std::string_view>& parts, std::string_view path) const;

  // Visits the entries of the directory open at `dir_fd` (whose origin path is
  // `dir_path`), then recurses into its subdirectories. Takes ownership of
  // dir_fd.
  Status WalkDir(UniqueFd dir_fd, const std::string& dir_path,
                 const std::function<Status(const OriginEntry&)>& visit);

  const std::string source_;
  const UniqueFd root_fd_;
};

}  // namespace hoard
