// File locks: checkpoint files' go to CkptFs (the cluster's, kept by the
// coordinator); every other inode's are this node's, kept here.
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "fuse/hoard_fs.h"

namespace hoard::fuse {
namespace {

constexpr uint64_t kThisMount = 1;  // the one session of dataset_locks_

FileLock ToLock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, const struct flock& l) {
  FileLock out{.file = ino, .session = kThisMount, .owner = fi->lock_owner,
               .type = l.l_type == F_RDLCK ? LockType::kRead : l.l_type == F_WRLCK ? LockType::kWrite : LockType::kUnlock,
               .start = uint64_t(std::max<off_t>(l.l_start, 0)), .pid = uint32_t(fuse_req_ctx(req)->pid)};
  out.end = l.l_len <= 0 ? UINT64_MAX : out.start + uint64_t(l.l_len) - 1;
  return out;
}

// Takes `want`, waiting for a blocking one until granted or interrupted.
int TakeLocal(FileLocks& locks, fuse_req_t req, const FileLock& want, bool wait) {
  auto backoff = std::chrono::milliseconds(2);
  while (locks.Set(want).has_value()) {
    if (!wait) return EAGAIN;
    if (fuse_req_interrupted(req)) return EINTR;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace

void HoardFs::GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  if (IsCkptIno(ino)) {
    ckpt_->GetLk(req, ino, fi, lock);
    return;
  }
  struct flock out = *lock;
  if (std::optional<FileLock> c = dataset_locks_.Test(ToLock(req, ino, fi, *lock))) {
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

void HoardFs::SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  if (IsCkptIno(ino)) {
    ckpt_->SetLk(req, ino, fi, lock, sleep);
    return;
  }
  fuse_reply_err(req, TakeLocal(dataset_locks_, req, ToLock(req, ino, fi, *lock), sleep != 0));
}

void HoardFs::Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  if (IsCkptIno(ino)) {
    ckpt_->Flock(req, ino, fi, op);
    return;
  }
  const int kind = op & (LOCK_SH | LOCK_EX | LOCK_UN);
  const FileLock want{.file = ino, .session = kThisMount, .owner = fi->lock_owner, .flock = true,
                      .type = kind == LOCK_SH ? LockType::kRead : kind == LOCK_EX ? LockType::kWrite : LockType::kUnlock,
                      .pid = uint32_t(fuse_req_ctx(req)->pid)};
  fuse_reply_err(req, TakeLocal(dataset_locks_, req, want, (op & LOCK_NB) == 0));
}

}  // namespace hoard::fuse
