#include "common/proc_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>
#include <string_view>

namespace hoard {
namespace {

// The number after "key:" at the start of a line of `text` (fdinfo, status).
bool Field(const std::string& text, std::string_view key, int base, uint64_t* out) {
  for (size_t at = 0; (at = text.find(key, at)) != std::string::npos; at += key.size()) {
    if (at != 0 && text[at - 1] != '\n') continue;
    size_t v = at + key.size();
    while (v < text.size() && (text[v] == ' ' || text[v] == '\t')) ++v;
    return std::from_chars(text.data() + v, text.data() + text.size(), *out, base).ec == std::errc();
  }
  return false;
}

// The file's text, or "" if it cannot be read. /proc entries vanish while
// read (an fdinfo of a descriptor another thread closes fails with ENOENT
// after its open): that is no error, only nothing to find. (An ifstream
// threw there, failing the FLUSH that asked with EIO.)
std::string Slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) text.clear();
      break;
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

// "0:53" and "00:35" (maps writes hex, two digits at least) as numbers.
bool ParseDev(std::string_view s, int base, unsigned* major, unsigned* minor) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  return std::from_chars(s.data(), s.data() + colon, *major, base).ec == std::errc() &&
         std::from_chars(s.data() + colon + 1, s.data() + s.size(), *minor, base).ec == std::errc();
}

}  // namespace

bool ProcessHasOpen(pid_t pid, const ProcOpenQuery& q) {
  if (pid <= 0) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  unsigned want_major = 0, want_minor = 0;
  const bool any_dev = q.dev.empty() || !ParseDev(q.dev, 10, &want_major, &want_minor);
  // The mount ids (in that process's namespace) of our device.
  std::set<uint64_t> mounts;
  if (!any_dev) {
    std::istringstream info(Slurp(proc + "/mountinfo"));
    for (std::string line; std::getline(info, line);) {
      // "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..."
      char dev[64] = {};
      unsigned long long id = 0;
      if (std::sscanf(line.c_str(), "%llu %*s %63s", &id, dev) != 2) continue;
      unsigned major = 0, minor = 0;
      if (ParseDev(dev, 10, &major, &minor) && major == want_major && minor == want_minor) mounts.insert(id);
    }
  }
  if (DIR* d = ::opendir((proc + "/fdinfo").c_str())) {
    bool found = false;
    while (dirent* ent = ::readdir(d)) {
      if (ent->d_name[0] == '.') continue;
      const std::string info = Slurp(proc + "/fdinfo/" + ent->d_name);
      uint64_t ino = 0, flags = 0, mnt = 0;
      if (!Field(info, "ino:", 10, &ino) || ino != q.ino) continue;
      if (!any_dev && (!Field(info, "mnt_id:", 10, &mnt) || !mounts.contains(mnt))) continue;
      if (q.writable_only && (!Field(info, "flags:", 8, &flags) || (flags & O_ACCMODE) == O_RDONLY)) continue;
      found = true;
      break;
    }
    ::closedir(d);
    if (found) return true;
  }
  if (!q.shared_writable_maps) return false;
  std::istringstream maps(Slurp(proc + "/maps"));
  for (std::string line; std::getline(maps, line);) {
    // "start-end perms offset dev inode path"
    char perms[5] = {}, dev[32] = {};
    unsigned long long ino = 0;
    if (std::sscanf(line.c_str(), "%*s %4s %*s %31s %llu", perms, dev, &ino) != 3) continue;
    if (ino != q.ino || perms[1] != 'w' || perms[3] != 's') continue;
    unsigned major = 0, minor = 0;
    if (any_dev || (ParseDev(dev, 16, &major, &minor) && major == want_major && minor == want_minor)) return true;
  }
  return false;
}

pid_t ThreadGroupOf(pid_t tid) {
  uint64_t tgid = 0;
  if (tid > 0 && Field(Slurp("/proc/" + std::to_string(tid) + "/status"), "Tgid:", 10, &tgid) && tgid > 0) {
    return pid_t(tgid);
  }
  return tid;
}

}  // namespace hoard
