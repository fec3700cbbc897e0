#include "common/latency_window.h"

#include <algorithm>
#include <cmath>

namespace hoard {

LatencyWindow::LatencyWindow(Options options, const Clock* clock) : options_(options), clock_(clock) {
  ring_.reserve(std::max<size_t>(options_.capacity, 1));
}

void LatencyWindow::Record(std::chrono::nanoseconds latency) {
  const Sample s{clock_->Now(), latency};
  MutexLock lock(&mu_);
  if (ring_.size() < std::max<size_t>(options_.capacity, 1)) {
    ring_.push_back(s);
    return;
  }
  ring_[next_] = s;
  next_ = (next_ + 1) % ring_.size();
}

std::chrono::nanoseconds LatencyWindow::Quantile(double q, size_t* samples) const {
  const auto oldest = clock_->Now() - options_.max_age;
  std::vector<std::chrono::nanoseconds::rep> v;
  {
    MutexLock lock(&mu_);
    v.reserve(ring_.size());
    for (const Sample& s : ring_) {
      if (s.at >= oldest) v.push_back(s.latency.count());
    }
  }
  if (samples != nullptr) *samples = v.size();
  if (v.empty() || v.size() < options_.min_samples) return std::chrono::nanoseconds(0);
  // The smallest sample with at least a fraction q of the samples at or
  // below it (the nearest-rank quantile).
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * double(v.size()));
  const size_t k = std::clamp<size_t>(static_cast<size_t>(rank), 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return std::chrono::nanoseconds(v[k]);
}

std::chrono::nanoseconds LatencyWindow::HedgeDelay() const {
  size_t n = 0;
  const std::chrono::nanoseconds q = Quantile(options_.quantile, &n);
  const std::chrono::nanoseconds floor = options_.floor, cap = std::max<std::chrono::nanoseconds>(options_.cap, floor);
  if (n < options_.min_samples || n == 0) return cap;
  const auto scaled = std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(
      std::min(double(q.count()) * options_.multiple, double(cap.count()))));
  return std::clamp(scaled, floor, cap);
}

}  // namespace hoard
