// CkptFs: file locks (kept by the coordinator for the whole cluster) and the
// mount's session (see "Sessions" and "Locks" in ckpt_fs.h).
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "checkpoint/ckpt_fs.h"
#include "common/errno.h"
#include "common/proc_files.h"

namespace hoard::fuse {
namespace {

// struct flock's range as an inclusive [start, end]; l_len 0 reaches past
// any end of file. The kernel hands FUSE absolute, checked ranges.
void ToRange(const struct flock& l, proto::CkptLockSpec* s) {
  s->start = uint64_t(std::max<off_t>(l.l_start, 0));
  s->end = l.l_len <= 0 ? UINT64_MAX : s->start + uint64_t(l.l_len) - 1;
}

uint8_t ToType(short type) { return type == F_RDLCK ? 1 : type == F_WRLCK ? 2 : 0; }

FileLock ToFileLock(uint64_t session, const proto::CkptLockSpec& s) {
  return FileLock{.file = s.id, .session = session, .owner = s.owner, .flock = s.flock,
                  .type = static_cast<LockType>(s.type), .start = s.start, .end = s.end, .pid = s.pid};
}

}  // namespace

int CkptFs::Lock(const proto::CkptLockSpec& spec, bool test, proto::CkptLockSpec* conflict) {
  Result<proto::CkptLockReply> r = Ask(proto::CkptLock{.mount = mount_id_, .lock = spec, .test = test});
  if (!r.ok()) {
    options_.logger->warn("checkpoint lock of file {}: {}", spec.id, r.status().ToString());
    if (test) return ENOLCK;
    // The answer was lost, not necessarily the request: a release is sent
    // again later; a take is undone later in case it was granted, unless
    // this owner held a lock there already (an undo would drop that one).
    std::vector<FileLock> mine = held_locks_.Held(mount_id_);
    const bool held_before = std::any_of(mine.begin(), mine.end(), [&](const FileLock& l) {
      return l.file == spec.id && l.owner == spec.owner && l.flock == spec.flock && l.start <= spec.end &&
             spec.start <= l.end;
    });
    if (spec.type == 0 || !held_before) {
      proto::CkptLockSpec unlock = spec;
      unlock.type = 0;
      RetryLater(proto::CkptLock{.mount = mount_id_, .lock = unlock});
    }
    if (spec.type == 0) (void)held_locks_.Set(ToFileLock(mount_id_, spec));  // released as far as we know
    return ENOLCK;
  }
  if (test) {
    if (conflict != nullptr) *conflict = r->granted ? proto::CkptLockSpec{} : r->conflict;
    return 0;
  }
  if (!r->granted) return EAGAIN;
  // Mirrored, to re-assert after a coordinator restart (and so that a close
  // that held nothing costs no round trip).
  (void)held_locks_.Set(ToFileLock(mount_id_, spec));
  WakeSession();
  return 0;
}

void CkptFs::TakeLock(fuse_req_t req, const proto::CkptLockSpec& spec, bool wait) {
  const int r = Lock(spec, /*test=*/false, nullptr);
  if (r != EAGAIN || !wait) {
    fuse_reply_err(req, r);
    return;
  }
  lock_waiter_.Wait(req, [this, spec] { return Lock(spec, /*test=*/false, nullptr); });
}

void CkptFs::ReleaseLocks(uint64_t id, uint64_t owner, bool flock) {
  if (held_locks_.size() == 0) return;  // every close comes here: most hold nothing
  std::vector<FileLock> mine = held_locks_.Held(mount_id_);
  if (std::none_of(mine.begin(), mine.end(),
                   [&](const FileLock& l) { return l.file == id && l.owner == owner && l.flock == flock; })) {
    return;
  }
  held_locks_.ReleaseOwner(id, mount_id_, owner, flock);
  const proto::CkptLock release{.mount = mount_id_, .lock = {.id = id, .owner = owner, .flock = flock},
                                .release_owner = true};
  if (Result<proto::CkptLockReply> r = Ask(release); !r.ok()) {
    options_.logger->warn("checkpoint locks of file {} not released at the coordinator (sent again): {}", id,
                          r.status().ToString());
    RetryLater(release);
  }
  WakeSession();
}

void CkptFs::RetryLater(const proto::CkptLock& unlock) {
  MutexLock lock(&pending_mu_);
  pending_unlocks_.push_back(unlock);
}

void CkptFs::RetryPendingUnlocks() {
  std::vector<proto::CkptLock> pending;
  {
    MutexLock lock(&pending_mu_);
    pending.swap(pending_unlocks_);
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    if (Ask(pending[i]).ok()) continue;
    MutexLock lock(&pending_mu_);
    pending_unlocks_.insert(pending_unlocks_.end(), pending.begin() + ptrdiff_t(i), pending.end());
    return;
  }
}

void CkptFs::GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  proto::CkptLockSpec spec{.id = ino - kCkptInoBase, .owner = fi->lock_owner, .type = ToType(lock->l_type),
                           .pid = uint32_t(ThreadGroupOf(fuse_req_ctx(req)->pid))};
  ToRange(*lock, &spec);
  proto::CkptLockSpec conflict;
  if (int err = Lock(spec, /*test=*/true, &conflict); err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  struct flock out = *lock;
  if (conflict.type == 0) {
    out.l_type = F_UNLCK;
  } else {
    out.l_type = conflict.type == 1 ? F_RDLCK : F_WRLCK;
    out.l_whence = SEEK_SET;
    out.l_start = off_t(std::min<uint64_t>(conflict.start, INT64_MAX));
    out.l_len = conflict.end == UINT64_MAX ? 0 : off_t(conflict.end - conflict.start + 1);
    out.l_pid = pid_t(conflict.pid);
  }
  fuse_reply_lock(req, &out);
}

void CkptFs::SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  proto::CkptLockSpec spec{.id = ino - kCkptInoBase, .owner = fi->lock_owner, .type = ToType(lock->l_type),
                           .pid = uint32_t(ThreadGroupOf(fuse_req_ctx(req)->pid))};
  ToRange(*lock, &spec);
  if (spec.type != 0) {
    MutexLock lock_handles(&mu_);
    if (auto it = handles_.find(fi->fh); it != handles_.end()) it->second.lockers.insert(fi->lock_owner);
  }
  TakeLock(req, spec, sleep != 0);
}

