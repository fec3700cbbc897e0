// CkptTable: the namespace operations. Opening and applying records are in
// ckpt_table_apply.cc; drain, publish bookkeeping, retention and status in
// ckpt_drain.cc.
#include "checkpoint/ckpt_table.h"

#include <sys/stat.h>

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

// The root's attributes: root's, 1777 (see the top of ckpt_table.h).
const CkptNode& Root() {
  static const CkptNode kRoot = [] {
    CkptNode root;
    root.is_dir = true;
    root.mode = 01777;
    return root;
  }();
  return kRoot;
}

}  // namespace

// ---- lookups --------------------------------------------------------------

const CkptNode* CkptTable::FindLocked(uint64_t id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

Result<const CkptNode*> CkptTable::ResolveLocked(const std::string& path) const {
  HOARD_RETURN_IF_ERROR(CheckPath(path));
  const CkptNode* cur = &Root();
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

uint32_t CkptTable::NlinkLocked(const CkptNode& n) const {
  if (!n.is_dir) return 1;
  auto it = subdirs_.find(n.id);
  return 2 + (it == subdirs_.end() ? 0 : it->second);
}

CkptEntry CkptTable::ToEntryLocked(const CkptNode& n) const {
  CkptEntry e = n;  // the wire part; the path is computed, never stored
  e.path = PathLocked(n.id);
  e.nlink = NlinkLocked(n);
  if (n.id == 0) {
    e.mtime_ns = root_mtime_ns_;
    e.ctime_ns = e.atime_ns = root_ctime_ns_;
  }
  return e;
}

void CkptTable::TouchLocked(CkptRecord* r, uint64_t id, int64_t now_ns, bool mtime) {
  if (id == 0) {
    root_ctime_ns_ = now_ns;
    if (mtime) root_mtime_ns_ = now_ns;
    return;
  }
  const CkptNode* n = FindLocked(id);
  if (n == nullptr) return;
  CkptNode* c = PutLocked(r, *n);
  c->ctime_ns = now_ns;
  if (mtime) c->mtime_ns = now_ns;
}

// ---- the level users see ("Shown level" in ckpt_table.h) ------------------

void CkptTable::SetUpNodes(const std::set<std::string>& up_nodes) {
  MutexLock lock(&mu_);
  up_ = up_nodes;
}

proto::CkptLevel CkptTable::ShownLevelLocked(const CkptNode& n) const {
  if (!up_.has_value()) return static_cast<proto::CkptLevel>(n.level);
  return proto::CkptShownLevel(n, [&](uint32_t index, const std::string& holder) {
    mu_.AssertHeld();
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
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(path));
  return ShownLocked(*n);
}

Result<CkptEntry> CkptTable::LookupForRead(const std::string& path) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(path));
  // relatime: a read moves atime only when it is not newer than the last
  // change, or is a day old; so reading a file again and again costs one
  // journal record, not one per open.
  const int64_t now = NowNs();
  const int64_t atime = n->atime_ns != 0 ? n->atime_ns : n->mtime_ns;
  const bool due = atime <= n->mtime_ns || atime <= n->ctime_ns || now - atime > int64_t(86400) * 1'000'000'000;
  if (n->id != 0 && !n->is_dir && due) {
    CkptNode c = *n;
    // Past the last change even if the writer's clock runs ahead of ours:
    // else every open would be due again, each a journal record.
    c.atime_ns = std::max({now, n->mtime_ns + 1, n->ctime_ns + 1});
    // A journal that cannot be written must not fail the open: the atime is
    // only late.
    if (Status s = SaveLocked(CkptRecord{.put = {c}}); !s.ok()) {
      options_.logger->warn("checkpoint atime of {} not recorded: {}", path, s.ToString());
    }
    n = FindLocked(c.id);
  }
  return ShownLocked(*n);
}

Result<proto::CkptListReply> CkptTable::List(const std::string& path) const {
  MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ResolveParentLocked(req.path));
  if (ResolveLocked(req.path).ok()) return Status::AlreadyExists("checkpoint path " + req.path + " exists");
  const bool symlink = !req.target.empty();
  if (symlink && (req.is_dir || req.target.size() > proto::kMaxCkptTargetBytes ||
                  req.target.find('\0') != std::string::npos)) {
    return Status::InvalidArgument("bad symlink target for checkpoint path " + req.path);
  }
  CkptNode n;
  n.id = next_id_;
  n.parent = parent->id;
  n.name = BaseName(req.path);
  n.is_dir = req.is_dir;
  n.is_symlink = symlink;
  n.target = req.target;
  n.mode = symlink ? 0777 : req.mode & 07777;
  n.uid = req.uid;
  n.gid = req.gid;
  // A set-group-ID directory gives what is created in it its group, and its
  // subdirectories the bit (System V's rule, Linux's).
  if ((parent->mode & S_ISGID) != 0 && !symlink) {
    n.gid = parent->gid;
    if (n.is_dir) n.mode |= S_ISGID;
  }
  n.mtime_ns = n.atime_ns = n.ctime_ns = NowNs();
  CkptRecord r;
  if (symlink) {
    // A symlink is on the origin at once, like a published file: a restore
    // from the origin alone must find it.
    QueueOriginOpLocked(&r, OriginOp::kSymlink, req.target, req.path);
    MarkAncestorsOnOriginLocked(&r, parent->id);
    n.on_origin = true;
  }
  r.put.push_back(n);
  TouchLocked(&r, parent->id, n.mtime_ns, /*mtime=*/true);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  return ToEntryLocked(nodes_.at(n.id));
}

