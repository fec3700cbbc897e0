#include "striping/manifest_diff.h"

#include <algorithm>
#include <deque>

namespace hoard {
namespace {

constexpr int64_t kAbsent = -1;

class Differ {
 public:
  Differ(const Manifest& from, const Manifest& to, size_t max_listed)
      : from_(from), to_(to), max_listed_(max_listed) {}

  ManifestDiff Run() {
    if (!SameAttributes(from_.entry(0), to_.entry(0))) Other(to_, 0, "directory mode, owner or mtime changed");
    queue_.push_back({0, 0});
    while (!queue_.empty()) {  // breadth-first, like the manifests themselves
      const auto [a, b] = queue_.front();
      queue_.pop_front();
      MergeChildren(a, b);
    }
    std::sort(d_.kept.begin(), d_.kept.end(), [](const KeptRun& a, const KeptRun& b) {
      return a.from_first < b.from_first;
    });
    // Merge what is adjacent in both versions (usually whole directories).
    std::vector<KeptRun> merged;
    for (const KeptRun& r : d_.kept) {
      if (!merged.empty() && merged.back().from_first + merged.back().count == r.from_first &&
          merged.back().to_first + merged.back().count == r.to_first) {
        merged.back().count += r.count;
      } else {
        merged.push_back(r);
      }
    }
    d_.kept = std::move(merged);
    return std::move(d_);
  }

 private:
  // Directory `a` of from_ and `b` of to_ (either may be kAbsent: a directory
  // added or removed whole): their children merged by name.
  void MergeChildren(int64_t a, int64_t b) {
    uint32_t i = 0, in = 0, j = 0, jn = 0;
    if (a != kAbsent) {
      i = from_.entry(uint32_t(a)).first_child();
      in = i + from_.entry(uint32_t(a)).child_count();
    }
    if (b != kAbsent) {
      j = to_.entry(uint32_t(b)).first_child();
      jn = j + to_.entry(uint32_t(b)).child_count();
    }
    while (i < in || j < jn) {
      if (j == jn || (i < in && from_.name(i) < to_.name(j))) {
        Removed(i++);
      } else if (i == in || to_.name(j) < from_.name(i)) {
        Added(j++);
      } else {
        Both(i++, j++);
      }
    }
  }

  void Removed(uint32_t x) {
    const EntryRecord& r = from_.entry(x);
    if (r.is_file()) {
      ++d_.files_removed;
      d_.dropped_bytes += r.size;
      List(ManifestChange::Kind::kRemoved, from_, x, r.size);
      return;
    }
    Other(from_, x, Kind(r) + " removed");
    if (r.is_dir()) queue_.push_back({x, kAbsent});
  }

  void Added(uint32_t y) {
    const EntryRecord& r = to_.entry(y);
    if (r.is_file()) {
      ++d_.files_added;
      d_.fetch_bytes += r.size;
      d_.fetch_chunks += to_.chunk_count(y);
      List(ManifestChange::Kind::kAdded, to_, y, r.size);
      return;
    }
    Other(to_, y, Kind(r) + " added");
    if (r.is_dir()) queue_.push_back({kAbsent, y});
  }

  void Both(uint32_t x, uint32_t y) {
    const EntryRecord& a = from_.entry(x);
    const EntryRecord& b = to_.entry(y);
    if ((a.mode & S_IFMT) != (b.mode & S_IFMT)) {  // e.g. a file replaced by a directory
      Removed(x);
      Added(y);
      return;
    }
    if (a.is_file() && a.file_key() != b.file_key()) {
      ++d_.files_changed;
      d_.fetch_bytes += b.size;
      d_.changed_bytes += b.size;
      d_.fetch_chunks += to_.chunk_count(y);
      d_.dropped_bytes += a.size;
      List(ManifestChange::Kind::kChanged, to_, y, b.size);
      return;
    }
    if (a.is_file() && to_.chunk_count(y) > 0) {
      d_.kept.push_back({a.first_chunk(), b.first_chunk(), to_.chunk_count(y)});
    }
    if (a.is_symlink() && from_.symlink_target(x) != to_.symlink_target(y)) {
      Other(to_, y, "symlink target changed");
    } else if (!SameAttributes(a, b)) {
      Other(to_, y, Kind(a) + " mode, owner or mtime changed");
    }
    if (a.is_dir()) queue_.push_back({x, y});
  }

  // What the mount shows of an entry besides its name and contents. A
  // directory's `size` (its subdirectory count) follows from its children.
  static bool SameAttributes(const EntryRecord& a, const EntryRecord& b) {
    return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.mtime_ns == b.mtime_ns &&
           (a.is_dir() || a.size == b.size);
  }

  static std::string Kind(const EntryRecord& r) {
    return r.is_dir() ? "directory" : r.is_symlink() ? "symlink" : r.is_file() ? "file" : "special file";
  }

  void Other(const Manifest& m, uint32_t e, std::string what) {
    ++d_.other_changes;
    // The top directory's path is empty: "." names it.
    if (d_.others.size() < max_listed_) d_.others.push_back({e == 0 ? "." : m.Path(e), std::move(what)});
  }

  void List(ManifestChange::Kind kind, const Manifest& m, uint32_t e, uint64_t size) {
    if (d_.files.size() < max_listed_) d_.files.push_back({kind, m.Path(e), size});
  }

  const Manifest& from_;
  const Manifest& to_;
  const size_t max_listed_;
  ManifestDiff d_;
  std::deque<std::pair<int64_t, int64_t>> queue_;  // directories to merge
};

}  // namespace

const char* ManifestChangeName(ManifestChange::Kind kind) {
  switch (kind) {
    case ManifestChange::Kind::kAdded: return "added";
    case ManifestChange::Kind::kChanged: return "changed";
    case ManifestChange::Kind::kRemoved: return "removed";
  }
  return "unknown";
}

std::optional<uint64_t> KeptOrdinal(const std::vector<KeptRun>& runs, uint64_t from_ordinal) {
  // The last run starting at or before the ordinal.
  auto it = std::upper_bound(runs.begin(), runs.end(), from_ordinal,
                             [](uint64_t o, const KeptRun& r) { return o < r.from_first; });
  if (it == runs.begin()) return std::nullopt;
  --it;
  if (from_ordinal - it->from_first >= it->count) return std::nullopt;
  return it->to_first + (from_ordinal - it->from_first);
}

ManifestDiff DiffManifests(const Manifest& from, const Manifest& to, size_t max_listed) {
  return Differ(from, to, max_listed).Run();
}

bool SameNamespace(const Manifest& a, const Manifest& b) {
  // Everything after the header is laid out deterministically from the
  // entries (breadth-first, sorted names, chunk ordinals, name offsets), so
  // equal entries give equal bytes.
  if (a.dataset_uid() != b.dataset_uid() || a.chunk_size() != b.chunk_size()) return false;
  return a.bytes().substr(Manifest::kHeaderSize) == b.bytes().substr(Manifest::kHeaderSize);
}

}  // namespace hoard
