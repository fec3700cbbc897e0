// File: origin/origin_test_util.h
//
// Test helpers shared by the POSIX and NFS origin tests: one on-disk tree
// with the awkward cases (nested and empty directories, an empty file, names
// with spaces and UTF-8, symlinks inside and out of the root, a fifo, a file
// with unusual owner/mode/mtime, a large file), and a Walk collector.
//
// Thread-safety: none needed (test setup).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "common/file_util.h"
#include "origin/origin.h"

namespace hoard::origin_testing {

// mtime given to "owned": 2020-09-13T12:26:40.123456789Z.
inline constexpr int64_t kOwnedMtimeNs = 1'600'000'000'123'456'789;

inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

inline std::string BigContent(size_t n) { return RandomBytes(n, 42); }

inline std::string AllBytes() {
  std::string s(256, '\0');
  for (int i = 0; i < 256; ++i) s[i] = static_cast<char>(i);
  return s;
}

// Builds the tree under `dir` (which must exist). Returns false on failure.
inline bool BuildTree(const std::string& dir, size_t big_size) {
  bool ok = true;
  ok &= MakeDirs(dir + "/a/b").ok();
  ok &= MakeDirs(dir + "/a/empty dir").ok();
  ok &= WriteFileAtomic(dir + "/a/b/deep.txt", "deep").ok();
  ok &= WriteFileAtomic(dir + "/a/empty", "").ok();
  ok &= WriteFileAtomic(dir + "/with space.txt", "hello world\n").ok();
  ok &= WriteFileAtomic(dir + "/naïve 日本語.bin", AllBytes()).ok();
  ok &= WriteFileAtomic(dir + "/big.bin", BigContent(big_size)).ok();
  ok &= WriteFileAtomic(dir + "/owned", "secret").ok();
  ok &= ::symlink("a/b/deep.txt", (dir + "/link").c_str()) == 0;
  ok &= ::symlink("/etc", (dir + "/escape").c_str()) == 0;
  ok &= ::symlink("..", (dir + "/a/up").c_str()) == 0;
  ok &= ::mkfifo((dir + "/fifo").c_str(), 0644) == 0;
  std::string owned = dir + "/owned";
  ok &= ::chmod(owned.c_str(), 0600) == 0;
  if (::geteuid() == 0) ok &= ::chown(owned.c_str(), 1234, 5678) == 0;
  struct timespec times[2];
  times[0].tv_sec = kOwnedMtimeNs / 1'000'000'000;
  times[0].tv_nsec = kOwnedMtimeNs % 1'000'000'000;
  times[1] = times[0];
  ok &= ::utimensat(AT_FDCWD, owned.c_str(), times, 0) == 0;
  return ok;
}

// The paths Walk must return for BuildTree's tree (not the fifo).
inline std::map<std::string, EntryType> ExpectedTree() {
  return {
      {"a", EntryType::kDir},
      {"a/b", EntryType::kDir},
      {"a/empty dir", EntryType::kDir},
      {"a/b/deep.txt", EntryType::kFile},
      {"a/empty", EntryType::kFile},
      {"a/up", EntryType::kSymlink},
      {"with space.txt", EntryType::kFile},
      {"naïve 日本語.bin", EntryType::kFile},
      {"big.bin", EntryType::kFile},
      {"owned", EntryType::kFile},
      {"link", EntryType::kSymlink},
      {"escape", EntryType::kSymlink},
  };
}

// Walks `origin` into a map by path; fails the walk on a duplicate path.
inline Result<std::map<std::string, OriginEntry>> CollectWalk(Origin& origin) {
  std::map<std::string, OriginEntry> out;
  Status s = origin.Walk([&](const OriginEntry& e) {
    if (!out.emplace(e.path, e).second) return Status::Internal("duplicate entry " + e.path);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

// Reads a whole origin file with ReadAt calls of `piece` bytes.
inline Result<std::string> ReadAll(Origin& origin, const std::string& path, size_t piece = 1 << 20) {
  Result<std::unique_ptr<OriginFile>> f = origin.Open(path);
  if (!f.ok()) return f.status();
  std::string out;
  std::string buf(piece, '\0');
  while (true) {
    Result<size_t> n = (*f)->ReadAt(out.size(), piece, buf.data());
    if (!n.ok()) return n.status();
    out.append(buf.data(), *n);
    if (*n < piece) return out;
  }
}

}  // namespace hoard::origin_testing
