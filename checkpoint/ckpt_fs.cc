// CkptFs: construction, the inode table, and the namespace operations
// (lookup, getattr, setattr, readdir, mkdir, mknod, symlink, readlink,
// rename, unlink, rmdir, xattrs). File I/O is in ckpt_fs_io.cc, locks and the
// session in ckpt_fs_locks.cc.
#include "checkpoint/ckpt_fs.h"

#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "common/errno.h"

namespace hoard::fuse {
namespace {

constexpr const char kStateXattr[] = "user.hoard.state";

void SetTime(struct timespec* ts, int64_t ns) {
  ts->tv_sec = ns / 1'000'000'000;
  ts->tv_nsec = ns % 1'000'000'000;
  if (ts->tv_nsec < 0) {  // before 1970
    ts->tv_nsec += 1'000'000'000;
    ts->tv_sec -= 1;
  }
}

int64_t Ns(const struct timespec& ts) { return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec; }

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}


// Whether the caller of `req` is in group `gid` (its primary group or a
// supplementary one).
bool InGroup(fuse_req_t req, gid_t gid) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->gid == gid) return true;
  gid_t groups[256];
  const int n = fuse_req_getgroups(req, 256, groups);
  for (int i = 0; i < std::min(n, 256); ++i) {
    if (groups[i] == gid) return true;
  }
  return false;
}

}  // namespace

CkptFs::CkptFs(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view)
    : options_(std::move(options)),
      mount_id_(LoadOrMakeMountId(options_)),
      current_view_(std::move(current_view)),
      pool_(*options_.context, 16, std::chrono::milliseconds(500)),
      coordinator_(*options_.context, options_.coordinator, {}, std::chrono::milliseconds(500)),
      chunks_(CkptChunks::Options{.node_name = options_.node_name,
                                  .local_ckpt_dir = options_.local_store.empty() ? "" : options_.local_store + "/ckpt",
                                  .peer_timeout = options_.peer_timeout,
                                  .logger = options_.logger,
                                  .open_origin = options_.open_origin},
              &pool_, current_view_),
      committer_(Committer::Options{.node_name = options_.node_name,
                                    .mount = mount_id_,
                                    .sync_level = options_.sync_level,
                                    .coordinator_timeout = options_.coordinator_timeout,
                                    .peer_timeout = options_.peer_timeout,
                                    .logger = options_.logger},
                 &pool_, &coordinator_, current_view_),
      write_behind_(options_.write_behind_threads, &committer_, current_view_),
      files_dir_(options_.local_store.empty() ? "" : options_.local_store + "/ckpt/files"),
      lock_waiter_(options_.clock) {}

CkptFs::~CkptFs() { Stop(); }

Result<std::string> CkptFs::PathOf(fuse_ino_t ino) {
  if (ino == kCheckpointsIno) return std::string();
  MutexLock lock(&mu_);
  auto it = paths_.find(ino - kCkptInoBase);
  if (it == paths_.end()) return Status::NotFound("checkpoint inode not known to this mount");
  return it->second;
}

bool CkptFs::ChildPath(fuse_req_t req, fuse_ino_t parent, const char* name, std::string* out) {
  Result<std::string> dir = PathOf(parent);
  if (!dir.ok()) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  const size_t len = std::strlen(name);
  if (len > proto::kMaxCkptNameBytes || dir->size() + 1 + len > proto::kMaxCkptPathBytes) {
    fuse_reply_err(req, ENAMETOOLONG);
    return false;
  }
  *out = Join(*dir, name);
  if (!proto::IsSafeCkptPath(*out)) {
    fuse_reply_err(req, EINVAL);
    return false;
  }
  return true;
}

std::shared_ptr<const proto::CkptEntry> CkptFs::OpenEntry(uint64_t id) {
  MutexLock lock(&mu_);
  std::shared_ptr<const proto::CkptEntry> newest;
  for (const auto& [fh, h] : handles_) {
    if (h.id == id && h.entry != nullptr && (newest == nullptr || h.entry->gen > newest->gen)) newest = h.entry;
  }
  return newest;
}

