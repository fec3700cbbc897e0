#include "checkpoint/ckpt_sessions.h"

#include <algorithm>
#include <random>

namespace hoard {

namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  return (uint64_t(rd()) << 32 | rd()) | 1;  // never 0
}

FileLock ToFileLock(uint64_t session, const proto::CkptLockSpec& s) {
  return FileLock{.file = s.id, .session = session, .owner = s.owner, .flock = s.flock,
                  .type = static_cast<LockType>(s.type), .start = s.start, .end = s.end, .pid = s.pid};
}

proto::CkptLockSpec ToSpec(const FileLock& l) {
  return proto::CkptLockSpec{.id = l.file, .owner = l.owner, .flock = l.flock, .type = uint8_t(l.type),
                             .start = l.start, .end = l.end, .pid = l.pid};
}

}  // namespace

CkptSessions::CkptSessions(Options options)
    : options_(std::move(options)), incarnation_(RandomIncarnation()), started_(options_.clock->Now()) {}

bool CkptSessions::InGraceLocked() const { return options_.clock->Now() - started_ < options_.lock_grace; }

CkptSessions::Session& CkptSessions::TouchLocked(uint64_t mount, const std::string* node, bool* fresh) {
  auto [it, made] = sessions_.try_emplace(mount);
  if (fresh != nullptr) *fresh = made;
  Session& s = it->second;
  s.last = options_.clock->Now();
  if (node != nullptr) s.node = *node;
  return s;
}

proto::CkptSessionReply CkptSessions::Update(const proto::CkptSession& req) {
  MutexLock lock(&mu_);
  proto::CkptSessionReply reply{.incarnation = incarnation_};
  if (req.mount == 0) return reply;
  Session& s = TouchLocked(req.mount, &req.node, &reply.fresh);
  s.holds = std::set<proto::CkptHold>(req.holds.begin(), req.holds.end());
  s.writing = std::set<uint64_t>(req.writing.begin(), req.writing.end());
  if (req.reclaim) {
    // What this mount held before we restarted (or ended its session); it
    // keeps it, unless someone took a conflicting lock meanwhile (possible
    // only after the session had ended): then that lock is lost to it.
    for (const proto::CkptLockSpec& l : req.locks) {
      if (l.type == 0 || l.type > 2 || l.start > l.end) continue;
      if (std::optional<FileLock> c = locks_.Set(ToFileLock(req.mount, l))) {
        options_.logger->warn("checkpoint lock of file {} reclaimed by mount {:x} conflicts with mount {:x}'s: lost",
                              l.id, req.mount, c->session);
        reply.lost.push_back(l);
      }
    }
  }
  PublishLocked(req.mount, s.writing);
  return reply;
}

Result<proto::CkptLockReply> CkptSessions::Lock(const proto::CkptLock& req) {
  if (req.mount == 0 || req.lock.type > 2 || req.lock.start > req.lock.end) {
    return Status::InvalidArgument("malformed checkpoint lock request");
  }
  MutexLock lock(&mu_);
  const Session& me = TouchLocked(req.mount, nullptr);
  const FileLock want = ToFileLock(req.mount, req.lock);
  proto::CkptLockReply reply;
  auto answer = [&](const std::optional<FileLock>& c) {
    mu_.AssertHeld();
    reply.granted = !c.has_value();
    if (c) {
      reply.conflict = ToSpec(*c);
      // A pid means something only on the holder's own node.
      auto holder = sessions_.find(c->session);
      if (holder == sessions_.end() || holder->second.node != me.node || me.node.empty()) reply.conflict.pid = 0;
    }
  };
  if (req.release_owner) {
    locks_.ReleaseOwner(req.lock.id, req.mount, req.lock.owner, req.lock.flock);
    reply.granted = true;
  } else if (req.test) {
    answer(locks_.Test(want));
  } else if (want.type != LockType::kUnlock && InGraceLocked()) {
    // Until mounts have reclaimed what they held before our restart, a new
    // lock could be one somebody still holds.
    reply.granted = false;
    reply.conflict = proto::CkptLockSpec{.id = want.file, .flock = want.flock, .type = 2};
  } else {
    answer(locks_.Set(want));
  }
  return reply;
}

void CkptSessions::Expire() {
  MutexLock lock(&mu_);
  const auto now = options_.clock->Now();
  bool changed = false;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (now - it->second.last > options_.timeout) {
      EndLocked(it, "not heard from");
      changed = true;
    }
    it = next;
  }
  if (changed) PublishLocked();
}

void CkptSessions::EndLocked(std::map<uint64_t, Session>::iterator it, const char* why) {
  const size_t dropped = locks_.DropSession(it->first);
  if (dropped > 0 || !it->second.holds.empty() || !it->second.writing.empty()) {
    options_.logger->warn("checkpoint session of mount {:x} on node '{}' ended ({}): {} locks released", it->first,
                          it->second.node, why, dropped);
  }
  sessions_.erase(it);
}

void CkptSessions::PublishLocked(uint64_t mount, const std::set<uint64_t>& mount_writing) {
  if (!options_.on_change) return;
  std::set<proto::CkptHold> holds;
  std::set<uint64_t> writing;
  for (const auto& [id, s] : sessions_) {
    holds.insert(s.holds.begin(), s.holds.end());
    writing.insert(s.writing.begin(), s.writing.end());
  }
  options_.on_change(std::move(holds), std::move(writing), mount, mount_writing);
}

size_t CkptSessions::sessions() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

size_t CkptSessions::reading() const {
  MutexLock lock(&mu_);
  return size_t(std::count_if(sessions_.begin(), sessions_.end(), [](const auto& kv) { return !kv.second.holds.empty(); }));
}

}  // namespace hoard
