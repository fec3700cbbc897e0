// CkptFs: file locks (kept by the coordinator for the whole cluster) and the
// mount's session (see "Sessions" and "Locks" in ckpt_fs.h).
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "fuse/ckpt_fs.h"
#include "fuse/errno.h"

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

int CkptFs::Lock(fuse_req_t req, const proto::CkptLockSpec& spec, bool test, bool wait,
                 proto::CkptLockSpec* conflict) {
  // A blocking request asks again, a little less often each time, until it
  // is granted or its caller is interrupted (a signal: EINTR, as fcntl).
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    Result<proto::CkptLockReply> r = Ask(proto::CkptLock{.mount = mount_id_, .lock = spec, .test = test});
    if (!r.ok()) {
      options_.logger->warn("checkpoint lock of file {}: {}", spec.id, r.status().ToString());
      return ENOLCK;
    }
    if (test) {
      if (conflict != nullptr) *conflict = r->granted ? proto::CkptLockSpec{} : r->conflict;
      return 0;
    }
    if (r->granted) {
      // Mirrored, to re-assert after a coordinator restart (and so that a
      // close that held nothing costs no round trip).
      (void)held_locks_.Set(ToFileLock(mount_id_, spec));
      WakeSession();
      return 0;
    }
    if (!wait) return EAGAIN;
    if (req != nullptr && fuse_req_interrupted(req)) return EINTR;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

void CkptFs::ReleaseLocks(uint64_t id, uint64_t owner, bool flock) {
  if (held_locks_.size() == 0) return;  // every close comes here: most hold nothing
  std::vector<FileLock> mine = held_locks_.Held(mount_id_);
  if (std::none_of(mine.begin(), mine.end(),
                   [&](const FileLock& l) { return l.file == id && l.owner == owner && l.flock == flock; })) {
    return;
  }
  held_locks_.ReleaseOwner(id, mount_id_, owner, flock);
  proto::CkptLockSpec spec{.id = id, .owner = owner, .flock = flock};
  Result<proto::CkptLockReply> r = Ask(proto::CkptLock{.mount = mount_id_, .lock = spec, .release_owner = true});
  if (!r.ok()) {
    // The coordinator ends our session's locks if it never hears back; until
    // then the lock stays held there. Logged: a waiter elsewhere may stall.
    options_.logger->warn("checkpoint locks of file {} not released at the coordinator: {}", id,
                          r.status().ToString());
  }
  WakeSession();
}

void CkptFs::GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  proto::CkptLockSpec spec{.id = ino - kCkptInoBase, .owner = fi->lock_owner, .type = ToType(lock->l_type),
                           .pid = uint32_t(fuse_req_ctx(req)->pid)};
  ToRange(*lock, &spec);
  proto::CkptLockSpec conflict;
  if (int err = Lock(req, spec, /*test=*/true, /*wait=*/false, &conflict); err != 0) {
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
                           .pid = uint32_t(fuse_req_ctx(req)->pid)};
  ToRange(*lock, &spec);
  fuse_reply_err(req, Lock(req, spec, /*test=*/false, sleep != 0, nullptr));
}

void CkptFs::Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  const int kind = op & (LOCK_SH | LOCK_EX | LOCK_UN);
  proto::CkptLockSpec spec{.id = ino - kCkptInoBase, .owner = fi->lock_owner, .flock = true,
                           .type = uint8_t(kind == LOCK_SH ? 1 : kind == LOCK_EX ? 2 : 0),
                           .pid = uint32_t(fuse_req_ctx(req)->pid)};
  fuse_reply_err(req, Lock(req, spec, /*test=*/false, (op & LOCK_NB) == 0, nullptr));
}

// ---- the session ----------------------------------------------------------

void CkptFs::Start() {
  std::lock_guard lock(session_mu_);
  if (session_started_) return;
  session_started_ = true;
  session_thread_ = std::thread([this] { SessionLoop(); });
}

void CkptFs::Stop() {
  {
    std::lock_guard lock(session_mu_);
    if (!session_started_ || session_stop_) return;
    session_stop_ = true;
  }
  session_cv_.notify_all();
  if (session_thread_.joinable()) session_thread_.join();
}

void CkptFs::WakeSession() {
  {
    std::lock_guard lock(session_mu_);
    session_wake_ = true;
  }
  session_cv_.notify_all();
}

proto::CkptSession CkptFs::SessionSnapshot(bool reclaim) {
  proto::CkptSession s{.mount = mount_id_, .node = options_.node_name, .reclaim = reclaim};
  std::set<proto::CkptHold> holds;
  std::set<uint64_t> writing;
  {
    std::lock_guard lock(mu_);
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
      std::unique_lock lock(session_mu_);
      session_cv_.wait_for(lock, options_.session_interval, [this] { return session_stop_ || session_wake_; });
      if (session_stop_) break;
      session_wake_ = false;
    }
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
    // A new coordinator knows nothing of our locks: say them again now,
    // within its grace period.
    if (incarnation != 0 && r->incarnation != incarnation && held_locks_.size() > 0) {
      options_.logger->warn("checkpoint session: the coordinator restarted; re-asserting {} locks",
                            held_locks_.size());
      reclaim = true;
      WakeSession();
    }
    incarnation = r->incarnation;
  }
  // Ending cleanly: nothing of ours must outlive the mount at the coordinator.
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
