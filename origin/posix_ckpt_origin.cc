#include "origin/posix_ckpt_origin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"
#include "common/mutex.h"
#include "origin/posix_origin.h"

namespace hoard {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// ELOOP from O_NOFOLLOW means a component is a symlink: for a path that must
// name directories, that is ENOTDIR.
Status PathError(int err, std::string_view op, std::string_view path) {
  return Status::FromErrno(err == ELOOP ? ENOTDIR : err, std::string(op) + " '" + std::string(path) + "'");
}

class PosixCkptWriter : public CkptWriter {
 public:
  PosixCkptWriter(UniqueFd fd, UniqueFd dir_fd, std::string path)
      : fd_(std::move(fd)), dir_fd_(std::move(dir_fd)), path_(std::move(path)) {}

  Status WriteAt(uint64_t offset, const char* data, size_t len) override {
    if (!fd_.valid()) return Status::Internal("write '" + path_ + "' after Close");
    return PwriteAll(fd_.get(), data, len, static_cast<off_t>(offset)).Annotate("write '" + path_ + "'");
  }

  Status Close() override {
    if (!fd_.valid()) return Status::Internal("close '" + path_ + "' twice");
    UniqueFd fd = std::move(fd_);
    if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync '" + path_ + "'");
    if (::close(fd.Release()) != 0) return Status::FromErrno(errno, "close '" + path_ + "'");
    // The file's name must be durable before someone renames it into place.
    if (::fsync(dir_fd_.get()) != 0) return Status::FromErrno(errno, "fsync the directory of '" + path_ + "'");
    return Status::Ok();
  }

 private:
  UniqueFd fd_;
  const UniqueFd dir_fd_;
  const std::string path_;
};

// The directory the origin works in: its descriptor, a reader on it, and
// which directory it is (to notice that the path now names another).
struct Root {
  UniqueFd fd;
  std::unique_ptr<Origin> reader;  // a PosixOrigin on the same directory
  dev_t dev = 0;
  ino_t ino = 0;
};

Result<std::shared_ptr<const Root>> OpenRoot(const std::string& path) {
  auto root = std::make_shared<Root>();
  HOARD_ASSIGN_OR_RETURN(root->reader, PosixOrigin::Create(path));
  root->fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root->fd.valid()) return Status::FromErrno(errno, "open checkpoint origin " + path);
  struct stat st {};
  if (::fstat(root->fd.get(), &st) != 0) return Status::FromErrno(errno, "stat checkpoint origin " + path);
  root->dev = st.st_dev;
  root->ino = st.st_ino;
  return std::shared_ptr<const Root>(std::move(root));
}

class PosixCkptOrigin : public CkptOrigin {
 public:
  PosixCkptOrigin(std::string source, std::shared_ptr<const Root> root)
      : source_(std::move(source)), root_(std::move(root)) {}

  const std::string& source() const override { return source_; }

  Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(Parent parent, OpenParent(path, "create"));
    UniqueFd fd(
        ::openat(parent.fd.get(), parent.name.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd.valid()) return PathError(errno, "create", path);
    return std::unique_ptr<CkptWriter>(new PosixCkptWriter(std::move(fd), std::move(parent.fd), std::string(path)));
  }

