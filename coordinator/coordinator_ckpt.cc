// Coordinator: the checkpoint pieces (see "Checkpoints" in coordinator.h).
#include "coordinator/coordinator.h"

#include <unistd.h>

namespace hoard {

Status Coordinator::OpenCheckpoints() {
  const Options::Checkpoints& o = options_.ckpt;
  // A first start has no locks from before to honour.
  const bool restart = ::access(JoinPath(options_.data_dir, "ckpt/journal.log").c_str(), F_OK) == 0;
  HOARD_ASSIGN_OR_RETURN(ckpt_table_, CkptTable::Open({.dir = JoinPath(options_.data_dir, "ckpt"),
                                                       .logger = options_.logger,
                                                       .commit_markers = o.commit_markers,
                                                       .keep_last = o.keep_last,
                                                       .drain_deadline = o.drain_deadline,
                                                       .lease = o.drain_lease,
                                                       .drain_max_bytes_per_s = o.drain_max_bytes_per_s,
                                                       .drain_share = o.drain_share,
                                                       .drain_min_bytes_per_s = o.drain_min_bytes_per_s,
                                                       .retire_grace = o.retire_grace,
                                                       .store = {.journal = options_.ckpt_journal},
                                                       .clock = options_.clock}));
  CkptTable* table = ckpt_table_.get();
  ckpt_sessions_ = std::make_unique<CkptSessions>(CkptSessions::Options{
      .timeout = o.session_timeout,
      .lock_grace = restart ? o.lock_grace : std::chrono::milliseconds(0),
      .clock = options_.clock,
      .logger = options_.logger,
      .on_change = [table](std::set<proto::CkptHold> holds, std::set<uint64_t> writing, uint64_t mount,
                           const std::set<uint64_t>& mount_writing) {
        table->SetSessions(std::move(holds), std::move(writing), mount, mount_writing);
      }});
  const std::string source = o.origin.empty() ? JoinPath(options_.data_dir, "ckpt-origin") : o.origin;
  if (!o.open_origin) {
    options_.logger->warn("no checkpoint origin opener: checkpoints are kept on the nodes but not published to {}",
                          source);
    return Status::Ok();
  }
  Result<std::unique_ptr<CkptOrigin>> origin = o.open_origin(source);
  if (!origin.ok()) return origin.status().Annotate("open the checkpoint origin " + source);
  ckpt_origin_ = std::move(*origin);
  publisher_ = std::make_unique<Publisher>(
      Publisher::Options{.table = ckpt_table_.get(), .origin = ckpt_origin_.get(), .logger = options_.logger});
  options_.logger->info("checkpoints published to {}", source);
  return Status::Ok();
}

Result<proto::CkptWorkReply> Coordinator::CkptWork(const std::string& node, bool rebuild, uint64_t rebuilt,
                                                   uint64_t dropped) {
  if (!IsValidName(node)) return Status::InvalidArgument("invalid node name '" + node + "' asking for checkpoint work");
  std::set<std::string> up;
  double fill = 0;  // bytes/s landing in dataset caches: the datasets' share of the origin
  {
    MutexLock lock(&mu_);
    up = members_.UpNames();
    fill = progress_.TotalFillRate(options_.clock->Now());
  }
  return ckpt_table_->Work(node, up, rebuild, fill, rebuilt, dropped);
}

proto::CkptOriginHealth Coordinator::CkptOriginHealth() const {
  proto::CkptOriginHealth h = ckpt_table_->OriginHealth();
  if (ckpt_origin_ != nullptr) h.source = ckpt_origin_->source();
  return h;
}

Result<proto::CkptStatusReply> Coordinator::CkptStatus(const proto::CkptStatus& req) const {
  HOARD_ASSIGN_OR_RETURN(proto::CkptStatusReply r, ckpt_table_->GetStatus(req));
  if (ckpt_origin_ != nullptr) r.origin.source = ckpt_origin_->source();
  return r;
}

void Coordinator::CheckCkptCopies() {
  std::set<std::string> up, lost, leaving;
  {
    MutexLock lock(&mu_);
    members_.CkptClasses(options_.clock->Now(), options_.ckpt.lost_after, &up, &lost, &leaving);
  }
  ckpt_sessions_->Expire();
  if (Result<size_t> r = ckpt_table_->CollectGarbage(); !r.ok()) {
    options_.logger->error("old checkpoint generations not retired (tried again): {}", r.status().ToString());
  }
  if (options_.ckpt.lost_after.count() <= 0 || lost.empty()) return;
  if (Result<CkptTable::Rereplicated> r = ckpt_table_->Rereplicate(up, lost, leaving); !r.ok()) {
    options_.logger->error("new holders for the checkpoint copies of lost nodes not recorded (tried again): {}",
                           r.status().ToString());
  }
}

}  // namespace hoard