Result<proto::CkptEntryReply> CkptFs::CreateAs(fuse_req_t req, const std::string& path, bool is_dir, mode_t mode,
                                               const char* target) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Ask(proto::CkptCreate{
      .path = path, .is_dir = is_dir, .mode = uint32_t(mode & 07777), .uid = ctx->uid, .gid = ctx->gid, .target = target});
}

bool CkptFs::CurrentEntry(fuse_req_t req, fuse_ino_t ino, proto::CkptEntry* out, bool for_read) {
  Result<std::string> path = PathOf(ino);
  if (!path.ok()) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  Result<proto::CkptEntryReply> r = Ask(proto::CkptLookup{.path = *path, .touch_atime = for_read});
  if (!r.ok() || r->entry.id != ino - kCkptInoBase) {
    fuse_reply_err(req, r.ok() || r.status().code() == Code::kNotFound ? ESTALE : ToErrno(r.status()));
    return false;
  }
  *out = std::move(r->entry);
  return true;
}

void CkptFs::Remember(const proto::CkptEntry& e) {
  if (e.id == 0) return;
  MutexLock lock(&mu_);
  paths_[e.id] = e.path;
}

void CkptFs::Forget(uint64_t id) {
  MutexLock lock(&mu_);
  paths_.erase(id);
}

void CkptFs::Renamed(const std::string& from, const std::string& to) {
  // The entry and, for a directory, everything below it.
  MutexLock lock(&mu_);
  for (auto& [id, path] : paths_) {
    if (path == from) {
      path = to;
    } else if (path.size() > from.size() && path.compare(0, from.size(), from) == 0 && path[from.size()] == '/') {
      path = to + path.substr(from.size());
    }
  }
}

void CkptFs::StatRoot(struct stat* st) const {
  std::memset(st, 0, sizeof *st);
  st->st_ino = kCheckpointsIno;
  st->st_mode = S_IFDIR | 01777;
  st->st_nlink = 2;
  st->st_size = 4096;
  st->st_blksize = 4096;
}

void CkptFs::FillStat(const proto::CkptEntry& e, struct stat* st, bool unlinked) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = e.id == 0 ? kCheckpointsIno : CkptIno(e.id);
  const mode_t type = e.is_dir ? S_IFDIR : e.is_symlink ? S_IFLNK : S_IFREG;
  st->st_mode = type | (e.mode & 07777);
  st->st_nlink = unlinked ? 0 : e.nlink != 0 ? e.nlink : (e.is_dir ? 2 : 1);
  st->st_uid = e.uid;
  st->st_gid = e.gid;
  SetTime(&st->st_mtim, e.mtime_ns);
  SetTime(&st->st_ctim, e.ctime_ns != 0 ? e.ctime_ns : e.mtime_ns);
  SetTime(&st->st_atim, e.atime_ns != 0 ? e.atime_ns : e.mtime_ns);
  uint64_t size = e.is_dir ? 4096 : e.is_symlink ? e.target.size() : e.size;
  if (!e.is_dir && !e.is_symlink) {
    // This mount's own uncommitted bytes are what its readers see, with the
    // times their writes gave the local file.
    if (std::shared_ptr<LocalFile> f = OpenLocal(e.id)) {
      MutexLock lock(&f->mu);
      size = f->size;
      struct stat local;
      if (f->dirty && ::fstat(f->fd.get(), &local) == 0) {
        st->st_mtim = local.st_mtim;
        if (Ns(local.st_ctim) > Ns(st->st_ctim)) st->st_ctim = local.st_ctim;
      }
    }
  }
  st->st_size = static_cast<off_t>(size);
  st->st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  st->st_blksize = 1 << 20;
}

void CkptFs::ReplyEntry(fuse_req_t req, const proto::CkptEntry& e) {
  Remember(e);
  fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.ino = CkptIno(e.id);
  FillStat(e, &p.attr);
  p.attr_timeout = options_.attr_timeout;
  p.entry_timeout = options_.attr_timeout;
  fuse_reply_entry(req, &p);
}