  Status MakeDirs(std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, Current());
    return MakeDirsIn(*root, path);
  }

  Status MakeDirsIn(const Root& root, std::string_view path) const {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/true));
    UniqueFd dir(::dup(root.fd.get()));
    if (!dir.valid()) return Status::FromErrno(errno, "dup");
    size_t start = 0;
    while (start < path.size()) {
      size_t slash = path.find('/', start);
      if (slash == std::string_view::npos) slash = path.size();
      const std::string name(path.substr(start, slash - start));
      start = slash + 1;
      bool created = false;
      if (::mkdirat(dir.get(), name.c_str(), 0755) == 0) {
        created = true;
      } else if (errno != EEXIST) {
        return PathError(errno, "mkdir", path);
      }
      UniqueFd next(::openat(dir.get(), name.c_str(), kDirFlags));
      if (!next.valid()) return PathError(errno, "mkdir", path);  // EEXIST was a file: ENOTDIR
      // A new directory is durable once its parent's entry is.
      if (created && ::fsync(dir.get()) != 0) return Status::FromErrno(errno, "fsync parent of '" + name + "'");
      dir = std::move(next);
    }
    return Status::Ok();
  }

  Status Rename(std::string_view from, std::string_view to) override {
    HOARD_ASSIGN_OR_RETURN(Parent src, OpenParent(from, "rename"));
    HOARD_ASSIGN_OR_RETURN(Parent dst, OpenParent(to, "rename"));
    if (::renameat(src.fd.get(), src.name.c_str(), dst.fd.get(), dst.name.c_str()) != 0) {
      return Status::FromErrno(errno, "rename '" + std::string(from) + "' to '" + std::string(to) + "'");
    }
    if (::fsync(dst.fd.get()) != 0) return Status::FromErrno(errno, "fsync the directory of '" + std::string(to) + "'");
    if (::fsync(src.fd.get()) != 0)
      return Status::FromErrno(errno, "fsync the directory of '" + std::string(from) + "'");
    return Status::Ok();
  }

  Status Unlink(std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(Parent parent, OpenParent(path, "unlink"));
    if (::unlinkat(parent.fd.get(), parent.name.c_str(), 0) != 0) {
      // Linux says EISDIR for a directory; POSIX allows EPERM.
      return PathError(errno == EPERM ? EISDIR : errno, "unlink", path);
    }
    if (::fsync(parent.fd.get()) != 0)
      return Status::FromErrno(errno, "fsync the directory of '" + std::string(path) + "'");
    return Status::Ok();
  }

  Status Symlink(std::string_view target, std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(Parent parent, OpenParent(path, "symlink"));
    if (::symlinkat(std::string(target).c_str(), parent.fd.get(), parent.name.c_str()) != 0) {
      return PathError(errno, "symlink", path);
    }
    if (::fsync(parent.fd.get()) != 0)
      return Status::FromErrno(errno, "fsync the directory of '" + std::string(path) + "'");
    return Status::Ok();
  }

  Status Rmdir(std::string_view path) override {
    HOARD_ASSIGN_OR_RETURN(Parent parent, OpenParent(path, "rmdir"));
    if (::unlinkat(parent.fd.get(), parent.name.c_str(), AT_REMOVEDIR) != 0) {
      return Status::FromErrno(errno == EEXIST ? ENOTEMPTY : errno, "rmdir '" + std::string(path) + "'");
    }
    if (::fsync(parent.fd.get()) != 0)
      return Status::FromErrno(errno, "fsync the directory of '" + std::string(path) + "'");
    return Status::Ok();
  }

  Result<OriginEntry> Stat(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/true));
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, Current());
    return root->reader->Stat(path);
  }

  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, Current());
    return root->reader->Open(path);
  }

  Result<uint64_t> FreeBytes() override {
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, Current());
    struct statvfs st {};
    if (::fstatvfs(root->fd.get(), &st) != 0) return Status::FromErrno(errno, "statvfs " + source_);
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }

 private:
  // The root to work in: the directory source_ names now. When that is no
  // longer the one opened (a file system was mounted over the path, or
  // unmounted from it), it is opened afresh and given its staging directory,
  // as OpenCkptOrigin does: this process then writes where a process started
  // now would, and so where the others do. If the path names nothing (or no
  // directory) right now, the directory opened stays in use.
  Result<std::shared_ptr<const Root>> Current() {
    struct stat st {};
    const bool named = ::stat(source_.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    MutexLock lock(&mu_);
    if (!named || (st.st_dev == root_->dev && st.st_ino == root_->ino)) return root_;
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> fresh, OpenRoot(source_));
    HOARD_RETURN_IF_ERROR(MakeDirsIn(*fresh, kCkptStagingDir).Annotate(source_ + " (mounted anew)"));
    root_ = std::move(fresh);
    return root_;
  }

  // A readable descriptor of the directory that holds the last component of
  // `path` (fsync-able, unlike O_PATH), and that component's name.
  struct Parent {
    UniqueFd fd;
    std::string name;
  };
  Result<Parent> OpenParent(std::string_view path, std::string_view op) {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
    HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, Current());
    UniqueFd dir(::dup(root->fd.get()));
    if (!dir.valid()) return Status::FromErrno(errno, "dup");
    size_t start = 0;
    for (size_t slash; (slash = path.find('/', start)) != std::string_view::npos; start = slash + 1) {
      const std::string name(path.substr(start, slash - start));
      UniqueFd next(::openat(dir.get(), name.c_str(), kDirFlags));
      if (!next.valid()) return PathError(errno, op, path);
      dir = std::move(next);
    }
    return Parent{std::move(dir), std::string(path.substr(start))};
  }

  const std::string source_;
  Mutex mu_;
  std::shared_ptr<const Root> root_ GUARDED_BY(mu_);  // a call keeps the one it started with
};

}  // namespace

Result<std::unique_ptr<CkptOrigin>> OpenPosixCkptOrigin(const std::string& root) {
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<const Root> r, OpenRoot(root));
  return std::unique_ptr<CkptOrigin>(new PosixCkptOrigin(root, std::move(r)));
}

}  // namespace hoard
