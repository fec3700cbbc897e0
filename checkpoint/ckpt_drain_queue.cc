#include "checkpoint/ckpt_drain_queue.h"

#include <algorithm>

namespace hoard {

std::optional<std::string> CkptDrainQueue::Drainer(const CkptNode& n, const std::set<std::string>& up) {
  if (!n.writer.empty() && up.contains(n.writer)) return n.writer;
  for (const auto& holders : n.replicas) {
    for (const std::string& h : holders) {
      if (up.contains(h)) return h;
    }
  }
  return std::nullopt;
}

bool CkptDrainQueue::Writing(const CkptNode& n, std::chrono::steady_clock::time_point now) const {
  // Until the mounts have reported after a restart, a file committed while
  // being written may still be.
  const bool reporting = now - opened_at_ < options_.writing_hold;
  return writing_.contains(n.id) || writing_commits_.contains(n.id) ||
         (reporting && n.committed_writing && n.committed_unix_ms < opened_unix_ms_);
}

std::vector<const CkptNode*> CkptDrainQueue::Take(const CkptNamespace& ns, const std::string& node,
                                                  const std::set<std::string>& up,
                                                  std::chrono::steady_clock::time_point now) {
  std::erase_if(writing_commits_, [&](const auto& kv) { return kv.second.expiry <= now; });
  // The node asks between rounds only (proto::CkptWork): whatever it was
  // given before and did not report, it is not uploading now.
  std::erase_if(leases_, [&](const auto& kv) { return kv.second.node == node; });
  std::vector<const CkptNode*> tasks;
  // Two passes over the undrained files in commit order: flushed ones first.
  for (int pass = 0; pass < 2 && tasks.size() < options_.max_tasks_per_node; ++pass) {
    for (const auto& [seq, id] : undrained_) {
      if (tasks.size() >= options_.max_tasks_per_node) break;
      if (urgent_.contains(id) != (pass == 0)) continue;
      const CkptNode& n = *ns.Find(id);
      if (auto l = leases_.find(id); l != leases_.end() && l->second.gen == n.gen && l->second.expiry > now) continue;
      if (Writing(n, now) || Drainer(n, up) != node) continue;
      leases_[id] = Lease{.gen = n.gen, .node = node, .expiry = now + options_.lease};
      tasks.push_back(&n);
    }
  }
  return tasks;
}

uint64_t CkptDrainQueue::Budget(const CkptNamespace& ns, double fill, int64_t now_ms) const {
  const uint64_t max = options_.drain_max_bytes_per_s;
  const double share = options_.drain_share;
  if (fill <= 0 || share >= 1 || share < 0 || !urgent_.empty() || AnyOverdue(ns, now_ms)) return max;
  const double fair = fill * share / (1 - share);
  const uint64_t budget = std::max<uint64_t>(options_.drain_min_bytes_per_s, static_cast<uint64_t>(fair));
  return max == 0 ? budget : std::min(max, budget);
}

bool CkptDrainQueue::AnyOverdue(const CkptNamespace& ns, int64_t now_ms) const {
  if (undrained_.empty()) return false;
  // undrained_ is in commit order: the first is the oldest.
  const CkptNode& oldest = *ns.Find(undrained_.begin()->second);
  return now_ms - oldest.committed_unix_ms > options_.drain_deadline.count();
}

void CkptDrainQueue::Committed(uint64_t id, bool writing, uint64_t mount, std::chrono::steady_clock::time_point now) {
  if (writing) {
    writing_commits_[id] = {.mount = mount, .expiry = now + options_.writing_hold};
  } else {
    writing_commits_.erase(id);
  }
  leases_.erase(id);
}

void CkptDrainQueue::EndLease(uint64_t id, uint64_t gen) {
  if (auto l = leases_.find(id); l != leases_.end() && l->second.gen == gen) leases_.erase(l);
}

void CkptDrainQueue::SetWriting(std::set<uint64_t> writing, uint64_t mount, const std::set<uint64_t>& mount_writing) {
  writing_ = std::move(writing);
  if (mount == 0) return;
  // A commit that mount made while writing is drainable once it no longer
  // lists the file.
  std::erase_if(writing_commits_,
                [&](const auto& kv) { return kv.second.mount == mount && !mount_writing.contains(kv.first); });
}

void CkptDrainQueue::Index(const CkptNode& n, bool add) {
  if (n.orphan || n.is_dir) return;
  const bool undrained = n.gen != 0 && n.published_gen != n.gen && n.uploaded_gen != n.gen;
  if (!undrained) return;
  if (add) undrained_.insert({n.commit_seq, n.id});
  else undrained_.erase({n.commit_seq, n.id});
}

void CkptDrainQueue::Forget(uint64_t id) {
  leases_.erase(id);
  urgent_.erase(id);
}

}  // namespace hoard
