// File: cli/progress.h
//
// A progress line for long operations (warm-up now; drain and rebuild later):
//   [##########..........]  52.3%  1.4 GiB / 2.7 GiB  8,012 / 16,000 files  310.2 MiB/s  ETA 4s
// On a terminal it redraws one line on stderr; otherwise it prints a line
// every few seconds, so CI logs stay short. The rate is measured over the
// last ~5 s, so the ETA follows the current speed, not the average.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

namespace hoard::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);

  // Reports the current totals; prints when due.
  void Update(uint64_t bytes_done, uint64_t bytes_total, uint64_t files_done, uint64_t files_total);
  // Prints the final line (and a newline on a terminal).
  void Finish();

  double rate_bytes_per_s() const { return rate_; }

 private:
  std::string Render() const;

  std::string label_;
  bool tty_;
  uint64_t bytes_done_ = 0, bytes_total_ = 0, files_done_ = 0, files_total_ = 0;
  double rate_ = 0;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> samples_;
  std::chrono::steady_clock::time_point last_print_{};
};

// "1,234,567".
std::string Thousands(uint64_t n);
// "4s", "3m12s", "2h05m".
std::string Duration(double seconds);

}  // namespace hoard::cli
