#include "checkpoint/publisher.h"

#include <algorithm>

namespace hoard {
namespace {

const char* KindName(uint8_t kind) {
  switch (kind) {
    case OriginOp::kPublish: return "publish";
    case OriginOp::kRename: return "rename";
    case OriginOp::kUnlink: return "unlink";
    case OriginOp::kRmdir: return "rmdir";
    case OriginOp::kSymlink: return "symlink";
  }
  return "?";
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

Publisher::Publisher(Options options) : options_(std::move(options)) {
  options_.table->SetOriginOpListener([this] { Notify(); });
  thread_ = std::thread([this] { Run(); });
}

Publisher::~Publisher() { Stop(); }

void Publisher::Notify() {
  MutexLock lock(&mu_);
  pending_ = true;
  idle_ = false;
  cv_.NotifyAll();
}

void Publisher::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  options_.table->SetOriginOpListener(nullptr);
}

bool Publisher::SleepUnlessStopped(std::chrono::milliseconds d) {
  MutexLock lock(&mu_);
  const auto deadline = options_.clock->Now() + d;
  while (!stopping_) {
    if (!options_.clock->WaitUntil(&cv_, &mu_, deadline)) return !stopping_;
  }
  return false;
}

bool Publisher::WaitIdle(std::chrono::milliseconds limit) {
  // Real time, whatever clock the publisher runs on: a bound for a test.
  const auto deadline = std::chrono::steady_clock::now() + limit;
  MutexLock lock(&mu_);
  while (!(idle_ && !pending_)) {
    if (!idle_cv_.WaitUntil(&mu_, deadline)) return idle_ && !pending_;
  }
  return true;
}

Publisher::Attempt Publisher::ApplyOnce(const OriginOp& op, int* io_errors) {
  CkptOrigin& origin = *options_.origin;
  Status s;
  switch (op.kind) {
    case OriginOp::kPublish: {
      Result<OriginEntry> tmp = origin.Stat(op.from);
      // Recorded and logged by the table (DrainHealth::UploadLost).
      if (!tmp.ok() && tmp.status().code() == Code::kNotFound) return Attempt::kUploadLost;
      s = tmp.status();
      if (s.ok() && !Parent(op.path).empty()) s = origin.MakeDirs(Parent(op.path));
      if (s.ok()) s = origin.Rename(op.from, op.path);
      // Gone between the Stat and the Rename: only another publisher could
      // do that, and there is none; treat it as lost all the same.
      if (s.code() == Code::kNotFound) return Attempt::kUploadLost;
      break;
    }
    case OriginOp::kRename:
      if (!Parent(op.path).empty()) s = origin.MakeDirs(Parent(op.path));
      if (s.ok()) s = origin.Rename(op.from, op.path);
      if (s.code() == Code::kNotFound) {
        options_.logger->info("checkpoint origin: rename {} -> {}: the source is not there, nothing to mirror",
                              op.from, op.path);
        return Attempt::kDone;
      }
      break;
    case OriginOp::kUnlink:
      s = origin.Unlink(op.path);
      if (s.code() == Code::kNotFound) return Attempt::kDone;
      break;
    case OriginOp::kRmdir:
      s = origin.Rmdir(op.path);
      if (s.code() == Code::kNotFound) return Attempt::kDone;
      break;
    case OriginOp::kSymlink:
      if (!Parent(op.path).empty()) s = origin.MakeDirs(Parent(op.path));
      if (s.ok()) s = origin.Symlink(op.from, op.path);
      // Made by an earlier attempt whose outcome was not recorded.
      if (s.code() == Code::kAlreadyExists) return Attempt::kDone;
      break;
    default:
      s = Status::Internal("unknown origin operation kind " + std::to_string(op.kind));
  }
  if (s.ok()) return Attempt::kDone;
  // A full, unreachable or refusing origin is the operator's to fix (free
  // space, the network, the export's permissions): nothing is skipped meanwhile.
  // An I/O error, or a stale handle (the origin's tree changed under the
  // call), is tried again a few times before the operation is skipped.
  const std::string reason = DrainHealth::Reason(s.code(), s.message(), /*at_origin=*/true);
  const bool retry = reason == "no_space" || reason == "unreachable" || reason == "permission" ||
                     ((s.code() == Code::kIoError || s.code() == Code::kStale) &&
                      ++*io_errors < options_.io_error_attempts);
  options_.table->OriginOpFailed(op, s, /*for_good=*/!retry);
  if (retry) {
    // Each attempt at debug: the table logs when the origin starts failing.
    options_.logger->debug("checkpoint origin: {} #{} {} (retried): {}", KindName(op.kind), op.seq, op.path,
                           s.ToString());
    return Attempt::kRetry;
  }
  options_.logger->error("checkpoint origin: {} #{} {} failed for good, skipped: {}", KindName(op.kind), op.seq,
                         op.path, s.ToString());
  return Attempt::kFailed;
}

void Publisher::Run() {
  auto backoff = options_.min_backoff;
  int io_errors = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      pending_ = false;
    }
    std::optional<OriginOp> op = options_.table->NextOriginOp();
    if (!op) {
      MutexLock lock(&mu_);
      // Nothing queued as of a look taken after the last Notify.
      if (!pending_) {
        idle_ = true;
        idle_cv_.NotifyAll();
      }
      // The timeout is a backstop only; Notify wakes us when work is queued.
      const auto deadline = options_.clock->Now() + std::chrono::seconds(1);
      while (!stopping_ && !pending_) {
        if (!options_.clock->WaitUntil(&cv_, &mu_, deadline)) break;
      }
      continue;
    }
    {
      MutexLock lock(&mu_);
      idle_ = false;
    }
    const Attempt a = ApplyOnce(*op, &io_errors);
    if (a == Attempt::kRetry) {
      if (!SleepUnlessStopped(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    const auto outcome = a == Attempt::kDone         ? CkptTable::OpOutcome::kDone
                         : a == Attempt::kUploadLost ? CkptTable::OpOutcome::kUploadLost
                                                     : CkptTable::OpOutcome::kFailed;
    if (Status s = options_.table->OriginOpDone(op->seq, outcome); !s.ok()) {
      // The operation is applied but still queued: it is applied again
      // (idempotently) after the backoff.
      options_.logger->error("checkpoint origin: cannot record {} #{} as done: {}", KindName(op->kind), op->seq,
                             s.ToString());
      if (!SleepUnlessStopped(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    if (a == Attempt::kDone) {
      options_.logger->debug("checkpoint origin: {} #{} {}{}{}", KindName(op->kind), op->seq, op->from,
                             op->from.empty() ? "" : " -> ", op->path);
    }
    backoff = options_.min_backoff;
    io_errors = 0;
  }
}

}  // namespace hoard
