#include "origin/posix_origin.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "origin/origin_path.h"

namespace hoard {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
// For intermediate components: search permission is enough, no read needed.
constexpr int kPathFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

bool IsSupportedType(mode_t mode) { return S_ISREG(mode) || S_ISDIR(mode) || S_ISLNK(mode); }

// Errors of a lookup below the root. ENOTDIR and ELOOP (kNotDirectory) mean a
// component is a file or a symlink, which OriginReadError makes "no such path".
Status LookupError(int err, std::string_view op, std::string_view root, std::string_view path) {
  Status s = Status::FromErrno(err, std::string(op) + " " + std::string(root) + "/" + std::string(path));
  if (s.code() == Code::kNotDirectory) {
    s = Status(s.code(), s.message() + " (a parent component is not a directory; symlinks are not followed)");
  }
  return OriginReadError(std::move(s));
}

Result<std::string> ReadLinkAt(int dir_fd, const char* name, size_t size_hint, std::string_view what) {
  std::string buf(size_hint + 1, '\0');
  while (true) {
    ssize_t n = ::readlinkat(dir_fd, name, buf.data(), buf.size());
    if (n < 0) return Status::FromErrno(errno, "readlink " + std::string(what));
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    buf.resize(buf.size() * 2);  // the link changed since the stat
  }
}

// The entry for `path`, from its lstat. For symlinks reads the target at
// (dir_fd, name).
Result<OriginEntry> MakeEntry(std::string path, const struct stat& st, int dir_fd, const char* name) {
  OriginEntry e;
  e.mode = st.st_mode;
  e.uid = st.st_uid;
  e.gid = st.st_gid;
  e.mtime_ns = MtimeNs(st);
  if (S_ISREG(st.st_mode)) {
    e.type = EntryType::kFile;
    e.size = static_cast<uint64_t>(st.st_size);
  } else if (S_ISDIR(st.st_mode)) {
    e.type = EntryType::kDir;
  } else {
    e.type = EntryType::kSymlink;
    HOARD_ASSIGN_OR_RETURN(e.symlink_target, ReadLinkAt(dir_fd, name, static_cast<size_t>(st.st_size), path));
    e.size = e.symlink_target.size();
  }
  e.path = std::move(path);
  return e;
}

class PosixFile : public OriginFile {
 public:
  PosixFile(UniqueFd fd, OriginEntry attrs) : fd_(std::move(fd)), attrs_(std::move(attrs)) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd_.get(), buf + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "read " + attrs_.path);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    return done;
  }

  const OriginEntry& attributes() const override { return attrs_; }

  Result<OriginEntry> Restat() override {
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return Status::FromErrno(errno, "stat " + attrs_.path);
    OriginEntry e = attrs_;
    e.size = static_cast<uint64_t>(st.st_size);
    e.mtime_ns = MtimeNs(st);
    return e;
  }

 private:
  const UniqueFd fd_;
  const OriginEntry attrs_;
};

}  // namespace

Result<std::unique_ptr<PosixOrigin>> PosixOrigin::Create(const std::string& root) {
  if (root.empty() || root[0] != '/') {
    return Status::InvalidArgument("local origin must be an absolute path, got '" + root + "'");
  }
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    Status s = Status::FromErrno(errno, "open local origin " + root);
    // The source names the origin's root: a file there is a wrong source,
    // not a missing path.
    if (s.code() == Code::kNotDirectory) return Status::InvalidArgument("local origin " + root + " is not a directory");
    return s;
  }
  return std::unique_ptr<PosixOrigin>(new PosixOrigin(root, std::move(fd)));
}

PosixOrigin::PosixOrigin(std::string source, UniqueFd root_fd)
    : source_(std::move(source)), root_fd_(std::move(root_fd)) {}

Result<UniqueFd> PosixOrigin::OpenParent(const std::vector<std::string_view>& parts, std::string_view path) const {
  UniqueFd cur(::fcntl(root_fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!cur.valid()) return Status::FromErrno(errno, "dup origin root");
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    std::string name(parts[i]);
    UniqueFd next(::openat(cur.get(), name.c_str(), kPathFlags));
    if (!next.valid()) return LookupError(errno, "open", source_, path);
    cur = std::move(next);
  }
  return cur;
}

Status PosixOrigin::Walk(const std::function<Status(const OriginEntry&)>& visit) {
  UniqueFd fd(::openat(root_fd_.get(), ".", kDirFlags));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + source_);
  return WalkDir(std::move(fd), "", visit);
}

