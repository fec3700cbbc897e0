#include "common/file_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace hoard {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (true) {
    if (done == out.size()) out.resize(out.size() + 65536);  // the file grew
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

Status PwriteAll(int fd, const void* data, size_t len, off_t offset) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::pwrite(fd, p, len, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "pwrite");
    }
    p += n;
    len -= static_cast<size_t>(n);
    offset += n;
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* data, size_t len, off_t offset) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::pread(fd, p, len, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "pread");
    }
    if (n == 0) return Status::IoError("pread: file is shorter than expected");
    p += n;
    len -= static_cast<size_t>(n);
    offset += n;
  }
  return Status::Ok();
}

Status SyncDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open dir " + path);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync dir " + path);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  std::string tmp = path + ".tmp";
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp);
    HOARD_RETURN_IF_ERROR(PwriteAll(fd.get(), data.data(), data.size(), 0).Annotate(tmp));
    if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno(errno, "rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(DirName(path));
}

Result<UniqueFd> LockFile(const std::string& path, const std::string& what) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Status::Unavailable(what + " is in use by another process (" + path + ")");
    return Status::FromErrno(errno, "lock " + path);
  }
  return fd;
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "mkdir " + path);
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "remove " + path);
  return Status::Ok();
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(std::string_view a, std::string_view b) {
  std::string out(a);
  while (!out.empty() && out.back() == '/') out.pop_back();
  size_t i = 0;
  while (i < b.size() && b[i] == '/') ++i;
  out += '/';
  out.append(b.substr(i));
  return out;
}

}  // namespace hoard
