// The dataset tree's file locks (fuse/dataset_fs.h): this node's, kept here
// (checkpoint files' are the cluster's: checkpoint/ckpt_fs_locks.cc).
#include <sys/file.h>

#include <algorithm>
#include <cerrno>

#include "common/proc_files.h"
#include "fuse/dataset_fs.h"

namespace hoard::fuse {
namespace {

constexpr uint64_t kThisMount = 1;  // the one session of dataset_locks_

FileLock ToLock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, const struct flock& l) {
  FileLock out{.file = ino, .session = kThisMount, .owner = fi->lock_owner,
               .type = l.l_type == F_RDLCK ? LockType::kRead : l.l_type == F_WRLCK ? LockType::kWrite : LockType::kUnlock,
               .start = uint64_t(std::max<off_t>(l.l_start, 0)),
               .pid = uint32_t(ThreadGroupOf(fuse_req_ctx(req)->pid))};
  out.end = l.l_len <= 0 ? UINT64_MAX : out.start + uint64_t(l.l_len) - 1;
  return out;
}

}  // namespace

std::optional<FileLock> DatasetFs::DatasetConflict(const FileLock& want, bool apply) {
  for (;;) {
    std::optional<FileLock> c = apply ? dataset_locks_.Set(want) : dataset_locks_.Test(want);
    // A dataset file is opened without FLUSH at close (noflush: no round
    // trip), so a process's close does not drop its POSIX locks here. A
    // holder that no longer has the file open has closed it: its locks went
    // with that close, as POSIX says.
    if (!c || c->flock ||
        ProcessHasOpen(pid_t(c->pid), ProcOpenQuery{.dev = mount_dev_(), .ino = want.file})) {
      return c;
    }
    dataset_locks_.ReleaseOwner(c->file, c->session, c->owner, /*flock=*/false);
  }
}

void DatasetFs::TakeLocal(fuse_req_t req, const FileLock& want, bool wait) {
  auto attempt = [this, want] { return DatasetConflict(want, /*apply=*/true).has_value() ? EAGAIN : 0; };
  const int r = attempt();
  if (r != EAGAIN || !wait) {
    fuse_reply_err(req, r);
    return;
  }
  lock_waiter_.Wait(req, attempt);  // off the worker thread (checkpoint/lock_waiter.h)
}

void DatasetFs::GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  struct flock out = *lock;
  if (std::optional<FileLock> c = DatasetConflict(ToLock(req, ino, fi, *lock), /*apply=*/false)) {
    out.l_type = c->type == LockType::kRead ? F_RDLCK : F_WRLCK;
    out.l_whence = SEEK_SET;
    out.l_start = off_t(std::min<uint64_t>(c->start, INT64_MAX));
    out.l_len = c->end == UINT64_MAX ? 0 : off_t(c->end - c->start + 1);
    out.l_pid = pid_t(c->pid);
  } else {
    out.l_type = F_UNLCK;
  }
  fuse_reply_lock(req, &out);
}

void DatasetFs::SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  TakeLocal(req, ToLock(req, ino, fi, *lock), sleep != 0);
}

void DatasetFs::Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  const int kind = op & (LOCK_SH | LOCK_EX | LOCK_UN);
  const FileLock want{.file = ino, .session = kThisMount, .owner = fi->lock_owner, .flock = true,
                      .type = kind == LOCK_SH ? LockType::kRead : kind == LOCK_EX ? LockType::kWrite : LockType::kUnlock,
                      .pid = uint32_t(ThreadGroupOf(fuse_req_ctx(req)->pid))};
  TakeLocal(req, want, (op & LOCK_NB) == 0);
}

}  // namespace hoard::fuse
