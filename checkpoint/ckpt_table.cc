// CkptTable: the namespace operations. Opening and applying records are in
// ckpt_table_apply.cc; drain, publish bookkeeping, retention and status in
// ckpt_drain.cc.
#include "checkpoint/ckpt_table.h"

#include <algorithm>

namespace hoard {

using proto::CkptEntry;

namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status CheckPath(const std::string& path) {
  if (!proto::IsSafeCkptPath(path)) return Status::InvalidArgument("bad checkpoint path '" + path + "'");
  return Status::Ok();
}

}  // namespace

// ---- lookups --------------------------------------------------------------

const CkptNode* CkptTable::FindLocked(uint64_t id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

Result<const CkptNode*> CkptTable::ResolveLocked(const std::string& path) const {
  HOARD_RETURN_IF_ERROR(CheckPath(path));
  static const CkptNode kRoot = [] {
    CkptNode root;
    root.is_dir = true;
    root.mode = 0755;
    return root;
  }();
  const CkptNode* cur = &kRoot;
  size_t start = 0;
  while (start < path.size()) {
    if (!cur->is_dir) return Status::NotDirectory("checkpoint path " + path + ": " + cur->name + " is a file");
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    auto dir = children_.find(cur->id);
    const std::string name = path.substr(start, slash - start);
    if (dir == children_.end() || !dir->second.contains(name)) {
      return Status::NotFound("checkpoint path " + path + " does not exist");
    }
    cur = FindLocked(dir->second.at(name));
    start = slash + 1;
  }
  return cur;
}

Result<const CkptNode*> CkptTable::ResolveParentLocked(const std::string& path) const {
  HOARD_RETURN_IF_ERROR(CheckPath(path));
  if (path.empty()) return Status::InvalidArgument("the checkpoint root has no parent");
  const size_t slash = path.rfind('/');
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ResolveLocked(slash == std::string::npos ? "" : path.substr(0, slash)));
  if (!parent->is_dir) return Status::NotDirectory("checkpoint path " + path + ": its parent is a file");
  return parent;
}

std::string CkptTable::PathLocked(uint64_t id) const {
  std::string path;
  for (const CkptNode* n = FindLocked(id); n != nullptr; n = FindLocked(n->parent)) {
    path = path.empty() ? n->name : n->name + "/" + path;
  }
  return path;
}

bool CkptTable::HasChildrenLocked(uint64_t id) const {
  auto it = children_.find(id);
  return it != children_.end() && !it->second.empty();
}

bool CkptTable::InSubtreeLocked(uint64_t id, uint64_t ancestor) const {
  for (const CkptNode* n = FindLocked(id); n != nullptr; n = FindLocked(n->parent)) {
    if (n->id == ancestor) return true;
  }
  return ancestor == 0;
}

uint64_t CkptTable::JobOfLocked(uint64_t id) const {
  const CkptNode* n = FindLocked(id);
  while (n != nullptr && n->parent != 0) n = FindLocked(n->parent);
  return n == nullptr ? 0 : n->id;
}

void CkptTable::ForEachFileLocked(uint64_t id, const std::function<void(const CkptNode&)>& fn) const {
  if (const CkptNode* n = FindLocked(id); n != nullptr && !n->is_dir) {
    fn(*n);
    return;
  }
  auto it = children_.find(id);
  if (it == children_.end()) return;
  for (const auto& [name, child] : it->second) ForEachFileLocked(child, fn);
}

int64_t CkptTable::NowMs() const { return options_.now_unix_ms(); }

CkptEntry CkptTable::ToEntryLocked(const CkptNode& n) const {
  CkptEntry e = n;  // the wire part; the path is computed, never stored
  e.path = PathLocked(n.id);
  return e;
}

// ---- the level users see ("Shown level" in ckpt_table.h) ------------------

void CkptTable::SetUpNodes(const std::set<std::string>& up_nodes) {
  std::lock_guard lock(mu_);
  up_ = up_nodes;
}

proto::CkptLevel CkptTable::ShownLevelLocked(const CkptNode& n) const {
  if (!up_.has_value()) return static_cast<proto::CkptLevel>(n.level);
  return proto::CkptShownLevel(n, [&](uint32_t index, const std::string& holder) {
    if (!up_->contains(holder)) return false;
    auto it = unconfirmed_.find(holder);
    return it == unconfirmed_.end() || !it->second.contains({n.id, n.gen, index});
  });
}

proto::CkptEntry CkptTable::ShownLocked(const CkptNode& n) const {
  proto::CkptEntry e = ToEntryLocked(n);
  e.level = static_cast<uint8_t>(ShownLevelLocked(n));
  return e;
}

// ---- reads ----------------------------------------------------------------

