#include "checkpoint/drain_health.h"

#include <cerrno>
#include <cstring>

namespace hoard {

std::string DrainHealth::Reason(Code code, std::string_view message, bool at_origin) {
  if (code == Code::kNoSpace) return "no_space";
  // Both origins turn an errno into a Status with Status::FromErrno, which
  // keeps strerror's text but folds these into kIoError.
  for (int err : {EACCES, EPERM, EROFS}) {
    if (message.find(std::strerror(err)) != std::string_view::npos) return "permission";
  }
  if (code == Code::kPermissionDenied) return "permission";
  if (!at_origin) {
    return code == Code::kNotFound || code == Code::kCorruption ? "chunks_missing" : "other";
  }
  switch (code) {
    case Code::kUnavailable: return "unreachable";
    case Code::kNotFound: return "not_found";
    case Code::kIoError: return "io_error";
    default: return "other";
  }
}

void DrainHealth::UploadOk(uint64_t id, uint64_t gen, const std::string& path, const std::string& node,
                           int64_t now_ms) {
  PartyOk(node, now_ms);
  Uploads& u = uploads_[id];
  if (u.gen != gen) u = Uploads{.gen = gen};
  ++u.done;
  if (u.lost == 0) {
    files_.erase(id);  // it got through; a publish error, if any, is recorded when it happens
    return;
  }
  if (!Looping(u)) return;
  // Why this happens is what the operator needs: the lost uploads say it.
  if (loop_warned_ms_ != 0 && now_ms - loop_warned_ms_ < kLoopWarnEveryMs) {
    ++loop_warns_skipped_;
    return;
  }
  logger_->warn(
      "checkpoint {} (id {} gen {}): uploaded {} times and never published: {} of the uploads the nodes reported "
      "done (the last by {}) were not on the checkpoint origin when the coordinator went to publish them. Do the "
      "nodes and the coordinator see the same origin (a file system mounted anew over it under a running daemon, "
      "or different --ckpt-origin)? It is uploaded again meanwhile{}",
      path, id, gen, u.done, u.lost, node,
      loop_warns_skipped_ == 0 ? std::string()
                               : " (" + std::to_string(loop_warns_skipped_) + " more such uploads not logged)");
  loop_warned_ms_ = now_ms;
  loop_warns_skipped_ = 0;
}

void DrainHealth::UploadFailed(uint64_t id, uint64_t gen, const std::string& path, const std::string& node,
                               const std::string& error, bool at_origin, int64_t now_ms) {
  Code code = Code::kInternal;  // no known prefix: a node of another version, or a bug
  for (uint32_t c = 1; c <= uint32_t(Code::kPermissionDenied); ++c) {
    if (error.starts_with(std::string(CodeName(Code(c))) + ":")) code = Code(c);
  }
  const std::string reason = Reason(code, error, at_origin);
  if (at_origin) PartyFailed(node, code, reason, error, now_ms);
  FileFailed(id, gen, path, node, code, reason, error, now_ms);
}

void DrainHealth::PublisherOk(int64_t now_ms) { PartyOk("", now_ms); }

void DrainHealth::PublisherFailed(uint64_t id, uint64_t gen, const std::string& path, const Status& s,
                                  bool for_good, int64_t now_ms) {
  const std::string reason = Reason(s.code(), s.message(), /*at_origin=*/true);
  const std::string error = (for_good ? "not retried: " : "") + s.ToString();
  PartyFailed("", s.code(), reason, error, now_ms);
  if (id != 0) FileFailed(id, gen, path, "", s.code(), reason, error, now_ms);
}

void DrainHealth::UploadLost(uint64_t id, uint64_t gen, const std::string& path, const std::string& tmp,
                             const std::string& node, int64_t now_ms) {
  ++lost_uploads_total_;
  Uploads& u = uploads_[id];
  if (u.gen != gen) u = Uploads{.gen = gen, .done = 1};
  ++u.lost;
  const std::string error = "the upload " + tmp + " that " + node +
                            " reported done is not on the checkpoint origin the coordinator publishes to (" +
                            std::to_string(u.lost) + " of " + std::to_string(u.done) +
                            " uploads of this generation lost): uploaded again";
  logger_->debug("checkpoint {}: {}", path, error);
  FileFailed(id, gen, path, node, Code::kNotFound, "upload_lost", error, now_ms);
}

void DrainHealth::Forget(uint64_t id) {
  files_.erase(id);
  uploads_.erase(id);
}

const proto::CkptDrainError* DrainHealth::FileError(uint64_t id) const {
  auto it = files_.find(id);
  return it == files_.end() ? nullptr : &it->second;
}

size_t DrainHealth::looping_files() const {
  size_t n = 0;
  for (const auto& [id, u] : uploads_) n += Looping(u) ? 1 : 0;
  return n;
}

proto::CkptOriginHealth DrainHealth::Origin(int64_t now_ms) const {
  proto::CkptOriginHealth h;
  const proto::CkptDrainError* latest = nullptr;
  for (const auto& [who, p] : parties_) {
    if (!p.failing || now_ms - p.last.last_unix_ms > kStaleAfterMs) continue;
    h.failing = true;
    h.nodes.push_back(who);
    if (h.since_unix_ms == 0 || p.last.since_unix_ms < h.since_unix_ms) h.since_unix_ms = p.last.since_unix_ms;
    if (latest == nullptr || p.last.last_unix_ms > latest->last_unix_ms) latest = &p.last;
  }
  h.failing_files = files_.size();
  h.looping_files = looping_files();
  if (latest == nullptr && h.looping_files > 0) {
    // Every call works, and yet files do not get there.
    for (const auto& [id, e] : files_) {
      if (e.reason != "upload_lost") continue;
      if (h.since_unix_ms == 0 || e.since_unix_ms < h.since_unix_ms) h.since_unix_ms = e.since_unix_ms;
      if (latest == nullptr || e.last_unix_ms > latest->last_unix_ms) latest = &e;
    }
    h.failing = latest != nullptr;
    if (latest != nullptr) h.nodes.push_back(latest->node);
  }
  if (latest != nullptr) {
    h.code = latest->code;
    h.reason = latest->reason;
    h.error = latest->error;
    h.last_unix_ms = latest->last_unix_ms;
  }
  return h;
}

void DrainHealth::PartyOk(const std::string& who, int64_t now_ms) {
  auto it = parties_.find(who);
  if (it == parties_.end()) return;
  if (it->second.failing && now_ms - it->second.last.last_unix_ms <= kStaleAfterMs) {
    logger_->info("checkpoint origin: {} writes to it again, after {:.1f} s of {}", Who(who),
                  double(now_ms - it->second.last.since_unix_ms) / 1000, it->second.last.reason);
  }
  parties_.erase(it);
}

void DrainHealth::PartyFailed(const std::string& who, Code code, const std::string& reason,
                              const std::string& error, int64_t now_ms) {
  Party& p = parties_[who];
  const bool fresh = !p.failing || now_ms - p.last.last_unix_ms > kStaleAfterMs;
  if (fresh || p.last.reason != reason) {
    logger_->warn("checkpoint origin: {} cannot write to it ({}): {}; checkpoints stay on the nodes and are retried",
                  Who(who), reason, error);
  }
  if (fresh) {
    p.failing = true;
    p.last.since_unix_ms = now_ms;
    p.last.failures = 0;
  }
  p.last.code = uint8_t(code);
  p.last.reason = reason;
  p.last.error = error;
  p.last.node = who;
  p.last.last_unix_ms = now_ms;
  ++p.last.failures;
}

void DrainHealth::FileFailed(uint64_t id, uint64_t gen, const std::string& path, const std::string& node,
                             Code code, const std::string& reason, const std::string& error, int64_t now_ms) {
  ++failures_total_;
  proto::CkptDrainError& e = files_[id];
  if (e.since_unix_ms == 0) e = proto::CkptDrainError{.id = id, .since_unix_ms = now_ms};
  e.path = path;
  e.gen = gen;
  e.code = uint8_t(code);
  e.reason = reason;
  e.error = error;
  e.node = node;
  e.last_unix_ms = now_ms;
  ++e.failures;
  auto u = uploads_.find(id);
  e.lost_uploads = u != uploads_.end() && u->second.gen == gen ? u->second.lost : 0;
}

}  // namespace hoard
