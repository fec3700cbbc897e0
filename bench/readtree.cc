// hoard-readtree: reads every file under a directory and reports throughput.
//
// Used by scripts/demo (origin vs hoard cold vs hoard warm) and by the
// benchmarks. Files are listed first (not timed), then read whole with
// `--threads` readers, in path order or shuffled, with `--block` reads.
// Prints one JSON object: files, bytes, seconds, bytes_per_s, files_per_s,
// and a combined checksum of all bytes (order-independent), so two passes
// over different paths can be compared for equality.
//
// `--stat` is the metadata pass instead: every directory is listed (readdir)
// and every entry lstat'ed, by `--threads` walkers sharing a queue of
// directories; it prints entries, dirs, seconds, entries_per_s and a checksum
// of (path, type, mode, owner, size of files, mtime).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/pass_json.h"
#include "common/hash.h"

namespace {

// The metadata pass (see the top comment).
int StatTree(const std::string& root, int threads) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> queue = {""};  // paths relative to root
  int busy = 0;
  std::atomic<uint64_t> entries{0}, dirs{0}, sum{0}, errors{0};
  auto start = std::chrono::steady_clock::now();
  auto walker = [&] {
    std::vector<std::string> found;
    for (;;) {
      std::string rel;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !queue.empty() || busy == 0; });
        if (queue.empty()) return;
        rel = std::move(queue.front());
        queue.pop_front();
        ++busy;
      }
      const std::string dir = rel.empty() ? root : root + "/" + rel;
      found.clear();
      if (DIR* d = ::opendir(dir.c_str())) {
        dirs.fetch_add(1);
        while (dirent* e = ::readdir(d)) {
          if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
          const std::string child = rel.empty() ? e->d_name : rel + "/" + e->d_name;
          struct stat st;
          if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            std::fprintf(stderr, "hoard-readtree: stat %s: %s\n", child.c_str(), std::strerror(errno));
            errors.fetch_add(1);
            continue;
          }
          entries.fetch_add(1);
          const uint64_t size = S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0;
          uint64_t h = hoard::Mix64(hoard::Hash64(child), st.st_mode);
          h = hoard::Mix64(h, (uint64_t(st.st_uid) << 32) | st.st_gid);
          h = hoard::Mix64(h, size ^ (uint64_t(st.st_mtim.tv_sec) << 20));
          sum.fetch_add(h);
          if (S_ISDIR(st.st_mode)) found.push_back(child);
        }
        ::closedir(d);
      } else {
        std::fprintf(stderr, "hoard-readtree: opendir %s: %s\n", dir.c_str(), std::strerror(errno));
        errors.fetch_add(1);
      }
      std::lock_guard lock(mu);
      for (auto& f : found) queue.push_back(std::move(f));
      --busy;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(walker);
  for (auto& t : pool) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json out = {{"dir", root},
                        {"entries", entries.load()},
                        {"dirs", dirs.load()},
                        {"seconds", secs},
                        {"entries_per_s", secs > 0 ? double(entries.load()) / secs : 0.0},
                        {"checksum", sum.load()},
                        {"errors", errors.load()}};
  std::printf("%s\n", out.dump().c_str());
  return errors.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-readtree: read a directory tree and report throughput as JSON"};
  std::string root;
  int threads = 4;
  bool shuffle = false;
  size_t block = 1 << 20;
  app.add_option("dir", root, "Directory to read")->required();
  app.add_option("--threads", threads, "Parallel readers")->capture_default_str();
  app.add_flag("--shuffle", shuffle, "Read files in a random order (like a training epoch)");
  app.add_option("--block", block, "Read size in bytes")->capture_default_str();
  bool stat_only = false;
  app.add_flag("--stat", stat_only, "Metadata pass: list every directory and lstat every entry, read nothing");
  CLI11_PARSE(app, argc, argv);
  if (stat_only) return StatTree(root, threads);

  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  if (ec) {
    std::fprintf(stderr, "hoard-readtree: %s: %s\n", root.c_str(), ec.message().c_str());
    return 1;
  }
  std::sort(files.begin(), files.end());
  if (shuffle) std::shuffle(files.begin(), files.end(), std::mt19937(42));

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, sum{0}, errors{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<char> buf(block);
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          std::fprintf(stderr, "hoard-readtree: open %s: %s\n", files[i].c_str(), std::strerror(errno));
          errors.fetch_add(1);
          continue;
        }
        hoard::StreamingChecksum c;
        uint64_t n_total = 0;
        ssize_t n;
        while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
          c.Update(buf.data(), static_cast<size_t>(n));
          n_total += static_cast<uint64_t>(n);
        }
        if (n < 0) {
          std::fprintf(stderr, "hoard-readtree: read %s: %s\n", files[i].c_str(), std::strerror(errno));
          errors.fetch_add(1);
        }
        ::close(fd);
        bytes.fetch_add(n_total);
        // Sum of per-file checksums mixed with the file's relative path, so
        // the total does not depend on the read order but does on content.
        std::string rel = files[i].substr(root.size());
        sum.fetch_add(hoard::Mix64(c.Digest(), hoard::Hash64(rel)));
      }
    });
  }
  for (auto& t : pool) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json out = hoard::bench::PassJson(root, files.size(), bytes.load(), secs, sum.load(), errors.load());
  std::printf("%s\n", out.dump().c_str());
  return errors.load() == 0 ? 0 : 1;
}
