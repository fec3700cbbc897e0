// File: cli/progress.h
//
// A progress line for long operations (warm-up, checkpoint flush):
//   [##########..........]  52.3%  1.4 GiB / 2.7 GiB  8,012 / 16,000 files  310.2 MiB/s  ETA 4s
// It shows 100.0% only when done: a few bytes left of a large total read
// 99.9%, not a rounded 100% that looks finished.
// On a terminal it redraws one line on stderr; otherwise it prints a line
// every `log_every` seconds, so CI and job logs stay short. The rate is measured over the
// last ~5 s, so the ETA follows the current speed, not the average.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>
#include <utility>

namespace hoard::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label, std::chrono::seconds log_every = std::chrono::seconds(5));

  // Reports the current totals; prints when due.
  void Update(uint64_t bytes_done, uint64_t bytes_total, uint64_t files_done, uint64_t files_total);
  // Prints the final line (and a newline on a terminal).
  void Finish();
  // Prints `line` on a line of its own (on a terminal, over the bar, which
  // the next Update draws again below it).
  void Note(const std::string& line);

  double rate_bytes_per_s() const { return rate_; }

 private:
  std::string Render() const;

  std::string label_;
  bool tty_;
  std::chrono::seconds log_every_;
  uint64_t bytes_done_ = 0, bytes_total_ = 0, files_done_ = 0, files_total_ = 0;
  double rate_ = 0;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> samples_;
  std::chrono::steady_clock::time_point last_print_{};
};

// "1,234,567".
std::string Thousands(uint64_t n);
// "4s", "3m12s", "2h05m".
std::string Duration(double seconds);
// Rows as aligned columns (the first row is the header), one line each.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// The limits of a --wait loop: a --timeout on the whole wait, and a
// --stall-timeout on time without progress (0 = no limit for either).
class WaitLimits {
 public:
  WaitLimits(double timeout_s, double stall_timeout_s)
      : timeout_s_(timeout_s), stall_timeout_s_(stall_timeout_s), start_(Now()), last_progress_(start_) {}

  // Records the amount done so far; "" to keep waiting, else why to stop.
  std::string Check(uint64_t done) {
    const auto now = Now();
    if (done != last_done_) {
      last_done_ = done;
      last_progress_ = now;
    }
    const double stalled = std::chrono::duration<double>(now - last_progress_).count();
    if (timeout_s_ > 0 && elapsed() > timeout_s_) return "timed out after " + Duration(elapsed());
    if (stall_timeout_s_ > 0 && stalled > stall_timeout_s_) return "no progress for " + Duration(stalled);
    return "";
  }
  double elapsed() const { return std::chrono::duration<double>(Now() - start_).count(); }
  // The --timeout has passed (a reason from Check() is then that one).
  bool timed_out() const { return timeout_s_ > 0 && elapsed() > timeout_s_; }
  // Starts the --stall-timeout afresh: for a wait that begins after other
  // work (a walk of the source) that this clock was already running over.
  void RestartStall() { last_progress_ = Now(); }
  // Seconds left before the --timeout; `otherwise` when there is none.
  double remaining_or(double otherwise) const {
    return timeout_s_ > 0 ? std::max(0.0, timeout_s_ - elapsed()) : otherwise;
  }

 private:
  static std::chrono::steady_clock::time_point Now() { return std::chrono::steady_clock::now(); }
  double timeout_s_, stall_timeout_s_;
  std::chrono::steady_clock::time_point start_, last_progress_;
  uint64_t last_done_ = 0;
};

}  // namespace hoard::cli