void CkptFs::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  Result<proto::CkptEntryReply> r = Ask(proto::CkptLookup{.path = path});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  if (ino == kCheckpointsIno) {
    Result<proto::CkptEntryReply> r = Ask(proto::CkptLookup{.path = ""});
    if (r.ok()) FillStat(r->entry, &st);
    else StatRoot(&st);
    fuse_reply_attr(req, &st, options_.attr_timeout);
    return;
  }
  const uint64_t id = ino - kCkptInoBase;
  std::shared_ptr<const proto::CkptEntry> open;
  if (fi != nullptr) {
    // lseek(SEEK_END) and reads past the cached size ask with the handle:
    // its generation's attributes.
    MutexLock lock(&mu_);
    if (auto it = handles_.find(fi->fh); it != handles_.end() && it->second.file == nullptr) open = it->second.entry;
  }
  Result<std::string> path = PathOf(ino);
  Result<proto::CkptEntryReply> r =
      path.ok() ? Ask(proto::CkptLookup{.path = *path}) : Result<proto::CkptEntryReply>(path.status());
  if (r.ok() && r->entry.id == id) {
    proto::CkptEntry e = std::move(r->entry);
    if (open != nullptr && open->gen != e.gen) {
      e.size = open->size;  // the handle reads its own generation
      e.mtime_ns = open->mtime_ns;
    }
    FillStat(e, &st);
    fuse_reply_attr(req, &st, options_.attr_timeout);
    return;
  }
  if (!r.ok() && r.status().code() != Code::kNotFound) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  // The name is gone (unlinked, or renamed over): an open file outlives it.
  if (open == nullptr) open = OpenEntry(id);
  if (open == nullptr) {
    if (std::shared_ptr<LocalFile> f = OpenLocal(id)) {
      MutexLock lock(&f->mu);
      open = f->base.load();
    }
  }
  if (open == nullptr) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  FillStat(*open, &st, /*unlinked=*/true);
  fuse_reply_attr(req, &st, 0);
}

void CkptFs::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Result<std::string> path = PathOf(ino);
  if (!path.ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  Result<proto::CkptListReply> r = Ask(proto::CkptList{.path = *path});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  // Offsets: 1 ".", 2 "..", 3 + k the k-th child of this listing. A listing
  // that changes between calls may repeat or skip a name, as on NFS.
  std::vector<char> buf(size);
  size_t used = 0;
  auto add = [&](const char* name, const fuse_entry_param& e, off_t next) {
    const size_t room = buf.size() - used;
    const size_t need = plus ? fuse_add_direntry_plus(req, buf.data() + used, room, name, &e, next)
                             : fuse_add_direntry(req, buf.data() + used, room, name, &e.attr, next);
    if (need > room) return false;
    used += need;
    return true;
  };
  fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  e.attr.st_mode = S_IFDIR;
  e.attr.st_ino = ino;
  if (off < 1 && !add(".", e, 1)) goto reply;
  if (off < 2 && !add("..", e, 2)) goto reply;
  for (size_t k = off < 3 ? 0 : size_t(off - 2); k < r->children.size(); ++k) {
    const proto::CkptEntry& c = r->children[k];
    Remember(c);
    std::memset(&e, 0, sizeof e);
    e.ino = CkptIno(c.id);
    FillStat(c, &e.attr);
    e.attr_timeout = e.entry_timeout = options_.attr_timeout;
    const std::string name = c.path.substr(c.path.rfind('/') == std::string::npos ? 0 : c.path.rfind('/') + 1);
    if (!add(name.c_str(), e, off_t(k + 3))) break;
  }
reply:
  fuse_reply_buf(req, buf.data(), used);
}