void CkptFs::Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  const int kind = op & (LOCK_SH | LOCK_EX | LOCK_UN);
  proto::CkptLockSpec spec{.id = ino - kCkptInoBase, .owner = fi->lock_owner, .flock = true,
                           .type = uint8_t(kind == LOCK_SH ? 1 : kind == LOCK_EX ? 2 : 0),
                           .pid = uint32_t(ThreadGroupOf(fuse_req_ctx(req)->pid))};
  TakeLock(req, spec, (op & LOCK_NB) == 0);
}

// ---- the session ----------------------------------------------------------

void CkptFs::Start() {
  MutexLock lock(&session_mu_);
  if (session_started_) return;
  session_started_ = true;
  session_thread_ = std::thread([this] { SessionLoop(); });
}

void CkptFs::Stop(bool end_session) {
  {
    MutexLock lock(&session_mu_);
    if (!session_started_ || session_stop_) return;
    session_stop_ = true;
    session_end_ = end_session;
  }
  session_cv_.NotifyAll();
  if (session_thread_.joinable()) session_thread_.join();
}

void CkptFs::WakeSession() {
  {
    MutexLock lock(&session_mu_);
    session_wake_ = true;
  }
  session_cv_.NotifyAll();
}

proto::CkptSession CkptFs::SessionSnapshot(bool reclaim) {
  proto::CkptSession s{.mount = mount_id_, .node = options_.node_name, .reclaim = reclaim};
  std::set<proto::CkptHold> holds;
  std::set<uint64_t> writing;
  {
    MutexLock lock(&mu_);
    for (const auto& [fh, h] : handles_) {
      if (h.entry != nullptr && h.entry->gen > 0) holds.insert({.id = h.id, .gen = h.entry->gen});
      if (h.writable) writing.insert(h.id);
    }
  }
  s.holds.assign(holds.begin(), holds.end());
  s.writing.assign(writing.begin(), writing.end());
  if (reclaim) {
    for (const FileLock& l : held_locks_.Held(mount_id_)) {
      s.locks.push_back({.id = l.file, .owner = l.owner, .flock = l.flock, .type = uint8_t(l.type),
                         .start = l.start, .end = l.end, .pid = l.pid});
    }
  }
  return s;
}

void CkptFs::SessionLoop() {
  uint64_t incarnation = 0;
  bool reclaim = false, announced = false;
  for (;;) {
    {
      MutexLock lock(&session_mu_);
      const auto deadline = options_.clock->Now() + options_.session_interval;
      while (!session_stop_ && !session_wake_ && options_.clock->Now() < deadline) {
        options_.clock->WaitUntil(&session_cv_, &session_mu_, deadline);
      }
      if (session_stop_) {
        if (!session_end_) return;  // a successor process carries the session on
        break;
      }
      session_wake_ = false;
    }
    RetryPendingUnlocks();
    proto::CkptSession s = SessionSnapshot(reclaim);
    const bool active = !s.holds.empty() || !s.writing.empty() || held_locks_.size() > 0;
    // Nothing to keep: one last message says so, then silence (the
    // coordinator's state for us is empty, or ends with its timeout).
    if (!active && !announced) continue;
    Result<proto::CkptSessionReply> r = Ask(s);
    if (!r.ok()) {
      options_.logger->debug("checkpoint session: {}", r.status().ToString());
      continue;
    }
    announced = active;
    if (reclaim) reclaim = false;
    for (const proto::CkptLockSpec& l : r->lost) {
      options_.logger->error("checkpoint lock of file {} lost: another mount took it while this one was cut off "
                             "from the coordinator",
                             l.id);
      held_locks_.ReleaseOwner(l.id, mount_id_, l.owner, l.flock);
    }
    // A coordinator that restarted, or ended our session after a silence,
    // knows nothing of our locks: say them again now (within its grace
    // period after a restart).
    const bool forgotten = r->fresh || (incarnation != 0 && r->incarnation != incarnation);
    if (forgotten && held_locks_.size() > 0 && !s.reclaim) {
      options_.logger->warn("checkpoint session: the coordinator had no session of this mount; re-asserting {} locks",
                            held_locks_.size());
      reclaim = true;
      WakeSession();
    }
    incarnation = r->incarnation;
  }
  // Ending cleanly: nothing of ours must outlive the mount at the coordinator.
  RetryPendingUnlocks();
  proto::CkptSession last{.mount = mount_id_, .node = options_.node_name};
  if (held_locks_.size() > 0) {
    for (const FileLock& l : held_locks_.Held(mount_id_)) {
      (void)Ask(proto::CkptLock{.mount = mount_id_,
                                .lock = {.id = l.file, .owner = l.owner, .flock = l.flock},
                                .release_owner = true});
    }
  }
  (void)Ask(last);
}

}  // namespace hoard::fuse
