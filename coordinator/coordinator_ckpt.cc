// Coordinator: the checkpoint pieces (see "Checkpoints" in coordinator.h).
#include "coordinator/coordinator.h"

namespace hoard {

Status Coordinator::OpenCheckpoints() {
  const Options::Checkpoints& o = options_.ckpt;
  HOARD_ASSIGN_OR_RETURN(ckpt_table_, CkptTable::Open({.dir = JoinPath(options_.data_dir, "ckpt"),
                                                       .logger = options_.logger,
                                                       .commit_markers = o.commit_markers,
                                                       .keep_last = o.keep_last,
                                                       .drain_deadline = o.drain_deadline,
                                                       .lease = o.drain_lease,
                                                       .drain_max_bytes_per_s = o.drain_max_bytes_per_s,
                                                       .drain_share = o.drain_share,
                                                       .drain_min_bytes_per_s = o.drain_min_bytes_per_s,
                                                       .clock = options_.clock}));
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

Result<proto::CkptWorkReply> Coordinator::CkptWork(const std::string& node, bool rebuild, uint64_t rebuilt) {
  if (!IsValidName(node)) return Status::InvalidArgument("invalid node name '" + node + "' asking for checkpoint work");
  std::set<std::string> up;
  double fill = 0;  // bytes/s landing in dataset caches: the datasets' share of the origin
  {
    std::lock_guard lock(mu_);
    up = UpNodesLocked();
    const auto now = options_.clock->Now();
    for (const auto& [uid, rate] : fill_rates_) fill += rate.Rate(now);
  }
  return ckpt_table_->Work(node, up, rebuild, fill, rebuilt);
}

void Coordinator::CheckCkptCopies() {
  std::set<std::string> up, lost, leaving;
  {
    std::lock_guard lock(mu_);
    const auto now = options_.clock->Now();
    for (const auto& [name, n] : nodes_) {
      if (n.info.up && n.info.draining) leaving.insert(name);
      if (n.info.up) up.insert(name);
      else if (now - n.last_heard > options_.ckpt.lost_after) lost.insert(name);
    }
  }
  if (options_.ckpt.lost_after.count() <= 0 || lost.empty()) return;
  if (Result<CkptTable::Rereplicated> r = ckpt_table_->Rereplicate(up, lost, leaving); !r.ok()) {
    options_.logger->error("new holders for the checkpoint copies of lost nodes not recorded (tried again): {}",
                           r.status().ToString());
  }
}

}  // namespace hoard
