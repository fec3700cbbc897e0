// File: common/quarantine.h
//
// Where a node puts the chunk files it found corrupt: STORE/store/quarantine,
// moved there (a rename, on the same filesystem) instead of deleted, so that an
// operator can look at what the disk did. A reader that had the file open
// keeps reading it (the inode lives on); no new open finds it at its old path.
//
// The directory keeps the newest kKeep files (named <when>-<kind>-<name>) and
// deletes older ones, so a dying disk cannot fill its own filesystem with
// quarantined copies.
//
// Thread-safety: Quarantine may be called from any thread; concurrent calls
// each move their own file (the trim may race, and then deletes a little late).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

class QuarantineDir {
 public:
  static constexpr size_t kKeep = 32;

  // `dir` is created at the first move.
  explicit QuarantineDir(std::string dir) : dir_(std::move(dir)) {}

  // Moves `path` into the quarantine as <unix seconds>-<kind>-<basename>.
  // OK if it was already gone (kNotFound is not an error here).
  Status Move(const std::string& path, std::string_view kind) const;

  const std::string& dir() const { return dir_; }

 private:
  void Trim() const;
  std::string dir_;
};

}  // namespace hoard
