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

}  // namespace

// ---- the level users see ("Shown level" in ckpt_table.h) ------------------

void CkptTable::SetUpNodes(const std::set<std::string>& up_nodes) {
  MutexLock lock(&mu_);
  holders_.SetUp(up_nodes);
}

proto::CkptEntry CkptTable::ShownLocked(const CkptNode& n) const {
  proto::CkptEntry e = ns_.ToEntry(n);
  e.level = static_cast<uint8_t>(holders_.ShownLevel(n));
  return e;
}

// ---- reads ----------------------------------------------------------------

Result<CkptEntry> CkptTable::Lookup(const std::string& path) const {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ns_.Resolve(path));
  return ShownLocked(*n);
}

Result<CkptEntry> CkptTable::LookupForRead(const std::string& path) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ns_.Resolve(path));
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
    n = ns_.Find(c.id);
  }
  return ShownLocked(*n);
}

Result<proto::CkptListReply> CkptTable::List(const std::string& path) const {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ns_.Resolve(path));
  if (!n->is_dir) return Status::NotDirectory("checkpoint path " + path + " is a file");
  proto::CkptListReply reply{.dir = ns_.ToEntry(*n)};
  if (const auto* children = ns_.Children(n->id); children != nullptr) {
    for (const auto& [name, id] : *children) reply.children.push_back(ShownLocked(*ns_.Find(id)));
  }
  return reply;
}

// ---- changes --------------------------------------------------------------

Result<CkptEntry> CkptTable::Create(const proto::CkptCreate& req) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ns_.ResolveParent(req.path));
  const bool symlink = !req.target.empty();
  if (Result<const CkptNode*> there = ns_.Resolve(req.path); there.ok()) {
    // A resend finding what its first attempt made (proto/message_types.h):
    // the same kind, owner and target, a file never committed. Its mode may
    // have been narrowed by the parent's set-group-ID rule: not compared.
    const CkptNode* n = *there;
    if (req.retry && n->is_dir == req.is_dir && n->is_symlink == symlink && n->target == req.target &&
        n->uid == req.uid && (n->is_dir || n->gen == 0)) {
      return ns_.ToEntry(*n);
    }
    return Status::AlreadyExists("checkpoint path " + req.path + " exists");
  }
  if (symlink && (req.is_dir || req.target.size() > proto::kMaxCkptTargetBytes ||
                  req.target.find('\0') != std::string::npos)) {
    return Status::InvalidArgument("bad symlink target for checkpoint path " + req.path);
  }
  CkptNode n;
  n.id = ns_.next_id();
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
    origin_.Queue(&r, OriginOp::kSymlink, req.target, req.path);
    CkptOriginQueue::MarkAncestors(ns_, &r, parent->id);
    n.on_origin = true;
  }
  r.put.push_back(n);
  ns_.Touch(&r, parent->id, n.mtime_ns, /*mtime=*/true);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  return ns_.ToEntry(*ns_.Find(n.id));
}

Result<CkptEntry> CkptTable::SetAttr(const proto::CkptSetAttr& req) {
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, ns_.Resolve(req.path));
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
    return ns_.ToEntry(*n);
  }
  HOARD_RETURN_IF_ERROR(SaveLocked(CkptRecord{.put = {changed}}));
  return ns_.ToEntry(*ns_.Find(changed.id));
}

Result<CkptEntry> CkptTable::Commit(const proto::CkptCommit& req) {
  MutexLock lock(&mu_);
  const CkptNode* n = ns_.Find(req.id);
  // An orphan was removed: its bytes have nowhere to go (as after unlink).
  if (n == nullptr || n->orphan) {
    return Status::NotFound("checkpoint file " + std::to_string(req.id) + " does not exist");
  }
  if (n->is_dir) return Status::IsDirectory("checkpoint id " + std::to_string(req.id) + " is a directory");
  if (req.retry && req.gen == n->gen && req.size == n->size && req.checksums == n->checksums &&
      req.writer == n->writer) {
    return ns_.ToEntry(*n);  // a resend whose first attempt was applied (proto/message_types.h)
  }
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
  HOARD_RETURN_IF_ERROR(CkptHolders::CheckReuse(*n, req));
  CkptRecord r;
  CkptNode c = *n;
  origin_.DropUpload(&r, &c);  // an older generation waiting in staging is superseded
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
  c.unconfirmed = CkptHolders::CarryUnconfirmed(*n, c);
  c.committed_writing = req.writing;
  c.committed_unix_ms = NowMs();
  c.drained_unix_ms = 0;
  c.commit_seq = ns_.next_commit_seq();
  c.released = false;
  c.reopened_unix_ms = 0;
  CkptHolders::KeepOldGen(&c, *n, NowMs());
  // Sends the commit did not count: their holders delete them.
  holders_.QueueDiscards(&r, c, req.discard);
  r.put.push_back(c);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  drain_.Committed(c.id, req.writing, req.mount, options_.clock->Now());
  // Retention orders the job's checkpoints by their newest commit: a commit
  // into the checkpoint that had the job's last commit changes nothing of
  // that order, so no checkpoint falls out of the newest keep_last. Only a
  // commit elsewhere scans the job (a scan per commit made a save of 10,000
  // files quadratic: bench/ha_bench.cc).
  const uint64_t job = ns_.JobOf(c.id), checkpoint = ns_.CheckpointOf(c.id);
  uint64_t& last = last_committed_checkpoint_[job];
  const bool same = checkpoint != 0 && last == checkpoint;
  last = checkpoint;
  if (!same) HOARD_RETURN_IF_ERROR(ApplyRetentionLocked(job));
  return ns_.ToEntry(*ns_.Find(c.id));
}

