#include "origin/origin_pool.h"

namespace hoard {

OriginPool::OriginPool(OriginOptions options, Opener opener) : opener_(std::move(opener)) {
  if (!opener_) {
    opener_ = [options](const std::string& source) { return OpenOrigin(source, options); };
  }
}

Result<std::shared_ptr<Origin>> OriginPool::Get(const std::string& source) {
  {
    MutexLock lock(&mu_);
    auto it = open_.find(source);
    if (it != open_.end()) return it->second;
  }
  // Opening may take seconds (an NFS mount); do it without the lock. Two
  // callers may race to open the same source; the first to finish wins.
  Result<std::unique_ptr<Origin>> opened = opener_(source);
  if (!opened.ok()) return opened.status();
  MutexLock lock(&mu_);
  auto [it, inserted] = open_.try_emplace(source, std::shared_ptr<Origin>(std::move(*opened)));
  return it->second;
}

}  // namespace hoard
