// File: origin/origin_pool.h
//
// OriginPool keeps one open Origin per source string, so every fetch of a
// dataset shares that origin's connections (an NFS origin holds a small pool
// of mounted libnfs contexts) instead of mounting per chunk.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "origin/origin.h"

namespace hoard {

class OriginPool {
 public:
  using Opener = std::function<Result<std::unique_ptr<Origin>>(const std::string& source)>;

  explicit OriginPool(OriginOptions options = {}, Opener opener = nullptr);

  // The open origin for `source`, opening it on first use. A failed open is
  // not remembered: the next call tries again.
  Result<std::shared_ptr<Origin>> Get(const std::string& source);

 private:
  Opener opener_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Origin>> open_ GUARDED_BY(mu_);
};

}  // namespace hoard
