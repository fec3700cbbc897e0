#include "common/file_locks.h"

#include <algorithm>

namespace hoard {

namespace {

bool Overlaps(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a0 <= b1 && b0 <= a1; }

bool Conflicts(LockType a, LockType b) { return a == LockType::kWrite || b == LockType::kWrite; }

}  // namespace

std::optional<FileLock> FileLocks::ConflictLocked(const FileLock& req) const {
  if (req.type == LockType::kUnlock) return std::nullopt;
  auto f = files_.find(req.file);
  if (f == files_.end()) return std::nullopt;
  const Owner me{req.session, req.owner};
  if (req.flock) {
    for (const auto& [who, held] : f->second.flocks) {
      if (who == me || !Conflicts(req.type, held.first)) continue;
      return FileLock{.file = req.file, .session = who.session, .owner = who.owner, .flock = true,
                      .type = held.first, .pid = held.second};
    }
    return std::nullopt;
  }
  for (const auto& [who, ranges] : f->second.ranges) {
    if (who == me) continue;
    for (const Range& r : ranges) {
      if (Overlaps(r.start, r.end, req.start, req.end) && Conflicts(req.type, r.type)) {
        return FileLock{.file = req.file, .session = who.session, .owner = who.owner, .type = r.type,
                        .start = r.start, .end = r.end, .pid = r.pid};
      }
    }
  }
  return std::nullopt;
}

std::optional<FileLock> FileLocks::Test(const FileLock& req) const {
  MutexLock lock(&mu_);
  return ConflictLocked(req);
}

std::optional<FileLock> FileLocks::Set(const FileLock& req) {
  MutexLock lock(&mu_);
  if (req.start > req.end) return std::nullopt;  // nothing to lock
  if (std::optional<FileLock> c = ConflictLocked(req)) return c;
  const Owner me{req.session, req.owner};
  File& f = files_[req.file];
  if (req.flock) {
    if (req.type == LockType::kUnlock) f.flocks.erase(me);
    else f.flocks[me] = {req.type, req.pid};
  } else {
    // Cut the owner's ranges at [start, end], then add the new one and merge
    // neighbours of the same type.
    std::vector<Range>& mine = f.ranges[me];
    std::vector<Range> out;
    for (const Range& r : mine) {
      if (!Overlaps(r.start, r.end, req.start, req.end)) {
        out.push_back(r);
        continue;
      }
      if (r.start < req.start) out.push_back(Range{r.start, req.start - 1, r.type, r.pid});
      if (r.end > req.end) out.push_back(Range{req.end + 1, r.end, r.type, r.pid});
    }
    if (req.type != LockType::kUnlock) out.push_back(Range{req.start, req.end, req.type, req.pid});
    std::sort(out.begin(), out.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
    mine.clear();
    for (const Range& r : out) {
      if (!mine.empty() && mine.back().type == r.type && mine.back().end != UINT64_MAX &&
          mine.back().end + 1 >= r.start) {
        mine.back().end = std::max(mine.back().end, r.end);
      } else {
        mine.push_back(r);
      }
    }
    if (mine.empty()) f.ranges.erase(me);
  }
  if (f.empty()) files_.erase(req.file);
  return std::nullopt;
}

void FileLocks::ReleaseOwner(uint64_t file, uint64_t session, uint64_t owner, bool flock) {
  MutexLock lock(&mu_);
  auto f = files_.find(file);
  if (f == files_.end()) return;
  if (flock) f->second.flocks.erase(Owner{session, owner});
  else f->second.ranges.erase(Owner{session, owner});
  if (f->second.empty()) files_.erase(f);
}

size_t FileLocks::DropSession(uint64_t session) {
  MutexLock lock(&mu_);
  size_t dropped = 0;
  for (auto f = files_.begin(); f != files_.end();) {
    dropped += std::erase_if(f->second.flocks, [&](const auto& kv) { return kv.first.session == session; });
    dropped += std::erase_if(f->second.ranges, [&](const auto& kv) { return kv.first.session == session; });
    f = f->second.empty() ? files_.erase(f) : std::next(f);
  }
  return dropped;
}

std::vector<FileLock> FileLocks::Held(uint64_t session) const {
  MutexLock lock(&mu_);
  std::vector<FileLock> out;
  for (const auto& [file, f] : files_) {
    for (const auto& [who, held] : f.flocks) {
      if (who.session != session) continue;
      out.push_back(FileLock{.file = file, .session = session, .owner = who.owner, .flock = true,
                             .type = held.first, .pid = held.second});
    }
    for (const auto& [who, ranges] : f.ranges) {
      if (who.session != session) continue;
      for (const Range& r : ranges) {
        out.push_back(FileLock{.file = file, .session = session, .owner = who.owner, .type = r.type,
                               .start = r.start, .end = r.end, .pid = r.pid});
      }
    }
  }
  return out;
}

size_t FileLocks::size() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [file, f] : files_) {
    n += f.flocks.size();
    for (const auto& [who, ranges] : f.ranges) n += ranges.size();
  }
  return n;
}

}  // namespace hoard