Result<uint64_t> CkptTable::Remove(const proto::CkptRemove& req) {
  MutexLock lock(&mu_);
  Result<const CkptNode*> found = ns_.Resolve(req.path);
  // A resend whose first attempt was applied (proto/message_types.h).
  if (req.retry && found.status().code() == Code::kNotFound) return uint64_t{0};
  HOARD_ASSIGN_OR_RETURN(const CkptNode* n, std::move(found));
  if (n->id == 0) return Status::InvalidArgument("the checkpoint root cannot be removed");
  if (req.is_dir && !n->is_dir) return Status::NotDirectory("checkpoint path " + req.path + " is a file");
  if (!req.is_dir && n->is_dir) return Status::IsDirectory("checkpoint path " + req.path + " is a directory");
  if (n->is_dir && ns_.HasChildren(n->id)) return Status::NotEmpty("checkpoint directory " + req.path + " is not empty");
  CkptRecord r;
  CkptNode c = *n;
  origin_.DropUpload(&r, &c);
  if (c.on_origin) origin_.Queue(&r, c.is_dir ? OriginOp::kRmdir : OriginOp::kUnlink, "", req.path);
  const uint64_t id = c.id, parent = c.parent;
  if (c.is_dir) r.del.push_back(id);
  else RemoveFileLocked(&r, std::move(c));
  ns_.Touch(&r, parent, NowNs(), /*mtime=*/true);
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());  // a marker may have waited for this file
  return id;
}

Result<CkptEntry> CkptTable::Rename(const proto::CkptRename& req) {
  MutexLock lock(&mu_);
  Result<const CkptNode*> from = ns_.Resolve(req.from);
  if (req.retry && from.status().code() == Code::kNotFound) {
    // A resend whose first attempt was applied (proto/message_types.h).
    if (Result<const CkptNode*> to = ns_.Resolve(req.to); to.ok()) return ns_.ToEntry(**to);
  }
  HOARD_ASSIGN_OR_RETURN(const CkptNode* src, std::move(from));
  HOARD_RETURN_IF_ERROR(CkptNamespace::CheckPath(req.to));
  if (src->id == 0 || req.to.empty()) return Status::InvalidArgument("the checkpoint root cannot be renamed");
  HOARD_ASSIGN_OR_RETURN(const CkptNode* parent, ns_.ResolveParent(req.to));
  if (req.from == req.to) return ns_.ToEntry(*src);
  if (src->is_dir && ns_.InSubtree(parent->id, src->id)) {
    return Status::InvalidArgument("cannot move checkpoint directory " + req.from + " into itself (" + req.to + ")");
  }
  const CkptNode* dst = nullptr;
  if (Result<const CkptNode*> existing = ns_.Resolve(req.to); existing.ok()) {
    dst = *existing;
    if (req.noreplace) return Status::AlreadyExists("checkpoint path " + req.to + " exists");
    if (src->is_dir && !dst->is_dir) return Status::NotDirectory("checkpoint path " + req.to + " is a file");
    if (!src->is_dir && dst->is_dir) return Status::IsDirectory("checkpoint path " + req.to + " is a directory");
    if (dst->is_dir && ns_.HasChildren(dst->id)) {
      return Status::NotEmpty("checkpoint directory " + req.to + " is not empty");
    }
  }
  CkptRecord r;
  if (dst != nullptr) {
    CkptNode gone = *dst;
    origin_.DropUpload(&r, &gone);
    // The origin's rename replaces the target itself when the source is
    // there; otherwise the target must go, or the origin would keep showing
    // what the namespace no longer has.
    if (gone.on_origin && !src->on_origin) {
      origin_.Queue(&r, gone.is_dir ? OriginOp::kRmdir : OriginOp::kUnlink, "", req.to);
    }
    if (gone.is_dir) r.del.push_back(gone.id);
    else RemoveFileLocked(&r, std::move(gone));  // an open file outlives its name
  }
  const int64_t now = NowNs();
  ns_.Touch(&r, src->parent, now, /*mtime=*/true);
  ns_.Touch(&r, parent->id, now, /*mtime=*/true);
  CkptNode moved = *src;
  moved.parent = parent->id;
  moved.name = BaseName(req.to);
  moved.ctime_ns = now;
  if (moved.on_origin) {
    origin_.Queue(&r, OriginOp::kRename, req.from, req.to);
    CkptOriginQueue::MarkAncestors(ns_, &r, parent->id);
  }
  *StagePut(&r, moved) = moved;
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  return ns_.ToEntry(*ns_.Find(moved.id));
}

std::string CkptTable::StagingPath(uint64_t id, uint64_t gen, const std::string& node) {
  return CkptOriginQueue::StagingPath(id, gen, node);
}

std::string CkptTable::StagingNode(const std::string& tmp) { return CkptOriginQueue::StagingNode(tmp); }

}  // namespace hoard
