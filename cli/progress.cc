#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/units.h"

namespace hoard::cli {

std::string Thousands(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const uint64_t s = static_cast<uint64_t>(seconds + 0.5);
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                                   static_cast<unsigned long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                     static_cast<unsigned long long>((s % 3600) / 60));
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::chrono::seconds log_every)
    : label_(std::move(label)), tty_(::isatty(STDERR_FILENO) == 1), log_every_(log_every) {}

void ProgressBar::Update(uint64_t bytes_done, uint64_t bytes_total, uint64_t files_done, uint64_t files_total) {
  const auto now = std::chrono::steady_clock::now();
  bytes_done_ = bytes_done;
  bytes_total_ = bytes_total;
  files_done_ = files_done;
  files_total_ = files_total;
  samples_.emplace_back(now, bytes_done);
  while (samples_.size() > 2 && now - samples_.front().first > std::chrono::seconds(5)) samples_.pop_front();
  const double span = std::chrono::duration<double>(samples_.back().first - samples_.front().first).count();
  if (span > 0.2) {
    const double moved = double(samples_.back().second) - double(samples_.front().second);
    rate_ = moved > 0 ? moved / span : 0;
  }
  if (tty_ || now - last_print_ >= log_every_) {
    last_print_ = now;
    std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", Render().c_str());
    std::fflush(stderr);
  }
}

void ProgressBar::Note(const std::string& line) {
  std::fprintf(stderr, tty_ ? "\r%s\033[K\n" : "%s\n", line.c_str());
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  std::fprintf(stderr, tty_ ? "\r%s\033[K\n" : "%s\n", Render().c_str());
  std::fflush(stderr);
}

std::string ProgressBar::Render() const {
  const double frac = bytes_total_ == 0 ? 1.0 : std::min(1.0, double(bytes_done_) / double(bytes_total_));
  const int width = 20;
  const int filled = static_cast<int>(frac * width);
  std::string bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(width - filled), '.') + "]";
  char pct[16];
  // %.1f rounds 0.9996 up to 100.0: not while something is left.
  std::snprintf(pct, sizeof pct, "%5.1f%%", (bytes_done_ < bytes_total_ ? std::min(frac, 0.999) : frac) * 100);
  std::string eta = "-";
  if (bytes_done_ >= bytes_total_) eta = "0s";
  else if (rate_ > 0) eta = Duration(double(bytes_total_ - bytes_done_) / rate_);
  return label_ + " " + bar + " " + pct + "  " + FormatBytes(double(bytes_done_)) + " / " +
         FormatBytes(double(bytes_total_)) + "  " + Thousands(files_done_) + " / " + Thousands(files_total_) +
         " files  " + FormatBytes(rate_) + "/s  ETA " + eta;
}

namespace {
std::string Pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }
}  // namespace

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size() + 2);
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += i + 1 == r.size() ? r[i] : Pad(r[i], width[i]);
    out += line + "\n";
  }
  return out;
}

}  // namespace hoard::cli