Result<CkptEntry> CkptTable::SetAttr(const proto::CkptSetAttr& req) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(req.path));
  if (req.id != 0 && n->id != req.id) {
    return Status::NotFound("checkpoint path " + req.path + " names another entry than " + std::to_string(req.id) +
                            " now (renamed over or removed)");
  }
  if (n->id == 0) return Status::InvalidArgument("the checkpoint root's attributes are fixed");
  CkptNode changed = *n;
  if (req.set_mode) changed.mode = n->is_symlink ? 0777 : req.mode & 07777;
  if (req.set_mtime) changed.mtime_ns = req.mtime_ns;
  if (req.set_atime) changed.atime_ns = req.atime_ns;
  if (req.set_uid) changed.uid = req.uid;
  if (req.set_gid) changed.gid = req.gid;
  const bool changes = req.set_mode || req.set_mtime || req.set_atime || req.set_uid || req.set_gid;
  if (changes) changed.ctime_ns = NowNs();
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
  if (!changes && changed.released == n->released && changed.reopened_unix_ms == n->reopened_unix_ms) {
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
  MutexLock lock(&mu_);
  const CkptNode* n = FindLocked(req.id);
  // An orphan was removed: its bytes have nowhere to go (as after unlink).
  if (n == nullptr || n->orphan) {
    return Status::NotFound("checkpoint file " + std::to_string(req.id) + " does not exist");
  }
  if (n->is_dir) return Status::IsDirectory("checkpoint id " + std::to_string(req.id) + " is a directory");
  if (req.gen <= n->gen) {
    return Status::Stale("checkpoint file " + std::to_string(req.id) + " is at generation " + std::to_string(n->gen) +
                         ", not below " + std::to_string(req.gen));
  }
  const std::optional<uint64_t> count = proto::CkptChunkCount(req.size, req.chunk_size);
  const uint64_t chunks = count.value_or(0);
  if (!count || req.checksums.size() != chunks || (!req.replicas.empty() && req.replicas.size() != chunks) ||
      (!req.chunk_gens.empty() && req.chunk_gens.size() != chunks) ||
      req.replicas_wanted > proto::kMaxCkptReplicas || req.writer.empty() || n->is_symlink ||
      (req.level != uint8_t(proto::CkptLevel::kL) && req.level != uint8_t(proto::CkptLevel::kR))) {
    return Status::InvalidArgument("malformed commit of checkpoint file " + std::to_string(req.id));
  }
  HOARD_RETURN_IF_ERROR(CheckReuseLocked(*n, req));
  CkptRecord r;
  CkptNode c = *n;
  DropUploadLocked(&r, &c);  // an older generation waiting in staging is superseded
  c.gen = req.gen;
  c.size = req.size;
  c.mtime_ns = req.mtime_ns;
  c.ctime_ns = req.ctime_ns != 0 ? req.ctime_ns : NowNs();
  c.chunk_gens = req.chunk_gens;
  if (std::all_of(c.chunk_gens.begin(), c.chunk_gens.end(), [&](uint64_t g) { return g == req.gen; })) {
    c.chunk_gens.clear();  // every chunk new: the short form
  }
  if (req.mode != 0) c.mode = req.mode & 07777;
  c.level = req.level;
  c.chunk_size = req.chunk_size;
  c.checksums = req.checksums;
  c.writer = req.writer;
  c.replicas = req.replicas;
  c.replicas.resize(chunks);
  c.replicas_wanted = req.replicas_wanted;
  // A reused chunk keeps its holders as they were: one that re-replication
  // gave and that has not confirmed its copy yet still does not count.
  c.unconfirmed.clear();
  for (const CkptUnconfirmed& u : n->unconfirmed) {
    if (u.gen != n->gen || u.index >= c.checksums.size() || proto::CkptChunkGen(c, u.index) == c.gen) continue;
    const auto& holders = c.replicas[u.index];
    if (std::find(holders.begin(), holders.end(), u.node) != holders.end()) {
      c.unconfirmed.push_back({.gen = c.gen, .index = u.index, .node = u.node});
    }
  }
  c.committed_writing = req.writing;
  c.committed_unix_ms = NowMs();
  c.drained_unix_ms = 0;
  c.commit_seq = next_commit_seq_;
  c.released = false;
  c.reopened_unix_ms = 0;
  KeepOldGenLocked(&c, *n);
  // Sends the commit did not count: their holders delete them (a send of
  // the same bytes the commit did count is the same file: kept).
  std::set<std::tuple<std::string, uint32_t, uint64_t>> queued;
  for (const proto::CkptReplicaRef& d : req.discard) {
    if (d.id != c.id || d.gen != c.gen || d.node.empty() || !proto::IsSafeCkptPath(d.node) ||
        d.node.find('/') != std::string::npos) {
      continue;
    }
    const bool counted = d.index < c.checksums.size() && proto::CkptChunkGen(c, d.index) == c.gen &&
                         c.checksums[d.index] == d.checksum &&
                         std::find(c.replicas[d.index].begin(), c.replicas[d.index].end(), d.node) !=
                             c.replicas[d.index].end();
    if (counted || !queued.insert({d.node, d.index, d.checksum}).second) continue;
    const uint64_t seq = r.drops_add.empty() ? next_drop_seq_ : r.drops_add.back().seq + 1;
    r.drops_add.push_back(CkptDrop{.seq = seq, .node = d.node, .id = c.id, .gen = c.gen, .index = d.index,
                                   .checksum = d.checksum});
  }
  r.put.push_back(c);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  if (req.writing) {
    writing_commits_[c.id] = {.mount = req.mount, .expiry = options_.clock->Now() + options_.writing_hold};
  } else {
    writing_commits_.erase(c.id);
  }
  leases_.erase(c.id);
  HOARD_RETURN_IF_ERROR(ApplyRetentionLocked(JobOfLocked(c.id)));
  return ToEntryLocked(nodes_.at(c.id));
}