Status PosixOrigin::WalkDir(UniqueFd dir_fd, const std::string& dir_path,
                            const std::function<Status(const OriginEntry&)>& visit) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(dir_fd.get()), &::closedir);
  if (!dir) return Status::FromErrno(errno, "opendir " + source_ + "/" + dir_path);
  dir_fd.Release();  // owned by `dir` now
  const int fd = ::dirfd(dir.get());

  // Subdirectories are entered only after the whole directory was listed, so
  // a walk holds one descriptor per level, however wide the tree.
  std::vector<std::string> subdirs;
  while (true) {
    errno = 0;
    struct dirent* de = ::readdir(dir.get());
    if (de == nullptr) {
      if (errno != 0) return Status::FromErrno(errno, "readdir " + source_ + "/" + dir_path);
      break;
    }
    std::string_view name(de->d_name);
    if (name == "." || name == "..") continue;
    if (!IsSafeName(name)) {
      spdlog::warn("origin {}: skipping unsafe name in '{}'", source_, dir_path);
      continue;
    }
    struct stat st;
    if (::fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since readdir
      return Status::FromErrno(errno, "stat " + source_ + "/" + JoinOriginPath(dir_path, name));
    }
    if (!IsSupportedType(st.st_mode)) {
      spdlog::debug("origin {}: skipping special file '{}'", source_, JoinOriginPath(dir_path, name));
      continue;
    }
    Result<OriginEntry> e = MakeEntry(JoinOriginPath(dir_path, name), st, fd, de->d_name);
    if (!e.ok()) {
      if (e.status().code() == Code::kNotFound) continue;  // removed since readdir
      return e.status();
    }
    HOARD_RETURN_IF_ERROR(visit(*e));
    if (e->type == EntryType::kDir) subdirs.emplace_back(name);
  }

  for (const std::string& name : subdirs) {
    // O_NOFOLLOW | O_DIRECTORY: if the directory was swapped for a symlink
    // since the stat, this fails instead of leaving the root.
    UniqueFd child(::openat(fd, name.c_str(), kDirFlags));
    std::string child_path = JoinOriginPath(dir_path, name);
    if (!child.valid()) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) continue;  // changed since readdir
      return Status::FromErrno(errno, "open " + source_ + "/" + child_path);
    }
    HOARD_RETURN_IF_ERROR(WalkDir(std::move(child), child_path, visit));
  }
  return Status::Ok();
}

Result<OriginEntry> PosixOrigin::Stat(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  struct stat st;
  if (parts.empty()) {
    if (::fstat(root_fd_.get(), &st) != 0) return Status::FromErrno(errno, "stat " + source_);
    return MakeEntry("", st, root_fd_.get(), ".");
  }
  HOARD_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(parts, path));
  std::string name(parts.back());
  if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return LookupError(errno, "stat", source_, path);
  }
  if (!IsSupportedType(st.st_mode)) {
    return Status::InvalidArgument("origin " + source_ + ": '" + std::string(path) +
                                   "' is a special file (fifo, socket or device)");
  }
  return MakeEntry(std::string(path), st, parent.get(), name.c_str());
}

Result<std::unique_ptr<OriginFile>> PosixOrigin::Open(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  if (parts.empty()) return Status::InvalidArgument("origin " + source_ + ": cannot open the root directory");
  HOARD_ASSIGN_OR_RETURN(UniqueFd parent, OpenParent(parts, path));
  std::string name(parts.back());
  struct stat st;
  // Checked before the open: opening a fifo blocks and opening a device may
  // have side effects.
  if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return LookupError(errno, "stat", source_, path);
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("origin " + source_ + ": '" + std::string(path) + "' is not a regular file");
  }
  UniqueFd fd(::openat(parent.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) return LookupError(errno, "open", source_, path);
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + source_ + "/" + std::string(path));
  if (!S_ISREG(st.st_mode)) {  // replaced between the stat and the open
    return Status::InvalidArgument("origin " + source_ + ": '" + std::string(path) + "' is not a regular file");
  }
  OriginEntry attrs;
  attrs.path = std::string(path);
  attrs.type = EntryType::kFile;
  attrs.mode = st.st_mode;
  attrs.uid = st.st_uid;
  attrs.gid = st.st_gid;
  attrs.size = static_cast<uint64_t>(st.st_size);
  attrs.mtime_ns = MtimeNs(st);
  return std::unique_ptr<OriginFile>(new PosixFile(std::move(fd), std::move(attrs)));
}

}  // namespace hoard
