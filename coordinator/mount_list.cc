#include "coordinator/mount_list.h"

namespace hoard {
namespace {

// The longest strings kept: a node name (a host name may be up to 255
// bytes), a mountpoint (what a mount sends at most), a version or commit.
constexpr size_t kMaxNodeBytes = 255;
constexpr size_t kMaxBuildBytes = 64;

std::string Cut(const std::string& s, size_t max) { return s.size() <= max ? s : s.substr(0, max); }

}  // namespace

void MountList::Heard(const proto::MountInfo& mount) {
  if (mount.mountpoint.empty()) return;
  proto::MountInfo info{.node = Cut(mount.node, kMaxNodeBytes),
                        .mountpoint = Cut(mount.mountpoint, proto::kMaxMountpointBytes),
                        .build = {Cut(mount.build.version, kMaxBuildBytes), Cut(mount.build.commit, kMaxBuildBytes)},
                        .last_seen_unix = options_.clock->WallSeconds()};
  const auto now = options_.clock->Now();
  MutexLock lock(&mu_);
  auto key = std::make_pair(info.node, info.mountpoint);
  auto it = mounts_.find(key);
  if (it == mounts_.end()) {
    if (mounts_.size() >= kMaxMounts) ForgetSilentLocked(now);
    if (mounts_.size() >= kMaxMounts) return;
    it = mounts_.emplace(std::move(key), Entry{}).first;
  }
  it->second = Entry{std::move(info), now};
}

std::vector<proto::MountInfo> MountList::Live() {
  MutexLock lock(&mu_);
  ForgetSilentLocked(options_.clock->Now());
  std::vector<proto::MountInfo> out;
  out.reserve(mounts_.size());
  for (const auto& [key, e] : mounts_) out.push_back(e.info);
  return out;
}

void MountList::ForgetSilentLocked(std::chrono::steady_clock::time_point now) {
  std::erase_if(mounts_, [&](const auto& kv) { return now - kv.second.last > options_.forget_after; });
}

}  // namespace hoard