Result<CkptEntry> CkptTable::Lookup(const std::string& path) const {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(path));
  return ShownLocked(*n);
}

Result<proto::CkptListReply> CkptTable::List(const std::string& path) const {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(path));
  if (!n->is_dir) return Status::NotDirectory("checkpoint path " + path + " is a file");
  proto::CkptListReply reply{.dir = ToEntryLocked(*n)};
  if (auto it = children_.find(n->id); it != children_.end()) {
    for (const auto& [name, id] : it->second) reply.children.push_back(ShownLocked(*FindLocked(id)));
  }
  return reply;
}

// ---- changes --------------------------------------------------------------

Result<CkptEntry> CkptTable::Create(const proto::CkptCreate& req) {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ResolveParentLocked(req.path));
  if (ResolveLocked(req.path).ok()) return Status::AlreadyExists("checkpoint path " + req.path + " exists");
  CkptNode n;
  n.id = next_id_;
  n.parent = parent->id;
  n.name = BaseName(req.path);
  n.is_dir = req.is_dir;
  n.mode = req.mode & 07777;
  n.mtime_ns = NowMs() * 1'000'000;
  CkptRecord r{.put = {n}};
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  return ToEntryLocked(nodes_.at(r.put[0].id));
}

Result<CkptEntry> CkptTable::SetAttr(const proto::CkptSetAttr& req) {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(req.path));
  if (n->id == 0) return Status::InvalidArgument("the checkpoint root's attributes are fixed");
  CkptNode changed = *n;
  if (req.set_mode) changed.mode = req.mode & 07777;
  if (req.set_mtime) changed.mtime_ns = req.mtime_ns;
  if (req.reopen && !n->is_dir && n->gen > 0) {
    // Refreshed at most every half hold: a file opened again and again for
    // writing costs a journal record per half hold, not per open.
    const int64_t now = NowMs();
    const int64_t hold = options_.reopen_hold.count();
    if (n->released || n->reopened_unix_ms == 0 || now - n->reopened_unix_ms > hold / 2) {
      changed.released = false;
      changed.reopened_unix_ms = now;
    }
  }
  if (!req.set_mode && !req.set_mtime && changed.released == n->released &&
      changed.reopened_unix_ms == n->reopened_unix_ms) {
    return ToEntryLocked(*n);
  }
  HOARD_RETURN_IF_ERROR(SaveLocked(CkptRecord{.put = {changed}}));
  return ToEntryLocked(nodes_.at(changed.id));
}

void CkptTable::QueueOriginOpLocked(CkptRecord* r, uint8_t kind, std::string from, std::string path, uint64_t id,
                                    uint64_t gen) {
  const uint64_t seq = r->ops_add.empty() ? next_op_seq_ : r->ops_add.back().seq + 1;
  r->ops_add.push_back(OriginOp{.seq = seq, .kind = kind, .from = std::move(from), .path = std::move(path),
                                .id = id, .gen = gen});
}

void CkptTable::MarkAncestorsOnOriginLocked(CkptRecord* r, uint64_t parent) {
  // MakeDirs on the origin creates the whole chain; remember it so an rmdir
  // or rename of any of them later is mirrored.
  for (const CkptNode* a = FindLocked(parent); a != nullptr; a = FindLocked(a->parent)) {
    PutLocked(r, *a)->on_origin = true;
  }
}

void CkptTable::DropUploadLocked(CkptRecord* r, CkptNode* n) {
  if (n->uploaded_gen == 0) return;
  QueueOriginOpLocked(r, OriginOp::kUnlink, "", n->uploaded_tmp);
  n->uploaded_gen = 0;
  n->uploaded_tmp.clear();
}

Result<CkptEntry> CkptTable::Commit(const proto::CkptCommit& req) {
  std::lock_guard lock(mu_);
  const CkptNode* n = FindLocked(req.id);
  if (n == nullptr) return Status::NotFound("checkpoint file " + std::to_string(req.id) + " does not exist");
  if (n->is_dir) return Status::IsDirectory("checkpoint id " + std::to_string(req.id) + " is a directory");
  if (req.gen <= n->gen) {
    return Status::Stale("checkpoint file " + std::to_string(req.id) + " is at generation " + std::to_string(n->gen) +
                         ", not below " + std::to_string(req.gen));
  }
  const std::optional<uint64_t> count = proto::CkptChunkCount(req.size, req.chunk_size);
  const uint64_t chunks = count.value_or(0);
  if (!count || req.checksums.size() != chunks || (!req.replicas.empty() && req.replicas.size() != chunks) ||
      req.replicas_wanted > proto::kMaxCkptReplicas || req.writer.empty() ||
      (req.level != uint8_t(proto::CkptLevel::kL) && req.level != uint8_t(proto::CkptLevel::kR))) {
    return Status::InvalidArgument("malformed commit of checkpoint file " + std::to_string(req.id));
  }
  CkptRecord r;
  CkptNode c = *n;
  DropUploadLocked(&r, &c);  // an older generation waiting in staging is superseded
  c.gen = req.gen;
  c.size = req.size;
  c.mtime_ns = req.mtime_ns;
  if (req.mode != 0) c.mode = req.mode & 07777;
  c.level = req.level;
  c.chunk_size = req.chunk_size;
  c.checksums = req.checksums;
  c.writer = req.writer;
  c.replicas = req.replicas;
  c.replicas.resize(chunks);
  c.replicas_wanted = req.replicas_wanted;
  c.unconfirmed.clear();  // they were the old generation's
  c.committed_unix_ms = NowMs();
  c.drained_unix_ms = 0;
  c.commit_seq = next_commit_seq_;
  c.released = false;
  c.reopened_unix_ms = 0;
  r.put.push_back(c);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  leases_.erase(c.id);
  HOARD_RETURN_IF_ERROR(ApplyRetentionLocked(JobOfLocked(c.id)));
  return ToEntryLocked(nodes_.at(c.id));
}

