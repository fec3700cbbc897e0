// File: common/testing.h
//
// Helpers shared by hoard's tests (never linked into a daemon):
//   - TempDir: a fresh directory under /tmp, removed with everything in it
//     when the object goes away, also when the test failed; making it fails
//     the test;
//   - PseudoRandomBytes: reproducible bytes that differ per seed and per
//     offset, so a chunk served from the wrong place never compares equal;
//   - Eventually: polls a condition until it holds or a deadline passes,
//     for state that other threads or processes reach asynchronously;
//   - Gate: a one-shot latch a test opens to let blocked threads go on (a
//     peer that answers only when the test says so).
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/file_util.h"

namespace hoard::testing {

class TempDir {
 public:
  // Throws if the directory cannot be made (a full or missing /tmp): the
  // test fails there, instead of writing its files under "/".
  explicit TempDir(const std::string& prefix = "hoard-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("TempDir: mkdtemp " + tmpl + ": " + std::strerror(errno));
    }
    path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string Sub(const std::string& name) const { return JoinPath(path_, name); }

 private:
  std::string path_;
};

inline std::string PseudoRandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ULL * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// Closed until opened (opening it again is a no-op); every Wait returns from
// then on.
class Gate {
 public:
  void Open() {
    std::call_once(opened_, [this] { promise_.set_value(); });
  }
  void Wait() const { future_.wait(); }
  // Whether it is open within `d`.
  bool WaitFor(std::chrono::milliseconds d) const { return future_.wait_for(d) == std::future_status::ready; }

 private:
  std::once_flag opened_;
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

}  // namespace hoard::testing
