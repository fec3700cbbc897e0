#include "common/clock.h"

#include <ctime>

namespace hoard {
namespace {
class RealClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  int64_t WallSeconds() const override { return static_cast<int64_t>(::time(nullptr)); }
};
}  // namespace

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

}  // namespace hoard