void CkptFs::MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  Result<proto::CkptEntryReply> r = CreateAs(req, path, /*is_dir=*/true, mode);
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  // Only regular files: a checkpoint tree has no device nodes, fifos or
  // sockets to publish (EPERM, as a file system without them answers).
  if (!S_ISREG(mode)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  if (files_dir_.empty()) {
    fuse_reply_err(req, EROFS);
    return;
  }
  Result<proto::CkptEntryReply> r = CreateAs(req, path, /*is_dir=*/false, mode);
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  const size_t len = std::strlen(target);
  if (len == 0 || len > proto::kMaxCkptTargetBytes) {
    fuse_reply_err(req, len == 0 ? ENOENT : ENAMETOOLONG);
    return;
  }
  Result<proto::CkptEntryReply> r = CreateAs(req, path, /*is_dir=*/false, 0777, target);
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::ReadLink(fuse_req_t req, fuse_ino_t ino) {
  proto::CkptEntry e;
  if (!CurrentEntry(req, ino, &e)) return;
  if (!e.is_symlink) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  fuse_reply_readlink(req, e.target.c_str());
}

void CkptFs::Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
                    unsigned flags) {
  if (flags & ~unsigned(RENAME_NOREPLACE)) {
    fuse_reply_err(req, EINVAL);  // RENAME_EXCHANGE, RENAME_WHITEOUT
    return;
  }
  std::string from, to;
  if (!ChildPath(req, parent, name, &from) || !ChildPath(req, newparent, newname, &to)) return;
  Result<proto::CkptRenameReply> r =
      Ask(proto::CkptRename{.from = from, .to = to, .noreplace = (flags & RENAME_NOREPLACE) != 0});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  Renamed(from, to);
  fuse_reply_err(req, 0);
}

void CkptFs::Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool is_dir) {
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  Result<proto::CkptRemoveReply> r = Ask(proto::CkptRemove{.path = path, .is_dir = is_dir});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  // A file open here keeps its local bytes until its last handle closes
  // (its commits then fail: the file is gone, as after unlink on NFS), and
  // its readers their generation.
  Forget(r->id);
  fuse_reply_err(req, 0);
}

void CkptFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  Result<std::string> path = PathOf(ino);
  if (!path.ok() || ino == kCheckpointsIno) {
    fuse_reply_err(req, ino == kCheckpointsIno ? EPERM : ESTALE);
    return;
  }
  const uint64_t id = ino - kCkptInoBase;
  Result<proto::CkptEntryReply> cur = Ask(proto::CkptLookup{.path = *path});
  if (!cur.ok() && cur.status().code() != Code::kNotFound) {
    fuse_reply_err(req, ToErrno(cur.status()));
    return;
  }
  if (!cur.ok() || cur->entry.id != id) {
    // The name went to another entry (a rename over it) or away: an
    // ftruncate through a descriptor of the old file truncates its local
    // bytes (which commit nowhere, as after an unlink); nothing else of the
    // entry that took its name may change.
    std::shared_ptr<LocalFile> f = OpenLocal(id);
    if (to_set != FUSE_SET_ATTR_SIZE || f == nullptr || attr->st_size < 0) {
      fuse_reply_err(req, ESTALE);
      return;
    }
    struct stat st;
    {
      MutexLock lock(&f->mu);
      f->WillChange();
      if (::ftruncate(f->fd.get(), attr->st_size) != 0) {
        fuse_reply_err(req, errno);
        return;
      }
      f->size = uint64_t(attr->st_size);
    }
    std::shared_ptr<const proto::CkptEntry> base = f->base.load();
    proto::CkptEntry e = base != nullptr ? *base : proto::CkptEntry{.id = id};
    FillStat(e, &st, /*unlinked=*/true);
    fuse_reply_attr(req, &st, 0);
    return;
  }
  const proto::CkptEntry& e = cur->entry;
  // POSIX's rules, checked against the coordinator's attributes (the
  // kernel checked them too, against attributes up to attr_timeout old).
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const bool root = ctx->uid == 0, owner = ctx->uid == e.uid;
  if ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != e.uid && !root) {
    fuse_reply_err(req, EPERM);
    return;
  }
  if ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != e.gid && !root && !(owner && InGroup(req, attr->st_gid))) {
    fuse_reply_err(req, EPERM);
    return;
  }
  if ((to_set & FUSE_SET_ATTR_MODE) && !root && !owner) {
    // Only what the kernel asks when a write, truncate or chown by another
    // user drops set-user-ID/set-group-ID (it sends the new mode then).
    const uint32_t kept = attr->st_mode & 07777, had = e.mode & 07777;
    if ((kept & ~uint32_t(S_ISUID | S_ISGID)) != (had & ~uint32_t(S_ISUID | S_ISGID)) || (kept & ~had) != 0) {
      fuse_reply_err(req, EPERM);
      return;
    }
  }
  std::shared_ptr<LocalFile> open = OpenLocal(e.id);
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (e.is_dir) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    if (attr->st_size < 0 || uint64_t(attr->st_size) > MaxFileSize()) {
      fuse_reply_err(req, EFBIG);
      return;
    }
    // Truncation is new bytes: through the local file, committed at once
    // unless a handle has it open (then at its fsync/close).
    Result<std::shared_ptr<LocalFile>> f = OpenForWrite(e, attr->st_size == 0);
    if (!f.ok()) {
      fuse_reply_err(req, ToErrno(f.status()));
      return;
    }
    {
      MutexLock lock(&(*f)->mu);
      (*f)->WillChange();
      if (::ftruncate((*f)->fd.get(), attr->st_size) != 0) {
        fuse_reply_err(req, errno);
        return;
      }
      (*f)->sent.Truncate(committer_.chunk_size(), std::min<uint64_t>((*f)->size, uint64_t(attr->st_size)));
      (*f)->size = static_cast<uint64_t>(attr->st_size);
    }
    if (open == nullptr) {
      if (Status s = CommitIfDirty(**f, /*writing=*/false); !s.ok()) {
        fuse_reply_err(req, ToErrno(s));
        return;
      }
    } else {
      open = *f;
    }
  }
  proto::CkptSetAttr set{.path = *path, .id = id};
  if (to_set & FUSE_SET_ATTR_MODE) {
    set.set_mode = true;
    set.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    set.set_uid = true;
    set.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    set.set_gid = true;
    set.gid = attr->st_gid;
  }
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    set.set_mtime = true;
    set.mtime_ns = Ns((to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : attr->st_mtim);
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
    set.set_atime = true;
    set.atime_ns = Ns((to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : attr->st_atim);
  }
  if (open != nullptr) {
    MutexLock lock(&open->mu);
    if (set.set_mode) open->mode = set.mode;
    // The next commit carries the local file's mtime: set it there too.
    if (set.set_mtime) {
      struct timespec times[2] = {{0, UTIME_OMIT}, {}};
      SetTime(&times[1], set.mtime_ns);
      (void)::futimens(open->fd.get(), times);
    }
  }
  const bool changes = set.set_mode || set.set_uid || set.set_gid || set.set_mtime || set.set_atime;
  Result<proto::CkptEntryReply> r = changes ? Ask(set) : Ask(proto::CkptLookup{.path = *path});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  struct stat st;
  FillStat(r->entry, &st);
  fuse_reply_attr(req, &st, options_.attr_timeout);
}

void CkptFs::GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (std::strcmp(name, kStateXattr) != 0 || ino == kCheckpointsIno) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  proto::CkptEntry e;
  if (!CurrentEntry(req, ino, &e)) return;
  if (e.is_dir || e.is_symlink) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  // The level of the committed generation; "-" while nothing is committed.
  const std::string value = proto::CkptLevelName(static_cast<proto::CkptLevel>(e.level));
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void CkptFs::ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  const size_t len = sizeof kStateXattr;  // with its NUL, as listxattr wants
  if (ino == kCheckpointsIno) {
    if (size == 0) fuse_reply_xattr(req, 0);
    else fuse_reply_buf(req, nullptr, 0);
  } else if (size == 0) {
    fuse_reply_xattr(req, len);
  } else if (size < len) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, kStateXattr, len);
  }
}

}  // namespace hoard::fuse