Result<uint64_t> CkptTable::Remove(const proto::CkptRemove& req) {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(req.path));
  if (n->id == 0) return Status::InvalidArgument("the checkpoint root cannot be removed");
  if (req.is_dir && !n->is_dir) return Status::NotDirectory("checkpoint path " + req.path + " is a file");
  if (!req.is_dir && n->is_dir) return Status::IsDirectory("checkpoint path " + req.path + " is a directory");
  if (n->is_dir && HasChildrenLocked(n->id)) return Status::NotEmpty("checkpoint directory " + req.path + " is not empty");
  CkptRecord r;
  CkptNode c = *n;
  DropUploadLocked(&r, &c);
  if (c.on_origin) QueueOriginOpLocked(&r, c.is_dir ? OriginOp::kRmdir : OriginOp::kUnlink, "", req.path);
  r.del.push_back(c.id);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());  // a marker may have waited for this file
  return c.id;
}

Result<CkptEntry> CkptTable::Rename(const proto::CkptRename& req) {
  std::lock_guard lock(mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* src, ResolveLocked(req.from));
  HOARD_RETURN_IF_ERROR(CheckPath(req.to));
  if (src->id == 0 || req.to.empty()) return Status::InvalidArgument("the checkpoint root cannot be renamed");
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ResolveParentLocked(req.to));
  if (req.from == req.to) return ToEntryLocked(*src);
  if (src->is_dir && InSubtreeLocked(parent->id, src->id)) {
    return Status::InvalidArgument("cannot move checkpoint directory " + req.from + " into itself (" + req.to + ")");
  }
  const CkptNode* dst = nullptr;
  if (Result<const CkptNode*> existing = ResolveLocked(req.to); existing.ok()) {
    dst = *existing;
    if (req.noreplace) return Status::AlreadyExists("checkpoint path " + req.to + " exists");
    if (src->is_dir && !dst->is_dir) return Status::NotDirectory("checkpoint path " + req.to + " is a file");
    if (!src->is_dir && dst->is_dir) return Status::IsDirectory("checkpoint path " + req.to + " is a directory");
    if (dst->is_dir && HasChildrenLocked(dst->id)) {
      return Status::NotEmpty("checkpoint directory " + req.to + " is not empty");
    }
  }
  CkptRecord r;
  if (dst != nullptr) {
    CkptNode gone = *dst;
    DropUploadLocked(&r, &gone);
    // The origin's rename replaces the target itself when the source is
    // there; otherwise the target must go, or the origin would keep showing
    // what the namespace no longer has.
    if (gone.on_origin && !src->on_origin) {
      QueueOriginOpLocked(&r, gone.is_dir ? OriginOp::kRmdir : OriginOp::kUnlink, "", req.to);
    }
    r.del.push_back(gone.id);
  }
  CkptNode moved = *src;
  moved.parent = parent->id;
  moved.name = BaseName(req.to);
  if (moved.on_origin) {
    QueueOriginOpLocked(&r, OriginOp::kRename, req.from, req.to);
    MarkAncestorsOnOriginLocked(&r, parent->id);
  }
  PutLocked(&r, moved);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  return ToEntryLocked(nodes_.at(moved.id));
}

bool CkptTable::IsMarker(const std::string& name) const {
  return std::find(options_.commit_markers.begin(), options_.commit_markers.end(), name) !=
         options_.commit_markers.end();
}

std::string CkptTable::StagingPath(uint64_t id, uint64_t gen, const std::string& node) {
  return std::string(kCkptStagingDir) + "/" + std::to_string(id) + "-" + std::to_string(gen) + "-" + node;
}

}  // namespace hoard
