#include "coordinator/fill_rate.h"

namespace hoard {

void FillRate::Add(TimePoint now, uint64_t bytes) {
  // After a pause (or at the start) the bytes now reported were filled since
  // the node's previous report, about one heartbeat ago: the baseline.
  if (samples_.empty() || now - samples_.back().at > window_) {
    samples_.clear();
    samples_.push_back({now - std::chrono::seconds(1), filled_});
  }
  filled_ += bytes;
  if (samples_.size() >= 2 && now - samples_.back().at < std::chrono::milliseconds(100)) {
    samples_.back().filled = filled_;
  } else {
    samples_.push_back({now, filled_});
  }
  // Keep one sample at or before the start of the window, as the baseline.
  while (samples_.size() > 2 && samples_[1].at <= now - window_) samples_.pop_front();
}

double FillRate::Rate(TimePoint now) const {
  if (samples_.size() < 2) return 0;
  const Sample* base = &samples_.front();
  for (const Sample& s : samples_) {
    if (s.at > now - window_) break;
    base = &s;
  }
  const double seconds = std::chrono::duration<double>(now - base->at).count();
  if (seconds <= 0) return 0;
  return double(samples_.back().filled - base->filled) / seconds;
}

}  // namespace hoard
