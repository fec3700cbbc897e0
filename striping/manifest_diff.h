// File: striping/manifest_diff.h
//
// What changed between two versions of a dataset (`hoard dataset refresh`),
// by path. A file is *changed* when its FileKey differs, i.e. its size or
// mtime at the origin did: its chunks are new ones and must be fetched. A file
// that kept its key keeps its chunks, their names and (placement being a
// function of the chunk key alone, striping/placement.h) their owners, so it
// costs nothing. Everything else the mount shows (directories, symlinks,
// modes, owners, directory mtimes) is counted as `other_changes`: no data to
// fetch, but a new version all the same; the first ones are listed too.
//
// The chunks a new version keeps (its unchanged files') are given as runs of
// ordinals, so that progress on the old version can be carried over to the
// new one before every node has reported on it (coordinator/progress.h).
//
//   ManifestDiff d = DiffManifests(current, walked);
//   if (SameNamespace(current, walked)) ...  // nothing to record
//
// Thread-safety: pure functions over immutable manifests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "striping/manifest.h"

namespace hoard {

struct ManifestChange {
  enum class Kind { kAdded, kChanged, kRemoved };
  Kind kind = Kind::kAdded;
  std::string path;
  uint64_t size = 0;  // in the new version; the old size for kRemoved
};

const char* ManifestChangeName(ManifestChange::Kind kind);  // "added", "changed", "removed"

// A change of an entry that has no data to fetch: "directory added",
// "symlink removed", "symlink changed", "mode, owner or mtime changed"...
struct OtherChange {
  std::string path;
  std::string what;
};

// Chunks an unchanged file (or a run of them, consecutive in both versions)
// keeps: ordinals [from_first, from_first + count) of the old version are
// [to_first, to_first + count) of the new one.
struct KeptRun {
  uint64_t from_first = 0;
  uint64_t to_first = 0;
  uint64_t count = 0;
};

// The new ordinal of old chunk `from_ordinal`, or nullopt if its file did not
// keep its key. `runs` sorted by from_first, not overlapping (as
// ManifestDiff::kept is). O(log runs).
std::optional<uint64_t> KeptOrdinal(const std::vector<KeptRun>& runs, uint64_t from_ordinal);

struct ManifestDiff {
  uint64_t files_added = 0;
  uint64_t files_changed = 0;
  uint64_t files_removed = 0;
  // Directories and symlinks added, removed or changed, and files whose mode
  // or owner changed without a new size or mtime.
  uint64_t other_changes = 0;
  // The added and changed files of the new version: what must be fetched
  // again (one copy; owners fetch it once per replica).
  uint64_t fetch_bytes = 0;
  uint64_t fetch_chunks = 0;
  // Of fetch_bytes, the changed files' (new sizes): fetched again whole.
  uint64_t changed_bytes = 0;
  // The removed files and the old versions of the changed ones: chunks
  // nodes may delete once they hold the new version.
  uint64_t dropped_bytes = 0;
  // The first `max_listed` file changes, in walk order (breadth-first,
  // sorted by name within a directory).
  std::vector<ManifestChange> files;
  // The first `max_listed` other changes (other_changes of them in all), in
  // walk order.
  std::vector<OtherChange> others;
  // Every chunk of the new version whose file kept its key, as runs sorted
  // by from_first (adjacent files merged into one run).
  std::vector<KeptRun> kept;

  bool empty() const {
    return files_added == 0 && files_changed == 0 && files_removed == 0 && other_changes == 0;
  }
};

// Compares `from` (the current version) with `to` (a new walk of the same
// dataset). REQUIRES: the same dataset uid and chunk size (file keys are only
// comparable then). Linear in the entries of both: the two trees are merged
// directory by directory, since children are sorted by name.
ManifestDiff DiffManifests(const Manifest& from, const Manifest& to, size_t max_listed = 100);

// True when the two show exactly the same namespace: the same entries with
// the same attributes and keys (only the version and the creation time in
// the header may differ). Agrees with DiffManifests(from, to).empty().
bool SameNamespace(const Manifest& a, const Manifest& b);

}  // namespace hoard
