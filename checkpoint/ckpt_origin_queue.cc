#include "checkpoint/ckpt_origin_queue.h"

#include <algorithm>

namespace hoard {

using proto::CkptLevel;

std::optional<OriginOp> CkptOriginQueue::Next() const {
  if (ops_.empty()) return std::nullopt;
  return ops_.begin()->second;
}

const OriginOp* CkptOriginQueue::Find(uint64_t seq) const {
  auto it = ops_.find(seq);
  return it == ops_.end() ? nullptr : &it->second;
}

void CkptOriginQueue::Queue(CkptRecord* r, uint8_t kind, std::string from, std::string path, uint64_t id,
                            uint64_t gen) const {
  const uint64_t seq = r->ops_add.empty() ? next_seq_ : r->ops_add.back().seq + 1;
  r->ops_add.push_back(OriginOp{.seq = seq, .kind = kind, .from = std::move(from), .path = std::move(path),
                                .id = id, .gen = gen});
}

void CkptOriginQueue::MarkAncestors(const CkptNamespace& ns, CkptRecord* r, uint64_t parent) {
  for (const CkptNode* a = ns.Find(parent); a != nullptr; a = ns.Find(a->parent)) {
    StagePut(r, *a)->on_origin = true;
  }
}

void CkptOriginQueue::DropUpload(CkptRecord* r, CkptNode* n) const {
  if (n->uploaded_gen == 0) return;
  Queue(r, OriginOp::kUnlink, "", n->uploaded_tmp);
  n->uploaded_gen = 0;
  n->uploaded_tmp.clear();
}

void CkptOriginQueue::QueuePublish(const CkptNamespace& ns, CkptRecord* r, CkptNode n) const {
  Queue(r, OriginOp::kPublish, n.uploaded_tmp, ns.Path(n.id), n.id, n.uploaded_gen);
  n.published_gen = n.uploaded_gen;
  n.uploaded_gen = 0;
  n.uploaded_tmp.clear();
  n.on_origin = true;
  *StagePut(r, n) = n;
  MarkAncestors(ns, r, n.parent);
}

void CkptOriginQueue::QueueReadyMarkers(const CkptNamespace& ns, CkptRecord* r) const {
  for (uint64_t id : held_) {
    const CkptNode& m = *ns.Find(id);
    if (MarkerReady(ns, m)) QueuePublish(ns, r, m);
  }
}

bool CkptOriginQueue::IsMarker(const std::string& name) const {
  return std::find(markers_.begin(), markers_.end(), name) != markers_.end();
}

bool CkptOriginQueue::MarkerReady(const CkptNamespace& ns, const CkptNode& marker) const {
  bool ready = true;
  ns.ForEachFile(marker.parent, [&](const CkptNode& f) {
    if (f.id == marker.id || IsMarker(f.name) || f.gen == 0 || f.commit_seq > marker.commit_seq) return;
    // Renamed into place on the origin, not only queued: a publish that
    // fails for good must not let the marker follow it.
    if (f.published_gen != f.gen || f.level != uint8_t(CkptLevel::kP)) ready = false;
  });
  return ready;
}

std::string CkptOriginQueue::StagingPath(uint64_t id, uint64_t gen, const std::string& node) {
  return std::string(kCkptStagingDir) + "/" + std::to_string(id) + "-" + std::to_string(gen) + "-" + node;
}

std::string CkptOriginQueue::StagingNode(const std::string& tmp) {
  // ".hoard-staging/<id>-<gen>-<node>": the node is after the second '-'.
  const size_t first = tmp.find('-', tmp.rfind('/') + 1);
  const size_t second = first == std::string::npos ? first : tmp.find('-', first + 1);
  return second == std::string::npos ? std::string() : tmp.substr(second + 1);
}

void CkptOriginQueue::Apply(const CkptRecord& r) {
  next_seq_ = std::max(next_seq_, r.next_op_seq);
  for (const OriginOp& op : r.ops_add) ops_[op.seq] = op;
  for (uint64_t seq : r.ops_done) ops_.erase(seq);
}

void CkptOriginQueue::Index(const CkptNode& n, bool add) {
  if (n.orphan || n.is_dir || n.uploaded_gen == 0) return;
  if (add) held_.insert(n.id);
  else held_.erase(n.id);
}

Status CkptOriginQueue::CheckLoaded() {
  for (const auto& [seq, op] : ops_) {
    const bool needs_from = op.kind == OriginOp::kPublish || op.kind == OriginOp::kRename;
    const bool bad_target = op.kind == OriginOp::kSymlink &&
                            (op.from.empty() || op.from.size() > proto::kMaxCkptTargetBytes ||
                             op.from.find('\0') != std::string::npos);
    if (op.kind > OriginOp::kSymlink || op.path.empty() || !proto::IsSafeCkptPath(op.path) || bad_target ||
        (needs_from && (op.from.empty() || !proto::IsSafeCkptPath(op.from)))) {
      return Status::Corruption("origin operation " + std::to_string(seq) +
                                " is of an unknown kind or on an unsafe path");
    }
    next_seq_ = std::max(next_seq_, seq + 1);
  }
  return Status::Ok();
}

}  // namespace hoard
