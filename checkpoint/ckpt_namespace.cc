#include "checkpoint/ckpt_namespace.h"

#include <algorithm>
#include <set>
#include <vector>

namespace hoard {

namespace {

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

Status Damaged(const std::string& what) { return Status::Corruption(what); }

// The committed chunks of a file: what Commit checks before accepting them.
bool ChunksFit(const CkptNode& n) {
  if (n.gen == 0) return true;
  const std::optional<uint64_t> chunks = proto::CkptChunkCount(n.size, n.chunk_size);
  return chunks && n.checksums.size() == *chunks && (n.replicas.empty() || n.replicas.size() == *chunks);
}

}  // namespace

CkptNode* StagePut(CkptRecord* r, const CkptNode& n) {
  for (CkptNode& p : r->put) {
    if (p.id == n.id) return &p;
  }
  r->put.push_back(n);
  return &r->put.back();
}

Status CkptNamespace::CheckPath(const std::string& path) {
  if (!proto::IsSafeCkptPath(path)) return Status::InvalidArgument("bad checkpoint path '" + path + "'");
  return Status::Ok();
}

// ---- lookups --------------------------------------------------------------

const CkptNode* CkptNamespace::Find(uint64_t id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

Result<const CkptNode*> CkptNamespace::Resolve(const std::string& path) const {
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
    cur = Find(dir->second.at(name));
    start = slash + 1;
  }
  return cur;
}

Result<const CkptNode*> CkptNamespace::ResolveParent(const std::string& path) const {
  HOARD_RETURN_IF_ERROR(CheckPath(path));
  if (path.empty()) return Status::InvalidArgument("the checkpoint root has no parent");
  const size_t slash = path.rfind('/');
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, Resolve(slash == std::string::npos ? "" : path.substr(0, slash)));
  if (!parent->is_dir) return Status::NotDirectory("checkpoint path " + path + ": its parent is a file");
  return parent;
}

std::string CkptNamespace::Path(uint64_t id) const {
  std::string path;
  for (const CkptNode* n = Find(id); n != nullptr; n = Find(n->parent)) {
    path = path.empty() ? n->name : n->name + "/" + path;
  }
  return path;
}

bool CkptNamespace::HasChildren(uint64_t id) const {
  auto it = children_.find(id);
  return it != children_.end() && !it->second.empty();
}

const std::map<std::string, uint64_t>* CkptNamespace::Children(uint64_t id) const {
  auto it = children_.find(id);
  return it == children_.end() ? nullptr : &it->second;
}

bool CkptNamespace::InSubtree(uint64_t id, uint64_t ancestor) const {
  for (const CkptNode* n = Find(id); n != nullptr; n = Find(n->parent)) {
    if (n->id == ancestor) return true;
  }
  return ancestor == 0;
}

uint64_t CkptNamespace::JobOf(uint64_t id) const {
  const CkptNode* n = Find(id);
  while (n != nullptr && n->parent != 0) n = Find(n->parent);
  return n == nullptr ? 0 : n->id;
}

uint64_t CkptNamespace::CheckpointOf(uint64_t id) const {
  const CkptNode* n = Find(id);
  while (n != nullptr && n->parent != 0) {
    const CkptNode* parent = Find(n->parent);
    if (parent != nullptr && parent->parent == 0) return n->id;
    n = parent;
  }
  return 0;
}

void CkptNamespace::ForEachFile(uint64_t id, const std::function<void(const CkptNode&)>& fn) const {
  if (const CkptNode* n = Find(id); n != nullptr && !n->is_dir) {
    fn(*n);
    return;
  }
  auto it = children_.find(id);
  if (it == children_.end()) return;
  for (const auto& [name, child] : it->second) ForEachFile(child, fn);
}

uint32_t CkptNamespace::Nlink(const CkptNode& n) const {
  if (!n.is_dir) return 1;
  auto it = subdirs_.find(n.id);
  return 2 + (it == subdirs_.end() ? 0 : it->second);
}

proto::CkptEntry CkptNamespace::ToEntry(const CkptNode& n) const {
  proto::CkptEntry e = n;  // the wire part; the path is computed, never stored
  e.path = Path(n.id);
  e.nlink = Nlink(n);
  if (n.id == 0) {
    e.mtime_ns = root_mtime_ns_;
    e.ctime_ns = e.atime_ns = root_ctime_ns_;
  }
  return e;
}

void CkptNamespace::Touch(CkptRecord* r, uint64_t id, int64_t now_ns, bool mtime) {
  if (id == 0) {
    root_ctime_ns_ = now_ns;
    if (mtime) root_mtime_ns_ = now_ns;
    return;
  }
  const CkptNode* n = Find(id);
  if (n == nullptr) return;
  CkptNode* c = StagePut(r, *n);
  c->ctime_ns = now_ns;
  if (mtime) c->mtime_ns = now_ns;
}

// ---- changes (Apply) ------------------------------------------------------

void CkptNamespace::CountSubdir(const CkptNode& n, bool add) {
  if (n.orphan || !n.is_dir) return;
  uint32_t& count = subdirs_[n.parent];
  count = add ? count + 1 : (count > 0 ? count - 1 : 0);
  if (count == 0) subdirs_.erase(n.parent);
}

void CkptNamespace::Unname(const CkptNode& was) {
  if (was.orphan) return;
  // Only if the name is still ours: a rename in the same record may have
  // given it to the entry that replaced us.
  auto& siblings = children_[was.parent];
  if (auto s = siblings.find(was.name); s != siblings.end() && s->second == was.id) siblings.erase(s);
}

void CkptNamespace::Put(const CkptNode& n) {
  auto it = nodes_.find(n.id);
  if (it != nodes_.end()) {
    const CkptNode& was = it->second;
    CountSubdir(was, false);
    if (n.orphan || was.parent != n.parent || was.name != n.name) Unname(was);
    it->second = n;
  } else {
    nodes_.emplace(n.id, n);
  }
  if (!n.orphan) children_[n.parent][n.name] = n.id;
  CountSubdir(n, true);
}

void CkptNamespace::Del(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  CountSubdir(it->second, false);
  Unname(it->second);
  children_.erase(id);
  nodes_.erase(it);
}

void CkptNamespace::AdvanceCounters(uint64_t next_id, uint64_t next_commit_seq) {
  next_id_ = std::max(next_id_, next_id);
  next_commit_seq_ = std::max(next_commit_seq_, next_commit_seq);
}

// A snapshot and journal that replay into a tree no sequence of operations
// could have built are damaged: an entry under a missing parent or under a
// file, a cycle of parents (Path would never end), two entries with one
// name, a name that is not one safe path component, a file whose chunks do
// not fit its size. Refusing to start is safer than serving them.
Status CkptNamespace::CheckLoaded() {
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
      const CkptNode* parent = Find(n.parent);
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
  return Status::Ok();
}

}  // namespace hoard
