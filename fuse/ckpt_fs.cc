// CkptFs: construction, the inode table, and the namespace operations
// (lookup, getattr, setattr, readdir, mkdir, rename, unlink, rmdir, xattrs).
// File I/O is in ckpt_fs_io.cc.
#include "fuse/ckpt_fs.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "fuse/errno.h"

namespace hoard::fuse {
namespace {

constexpr const char kStateXattr[] = "user.hoard.state";

void SetTime(struct timespec* ts, int64_t ns) {
  ts->tv_sec = ns / 1'000'000'000;
  ts->tv_nsec = ns % 1'000'000'000;
}

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

}  // namespace

CkptFs::CkptFs(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view)
    : options_(std::move(options)),
      current_view_(std::move(current_view)),
      pool_(*options_.context, 16, std::chrono::milliseconds(500)),
      chunks_(CkptChunks::Options{.node_name = options_.node_name,
                                  .local_ckpt_dir = options_.local_store.empty() ? "" : options_.local_store + "/ckpt",
                                  .peer_timeout = options_.peer_timeout,
                                  .logger = options_.logger,
                                  .open_origin = options_.open_origin},
              &pool_, current_view_),
      committer_(Committer::Options{.node_name = options_.node_name,
                                    .sync_level = options_.sync_level,
                                    .coordinator_timeout = options_.coordinator_timeout,
                                    .peer_timeout = options_.peer_timeout,
                                    .logger = options_.logger},
                 &pool_, options_.coordinator, current_view_),
      write_behind_(options_.write_behind_threads, &committer_, current_view_),
      files_dir_(options_.local_store.empty() ? "" : options_.local_store + "/ckpt/files") {}

CkptFs::~CkptFs() = default;

Result<std::string> CkptFs::PathOf(fuse_ino_t ino) {
  if (ino == kCheckpointsIno) return std::string();
  std::lock_guard lock(mu_);
  auto it = paths_.find(ino - kCkptInoBase);
  if (it == paths_.end()) return Status::NotFound("checkpoint inode not known to this mount");
  return it->second;
}

Result<std::string> CkptFs::ChildPath(fuse_ino_t parent, const char* name) {
  Result<std::string> dir = PathOf(parent);
  if (!dir.ok()) return dir.status();
  std::string path = Join(*dir, name);
  if (!proto::IsSafeCkptPath(path)) return Status::InvalidArgument("bad checkpoint name");
  return path;
}

bool CkptFs::CurrentEntry(fuse_req_t req, fuse_ino_t ino, proto::CkptEntry* out) {
  Result<std::string> path = PathOf(ino);
  if (!path.ok()) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  Result<proto::CkptEntryReply> r = Ask(proto::CkptLookup{.path = *path});
  if (!r.ok() || r->entry.id != ino - kCkptInoBase) {
    fuse_reply_err(req, r.ok() || r.status().code() == Code::kNotFound ? ESTALE : ToErrno(r.status()));
    return false;
  }
  *out = std::move(r->entry);
  return true;
}

void CkptFs::Remember(const proto::CkptEntry& e) {
  if (e.id == 0) return;
  std::lock_guard lock(mu_);
  paths_[e.id] = e.path;
}

void CkptFs::Forget(uint64_t id) {
  std::lock_guard lock(mu_);
  paths_.erase(id);
}

void CkptFs::Renamed(const std::string& from, const std::string& to) {
  // The entry and, for a directory, everything below it.
  std::lock_guard lock(mu_);
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
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = 2;
  st->st_size = 4096;
  st->st_blksize = 4096;
}

void CkptFs::FillStat(const proto::CkptEntry& e, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = CkptIno(e.id);
  st->st_mode = (e.is_dir ? S_IFDIR : S_IFREG) | (e.mode & 07777);
  st->st_nlink = e.is_dir ? 2 : 1;
  uint64_t size = e.size;
  if (!e.is_dir) {
    // This mount's own uncommitted bytes are what its readers see.
    if (std::shared_ptr<LocalFile> f = OpenLocal(e.id)) {
      std::lock_guard lock(f->mu);
      size = f->size;
    }
  }
  st->st_size = static_cast<off_t>(e.is_dir ? 4096 : size);
  st->st_blocks = static_cast<blkcnt_t>((st->st_size + 511) / 512);
  st->st_blksize = 1 << 20;
  SetTime(&st->st_mtim, e.mtime_ns);
  st->st_ctim = st->st_atim = st->st_mtim;
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
  Result<std::string> path = ChildPath(parent, name);
  if (!path.ok()) {
    fuse_reply_err(req, path.status().code() == Code::kNotFound ? ESTALE : ENOENT);
    return;
  }
  Result<proto::CkptEntryReply> r = Ask(proto::CkptLookup{.path = *path});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::GetAttr(fuse_req_t req, fuse_ino_t ino) {
  struct stat st;
  if (ino == kCheckpointsIno) {
    StatRoot(&st);
    fuse_reply_attr(req, &st, options_.attr_timeout);
    return;
  }
  proto::CkptEntry e;
  if (!CurrentEntry(req, ino, &e)) return;
  FillStat(e, &st);
  fuse_reply_attr(req, &st, options_.attr_timeout);
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
  Result<std::string> path = ChildPath(parent, name);
  if (!path.ok()) {
    fuse_reply_err(req, path.status().code() == Code::kNotFound ? ESTALE : EINVAL);
    return;
  }
  Result<proto::CkptEntryReply> r = Ask(proto::CkptCreate{.path = *path, .is_dir = true, .mode = mode & 07777});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  ReplyEntry(req, r->entry);
}

void CkptFs::Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
                    unsigned flags) {
  if (flags & ~unsigned(RENAME_NOREPLACE)) {
    fuse_reply_err(req, EINVAL);  // RENAME_EXCHANGE, RENAME_WHITEOUT
    return;
  }
  Result<std::string> from = ChildPath(parent, name);
  Result<std::string> to = ChildPath(newparent, newname);
  if (!from.ok() || !to.ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  Result<proto::CkptRenameReply> r =
      Ask(proto::CkptRename{.from = *from, .to = *to, .noreplace = (flags & RENAME_NOREPLACE) != 0});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  Renamed(*from, *to);
  fuse_reply_err(req, 0);
}

void CkptFs::Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool is_dir) {
  Result<std::string> path = ChildPath(parent, name);
  if (!path.ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  Result<proto::CkptRemoveReply> r = Ask(proto::CkptRemove{.path = *path, .is_dir = is_dir});
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  // A file open here keeps its local bytes until its last handle closes
  // (its commits then fail: the file is gone, as after unlink on NFS).
  Forget(r->id);
  fuse_reply_err(req, 0);
}

void CkptFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  Result<std::string> path = PathOf(ino);
  if (!path.ok() || ino == kCheckpointsIno) {
    fuse_reply_err(req, ino == kCheckpointsIno ? EPERM : ESTALE);
    return;
  }
  Result<proto::CkptEntryReply> cur = Ask(proto::CkptLookup{.path = *path});
  if (!cur.ok()) {
    fuse_reply_err(req, ToErrno(cur.status()));
    return;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (cur->entry.is_dir) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    if (attr->st_size < 0 || uint64_t(attr->st_size) > MaxFileSize()) {
      fuse_reply_err(req, EFBIG);
      return;
    }
    // Truncation is new bytes: through the local file, committed at once
    // unless a handle has it open (then at its fsync/close).
    const bool was_open = OpenLocal(cur->entry.id) != nullptr;
    Result<std::shared_ptr<LocalFile>> f = OpenForWrite(cur->entry, attr->st_size == 0);
    if (!f.ok()) {
      fuse_reply_err(req, ToErrno(f.status()));
      return;
    }
    {
      std::lock_guard lock((*f)->mu);
      if (::ftruncate((*f)->fd.get(), attr->st_size) != 0) {
        fuse_reply_err(req, errno);
        return;
      }
      (*f)->sent.Truncate(committer_.chunk_size(), std::min<uint64_t>((*f)->size, uint64_t(attr->st_size)));
      (*f)->size = static_cast<uint64_t>(attr->st_size);
      (*f)->dirty = true;
    }
    if (!was_open) {
      if (Status s = CommitIfDirty(**f); !s.ok()) {
        fuse_reply_err(req, ToErrno(s));
        return;
      }
    }
  }
  proto::CkptSetAttr set{.path = *path};
  if (to_set & FUSE_SET_ATTR_MODE) {
    set.set_mode = true;
    set.mode = attr->st_mode & 07777;
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    set.set_mtime = true;
    struct timespec now;
    ::clock_gettime(CLOCK_REALTIME, &now);
    const struct timespec& t = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : attr->st_mtim;
    set.mtime_ns = int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
  }
  Result<proto::CkptEntryReply> r = (set.set_mode || set.set_mtime) ? Ask(set) : Ask(proto::CkptLookup{.path = *path});
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
  if (e.is_dir) {
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
