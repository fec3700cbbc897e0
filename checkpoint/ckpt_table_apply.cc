// CkptTable: opening, and applying records (live and on replay: the same code,
// see "Durability" in ckpt_table.h).
#include <algorithm>

#include "checkpoint/ckpt_table.h"

namespace hoard {

CkptTable::CkptTable(Options options)
    : options_(std::move(options)), store_(options_.dir, options_.store), health_(options_.logger) {
  wall_injected_ = static_cast<bool>(options_.now_unix_ms);
  opened_at_ = options_.clock->Now();
  if (!options_.now_unix_ms) {
    options_.now_unix_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  // Unique across restarts too: a node may still echo a list number of the
  // coordinator's previous run, which must not confirm this run's list.
  next_rebuild_seq_ = std::max<uint64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count());
  opened_unix_ms_ = NowMs();
}

Result<std::unique_ptr<CkptTable>> CkptTable::Open(Options options) {
  if (options.dir.empty() || !options.logger) {
    return Status::InvalidArgument("the checkpoint table needs a directory and a logger");
  }
  std::unique_ptr<CkptTable> t(new CkptTable(std::move(options)));
  HOARD_RETURN_IF_ERROR(t->Load());
  return t;
}

Status CkptTable::Load() {
  MutexLock lock(&mu_);
  std::string cut;
  HOARD_ASSIGN_OR_RETURN(CkptStore::Loaded loaded, store_.Open(&cut));
  if (!cut.empty()) options_.logger->warn("checkpoint journal: {}", cut);
  CkptRecord base{.next_id = loaded.snapshot.next_id,
                  .next_commit_seq = loaded.snapshot.next_commit_seq,
                  .next_op_seq = loaded.snapshot.next_op_seq,
                  .put = std::move(loaded.snapshot.nodes),
                  .ops_add = std::move(loaded.snapshot.ops),
                  .next_drop_seq = loaded.snapshot.next_drop_seq,
                  .drops_add = std::move(loaded.snapshot.drops)};
  Apply(base);  // children_ is keyed by parent id, so puts may come in any order
  for (const CkptRecord& r : loaded.records) Apply(r);
  HOARD_RETURN_IF_ERROR(CheckLoadedLocked().Annotate("checkpoint namespace in " + options_.dir +
                                                     " (restore it from a backup)"));
  // New holders that had not confirmed before the restart may never have
  // been told: tell them at their next Work.
  for (const auto& [node, chunks] : unconfirmed_) rebuild_due_.insert(node);
  root_mtime_ns_ = root_ctime_ns_ = NowNs();
  options_.logger->info(
      "checkpoint namespace: {} entries, {} origin operations queued, {} uploads awaiting publish, {} old "
      "generations kept for readers, {} copies to delete on nodes",
      nodes_.size(), ops_.size(), held_markers_.size(), with_old_gens_.size(), drops_.size());
  return Status::Ok();
}

namespace {

Status Damaged(const std::string& what) { return Status::Corruption(what); }

// The committed chunks of a file: what Commit checks before accepting them.
bool ChunksFit(const CkptNode& n) {
  if (n.gen == 0) return true;
  const std::optional<uint64_t> chunks = proto::CkptChunkCount(n.size, n.chunk_size);
  return chunks && n.checksums.size() == *chunks && (n.replicas.empty() || n.replicas.size() == *chunks);
}

}  // namespace

// A snapshot and journal that replay into a namespace no sequence of
// operations could have built are damaged: an entry under a missing parent or
// under a file, a cycle of parents (PathLocked would never end), two entries
// with one name, a name that is not one safe path component, a file whose
// chunks do not fit its size, an origin operation on an unsafe path (the
// publisher would rename outside the origin). Refusing to start is safer
// than serving them. Counters behind the ids they hand out are moved past
// them, so ids are never reused.
Status CkptTable::CheckLoadedLocked() {
  std::set<uint64_t> rooted;  // ids whose parents lead to the root
  for (const auto& [id, n] : nodes_) {
    const std::string what = "entry " + std::to_string(id) + " ('" + n.name + "')";
    if (id == 0) return Damaged("an entry has id 0, the root's");
    if (n.orphan) {
      // Out of the namespace, kept for its old generations only.
      if (n.is_dir || n.parent != 0 || !n.name.empty()) return Damaged(what + " is an orphan inside the namespace");
      next_id_ = std::max(next_id_, id + 1);
      continue;
    }
    if (n.is_symlink && (n.is_dir || n.target.empty() || n.target.size() > proto::kMaxCkptTargetBytes)) {
      return Damaged(what + " is a symlink with a bad target");
    }
    if (n.name.empty() || n.name.find('/') != std::string::npos || !proto::IsSafeCkptPath(n.name)) {
      return Damaged(what + " has an unsafe name");
    }
    if (n.parent != 0) {
      const CkptNode* parent = FindLocked(n.parent);
      if (parent == nullptr || !parent->is_dir) {
        return Damaged(what + " is under " + std::to_string(n.parent) + ", which is not a directory");
      }
    }
    auto siblings = children_.find(n.parent);
    if (siblings == children_.end() || siblings->second.find(n.name) == siblings->second.end() ||
        siblings->second.at(n.name) != id) {
      return Damaged(what + " shares its name with another entry of its directory");
    }
    if (!n.is_dir && !ChunksFit(n)) return Damaged(what + " has chunks that do not fit its size");
    // Walk up to the root or an entry already known to reach it; more steps
    // than there are entries means a cycle.
    std::vector<uint64_t> path;
    for (uint64_t cur = id; cur != 0 && !rooted.contains(cur) && !nodes_.at(cur).orphan; cur = nodes_.at(cur).parent) {
      if (path.size() > nodes_.size()) return Damaged(what + " is in a cycle of parent directories");
      path.push_back(cur);
    }
    rooted.insert(path.begin(), path.end());
    next_id_ = std::max(next_id_, id + 1);
    next_commit_seq_ = std::max(next_commit_seq_, n.commit_seq + 1);
  }
  for (const auto& [seq, op] : ops_) {
    const bool needs_from = op.kind == OriginOp::kPublish || op.kind == OriginOp::kRename;
    const bool bad_target = op.kind == OriginOp::kSymlink &&
                            (op.from.empty() || op.from.size() > proto::kMaxCkptTargetBytes ||
                             op.from.find('\0') != std::string::npos);
    if (op.kind > OriginOp::kSymlink || op.path.empty() || !proto::IsSafeCkptPath(op.path) || bad_target ||
        (needs_from && (op.from.empty() || !proto::IsSafeCkptPath(op.from)))) {
      return Damaged("origin operation " + std::to_string(seq) + " is of an unknown kind or on an unsafe path");
    }
    next_op_seq_ = std::max(next_op_seq_, seq + 1);
  }
  for (const auto& [seq, d] : drops_) {
    if (d.node.empty() || d.node.find('/') != std::string::npos || !proto::IsSafeCkptPath(d.node)) {
      return Damaged("copy deletion " + std::to_string(seq) + " names a bad node");
    }
    next_drop_seq_ = std::max(next_drop_seq_, seq + 1);
  }
  return Status::Ok();
}

// ---- records --------------------------------------------------------------

void CkptTable::IndexLocked(const CkptNode& n, bool add) {
  if (!n.old_gens.empty()) {
    if (add) with_old_gens_.insert(n.id);
    else with_old_gens_.erase(n.id);
  }
  if (n.orphan) return;
  if (n.is_dir) {
    uint32_t& count = subdirs_[n.parent];
    count = add ? count + 1 : (count > 0 ? count - 1 : 0);
    if (count == 0) subdirs_.erase(n.parent);
    return;
  }
  const bool undrained = n.gen != 0 && n.published_gen != n.gen && n.uploaded_gen != n.gen;
  if (undrained) {
    if (add) undrained_.insert({n.commit_seq, n.id});
    else undrained_.erase({n.commit_seq, n.id});
  }
  if (n.uploaded_gen != 0) {
    if (add) held_markers_.insert(n.id);
    else held_markers_.erase(n.id);
  }
  for (const CkptUnconfirmed& u : n.unconfirmed) {
    if (u.gen != n.gen) continue;  // an older generation's: moot
    if (add) {
      unconfirmed_[u.node].insert({n.id, u.gen, u.index});
    } else if (auto it = unconfirmed_.find(u.node); it != unconfirmed_.end()) {
      it->second.erase({n.id, u.gen, u.index});
      if (it->second.empty()) unconfirmed_.erase(it);
    }
  }
}

void CkptTable::ApplyPut(const CkptNode& n) {
  auto it = nodes_.find(n.id);
  if (it != nodes_.end()) {
    IndexLocked(it->second, false);
    const CkptNode& was = it->second;
    if (!was.orphan && (n.orphan || was.parent != n.parent || was.name != n.name)) {
      // Only if the name is still ours: a rename in the same record may have
      // given it to the entry that replaced us.
      auto& siblings = children_[was.parent];
      if (auto s = siblings.find(was.name); s != siblings.end() && s->second == n.id) siblings.erase(s);
    }
    it->second = n;
  } else {
    it = nodes_.emplace(n.id, n).first;
  }
  if (!n.orphan) children_[n.parent][n.name] = n.id;
  IndexLocked(n, true);
  // At P (or out of the namespace) nothing keeps it from the origin any more.
  if (n.orphan || n.level == uint8_t(proto::CkptLevel::kP)) health_.Forget(n.id);
}

void CkptTable::ApplyDel(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  IndexLocked(it->second, false);
  if (!it->second.orphan) {
    auto& siblings = children_[it->second.parent];
    if (auto s = siblings.find(it->second.name); s != siblings.end() && s->second == id) siblings.erase(s);
  }
  children_.erase(id);
  health_.Forget(id);
  leases_.erase(id);
  urgent_.erase(id);
  nodes_.erase(it);
}

void CkptTable::Apply(const CkptRecord& r) {
  next_id_ = std::max(next_id_, r.next_id);
  next_commit_seq_ = std::max(next_commit_seq_, r.next_commit_seq);
  next_op_seq_ = std::max(next_op_seq_, r.next_op_seq);
  for (const CkptNode& n : r.put) ApplyPut(n);
  for (uint64_t id : r.del) ApplyDel(id);
  for (const OriginOp& op : r.ops_add) ops_[op.seq] = op;
  for (uint64_t seq : r.ops_done) ops_.erase(seq);
  next_drop_seq_ = std::max(next_drop_seq_, r.next_drop_seq);
  for (const CkptDrop& d : r.drops_add) {
    drops_[d.seq] = d;
    drops_by_node_[d.node].insert(d.seq);
  }
  for (uint64_t seq : r.drops_done) {
    auto it = drops_.find(seq);
    if (it == drops_.end()) continue;
    auto& mine = drops_by_node_[it->second.node];
    mine.erase(seq);
    if (mine.empty()) drops_by_node_.erase(it->second.node);
    drops_.erase(it);
  }
}

CkptSnapshot CkptTable::SnapshotLocked() const {
  CkptSnapshot s{.next_id = next_id_, .next_commit_seq = next_commit_seq_, .next_op_seq = next_op_seq_,
                 .next_drop_seq = next_drop_seq_};
  for (const auto& [id, n] : nodes_) s.nodes.push_back(n);
  for (const auto& [seq, op] : ops_) s.ops.push_back(op);
  for (const auto& [seq, d] : drops_) s.drops.push_back(d);
  return s;
}

Status CkptTable::SaveLocked(CkptRecord r) {
  r.next_id = next_id_;
  r.next_commit_seq = next_commit_seq_;
  r.next_op_seq = next_op_seq_;
  r.next_drop_seq = next_drop_seq_;
  for (const CkptDrop& d : r.drops_add) r.next_drop_seq = std::max(r.next_drop_seq, d.seq + 1);
  for (const CkptNode& n : r.put) r.next_id = std::max(r.next_id, n.id + 1);
  for (const CkptNode& n : r.put) r.next_commit_seq = std::max(r.next_commit_seq, n.commit_seq + 1);
  for (const OriginOp& op : r.ops_add) r.next_op_seq = std::max(r.next_op_seq, op.seq + 1);
  HOARD_RETURN_IF_ERROR(store_.Append(r).Annotate("save the checkpoint namespace"));
  Apply(r);
  if (store_.SnapshotDue()) {
    // The record is durable; a failed snapshot only means a longer replay.
    if (Status s = store_.WriteSnapshot(SnapshotLocked()); !s.ok()) {
      options_.logger->warn("checkpoint namespace snapshot: {}", s.ToString());
    }
  }
  if (!r.ops_add.empty() && listener_) listener_();
  return Status::Ok();
}

CkptNode* CkptTable::PutLocked(CkptRecord* r, const CkptNode& n) {
  for (CkptNode& p : r->put) {
    if (p.id == n.id) return &p;
  }
  r->put.push_back(n);
  return &r->put.back();
}

}  // namespace hoard