Result<uint64_t> CkptTable::Remove(const proto::CkptRemove& req) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ResolveLocked(req.path));
  if (n->id == 0) return Status::InvalidArgument("the checkpoint root cannot be removed");
  if (req.is_dir && !n->is_dir) return Status::NotDirectory("checkpoint path " + req.path + " is a file");
  if (!req.is_dir && n->is_dir) return Status::IsDirectory("checkpoint path " + req.path + " is a directory");
  if (n->is_dir && HasChildrenLocked(n->id)) return Status::NotEmpty("checkpoint directory " + req.path + " is not empty");
  CkptRecord r;
  CkptNode c = *n;
  DropUploadLocked(&r, &c);
  if (c.on_origin) QueueOriginOpLocked(&r, c.is_dir ? OriginOp::kRmdir : OriginOp::kUnlink, "", req.path);
  const uint64_t id = c.id, parent = c.parent;
  if (c.is_dir) r.del.push_back(id);
  else RemoveFileLocked(&r, std::move(c));
  TouchLocked(&r, parent, NowNs(), /*mtime=*/true);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());  // a marker may have waited for this file
  return id;
}

Result<CkptEntry> CkptTable::Rename(const proto::CkptRename& req) {
  MutexLock lock(&mu_);
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
    if (gone.is_dir) r.del.push_back(gone.id);
    else RemoveFileLocked(&r, std::move(gone));  // an open file outlives its name
  }
  const int64_t now = NowNs();
  TouchLocked(&r, src->parent, now, /*mtime=*/true);
  TouchLocked(&r, parent->id, now, /*mtime=*/true);
  CkptNode moved = *src;
  moved.parent = parent->id;
  moved.name = BaseName(req.to);
  moved.ctime_ns = now;
  if (moved.on_origin) {
    QueueOriginOpLocked(&r, OriginOp::kRename, req.from, req.to);
    MarkAncestorsOnOriginLocked(&r, parent->id);
  }
  *PutLocked(&r, moved) = moved;
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
