// CkptFs file I/O: create, open, read, write, flush, fsync, release.
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "store/replica_store.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/mountinfo.h"
#include "checkpoint/ckpt_fs.h"
#include "common/errno.h"
#include "common/proc_files.h"

namespace hoard::fuse {
namespace {

bool Writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

}  // namespace

uint64_t CkptFs::NewHandle(Handle h) {
  MutexLock lock(&mu_);
  const uint64_t fh = next_fh_++;
  // Kept before the kernel hears of it: a successor must know every handle
  // the kernel may name.
  SaveHandle(fh, h);
  handles_[fh] = std::move(h);
  return fh;
}

std::shared_ptr<LocalFile> CkptFs::OpenLocal(uint64_t id) {
  MutexLock lock(&mu_);
  return OpenLocalLocked(id);
}

std::shared_ptr<LocalFile> CkptFs::OpenLocalLocked(uint64_t id) {
  auto it = local_.find(id);
  if (it == local_.end()) return nullptr;
  std::shared_ptr<LocalFile> f = it->second.lock();
  if (f == nullptr) local_.erase(it);
  return f;
}

Result<std::shared_ptr<LocalFile>> CkptFs::OpenForWrite(const proto::CkptEntry& e, bool truncate) {
  if (files_dir_.empty()) return Status::InvalidArgument("this mount has no node store to write checkpoints to");
  std::shared_ptr<LocalFile> f;
  bool waited = false;
  {
    // One first open of a file at a time: a second one, running beside it,
    // would copy the committed bytes in (or truncate) over what the first
    // one's handle writes meanwhile. It waits and shares the first's file.
    MutexLock lock(&mu_);
    while (opening_.contains(e.id)) {
      if (!waited) first_open_waits_.fetch_add(1);
      waited = true;
      first_open_done_.Wait(&mu_);
    }
    f = OpenLocalLocked(e.id);
    if (f == nullptr) opening_.insert(e.id);
  }
  if (f == nullptr) {
    // Whatever happens below (an error, an exception), the id leaves
    // opening_, or every later open of the file would wait forever.
    struct Done {
      CkptFs* fs;
      uint64_t id;
      std::shared_ptr<LocalFile> opened;
      ~Done() {
        {
          MutexLock lock(&fs->mu_);
          fs->opening_.erase(id);
          if (opened != nullptr) fs->local_[id] = opened;
        }
        fs->first_open_done_.NotifyAll();
      }
    } done{this, e.id, nullptr};
    if (test_before_first_open_) test_before_first_open_(e.id);
    // After a wait the entry may be older than the commits made meanwhile
    // (by the handle we waited for, since closed): copying it in would
    // bring back older bytes.
    proto::CkptEntry now = e;
    if (waited) {
      Result<proto::CkptEntryReply> cur = Ask(proto::CkptLookup{.path = e.path});
      if (!cur.ok()) return cur.status();
      if (cur->entry.id != e.id) return Status::NotFound(e.path + " was replaced while it was being opened");
      now = std::move(cur->entry);
    }
    Result<std::shared_ptr<LocalFile>> opened = OpenFirst(now, truncate);
    if (opened.ok()) done.opened = *opened;
    if (opened.ok()) WakeSession();  // a file open for writing: not drained meanwhile
    return opened;
  }
  if (truncate) {
    MutexLock lock(&f->mu);
    f->WillChange();
    if (::ftruncate(f->fd.get(), 0) != 0) return Status::FromErrno(errno, "truncate " + f->path);
    f->sent.Truncate(committer_.chunk_size(), 0);
    f->size = 0;
    ClearSyncFailed(*f);
  }
  return f;
}

Result<std::shared_ptr<LocalFile>> CkptFs::OpenFirst(const proto::CkptEntry& e, bool truncate) {
  if (e.gen > 0) {
    // Retention may release (or have released) a committed file once it is
    // P: its copies would then be evicted, and with them the chunks sent
    // ahead for our commit. The coordinator keeps it until that commit.
    Result<proto::CkptEntryReply> kept = Ask(proto::CkptSetAttr{.path = e.path, .reopen = true});
    if (!kept.ok()) return kept.status().Annotate("reopen checkpoint file " + e.path + " for writing");
  }
  Result<std::shared_ptr<LocalFile>> opened = OpenLocalFile(files_dir_, e.id, truncate);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<LocalFile> f = *opened;
  // No other thread sees `f` before OpenForWrite publishes it: the lock is
  // never contended, and lets the analysis check the fields set below.
  MutexLock file_lock(&f->mu);
  // Written from now on: no longer the generation a stamp would say.
  ReplicaStore::ClearGeneration(f->fd.get());
  f->gen = e.gen;
  f->sent.Reset(e.gen + 1);
  f->level = static_cast<proto::CkptLevel>(e.level);
  f->mode = e.mode;
  {
    MutexLock lock(&mu_);
    f->sync_failed = sync_failed_.contains(e.id);
  }
  const auto committed = e.gen > 0 ? std::make_shared<const proto::CkptEntry>(e) : nullptr;
  if (truncate) {
    ClearSyncFailed(*f);
    f->dirty = e.size != 0 || e.gen == 0;
    // Emptied: nothing of the committed bytes is left to reuse untouched,
    // but a chunk written again with the same bytes still is.
    f->base.store(committed);
    f->sent.MarkBase();
    f->sent.Truncate(committer_.chunk_size(), 0);
  } else if (e.size > 0) {
    // Writing into committed bytes: the local file must hold them. It does
    // when this node wrote them (its copy checks out chunk by chunk);
    // otherwise they are copied in from their holders first.
    bool same = f->size == e.size && e.chunk_size > 0;
    std::vector<char> buf(same ? e.chunk_size : 0);
    for (uint64_t i = 0; same && i < e.checksums.size(); ++i) {
      const uint64_t len = std::min<uint64_t>(e.chunk_size, e.size - i * e.chunk_size);
      same = PreadAll(f->fd.get(), buf.data(), len, off_t(i * e.chunk_size)).ok() &&
             Checksum64(buf.data(), len) == e.checksums[i];
    }
    if (!same) {
      std::vector<char> chunk(std::max<uint64_t>(e.chunk_size, 1));
      for (uint64_t off = 0; off < e.size; off += chunk.size()) {
        Result<size_t> n = chunks_.Read(e, off, chunk.size(), chunk.data());
        if (!n.ok()) return n.status().Annotate("copy " + e.path + " in for writing");
        HOARD_RETURN_IF_ERROR(PwriteAll(f->fd.get(), chunk.data(), *n, off_t(off)));
      }
      if (::ftruncate(f->fd.get(), off_t(e.size)) != 0) return Status::FromErrno(errno, "truncate " + f->path);
      f->size = e.size;
    }
    // The file now holds exactly the committed generation.
    f->base.store(committed);
    f->sent.MarkBase();
  } else {
    f->dirty = e.gen == 0;
    f->base.store(committed);
    f->sent.MarkBase();
  }
  return f;
}

void CkptFs::ClearSyncFailed(LocalFile& f) {
  f.sync_failed = false;
  MutexLock lock(&mu_);
  sync_failed_.erase(f.id);
}

void CkptFs::Committed(uint64_t id, std::shared_ptr<const proto::CkptEntry> e) {
  MutexLock lock(&mu_);
  for (auto& [fh, h] : handles_) {
    if (h.id == id && h.file == nullptr && h.entry != nullptr && h.entry->gen < e->gen) h.entry = e;
  }
}

Status CkptFs::CommitIfDirty(LocalFile& f, bool writing) {
  std::shared_ptr<const proto::CkptEntry> committed;
  {
    MutexLock lock(&f.mu);
    if (!f.dirty) return Status::Ok();
    if (f.sync_failed) {
      // A retry's fdatasync would succeed (the kernel reports a writeback
      // error once) and commit bytes that may never have reached the disk.
      return Status::IoError("checkpoint file " + std::to_string(f.id) +
                             ": an earlier fdatasync failed, so bytes written to it may be lost; write it again from "
                             "the start (open with O_TRUNC)");
    }
    for (int attempt = 0;; ++attempt) {
      Result<Committer::Done> done = committer_.Commit(f, writing);
      if (!done.ok() && f.sync_failed) {
        MutexLock lock(&mu_);
        sync_failed_.insert(f.id);
      }
      if (done.ok()) {
        f.gen = done->gen;
        f.level = done->level;
        f.dirty = false;
        f.base.store(done->entry);
        f.sent.MarkBase();
        committed = done->entry;
        break;
      }
      if (done.status().code() == Code::kNotFound) {
        // Removed while open: its bytes have nowhere to go, as on any file system.
        f.dirty = false;
        return Status::Ok();
      }
      if (done.status().code() != Code::kStale || attempt > 1) {
        options_.logger->error("checkpoint file {}: commit failed: {}", f.id, done.status().ToString());
        return done.status();
      }
      // Another mount committed a newer generation meanwhile: ours replaces it
      // (last writer wins, as with two NFS clients), sending every chunk (the
      // copies we would have reused may not be that generation's).
      Result<std::string> path = PathOf(CkptIno(f.id));
      if (!path.ok()) return done.status();
      Result<proto::CkptEntryReply> cur = Ask(proto::CkptLookup{.path = *path});
      if (!cur.ok()) return cur.status();
      f.gen = cur->entry.gen;
      f.base.store(nullptr);
      f.sent.Forget();
      f.sent.Reset(f.gen + 1);
    }
  }
  Committed(f.id, committed);
  return Status::Ok();
}

void CkptFs::Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  std::string path;
  if (!ChildPath(req, parent, name, &path)) return;
  if (files_dir_.empty()) {
    fuse_reply_err(req, EROFS);
    return;
  }
  Result<proto::CkptEntryReply> r = CreateAs(req, path, /*is_dir=*/false, mode);
  bool truncate = true;
  if (!r.ok() && r.status().code() == Code::kAlreadyExists && !(fi->flags & O_EXCL)) {
    // Created by someone else since the kernel looked: open it.
    r = Ask(proto::CkptLookup{.path = path});
    truncate = (fi->flags & O_TRUNC) != 0;
  }
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  if (r->entry.is_dir || r->entry.is_symlink) {
    fuse_reply_err(req, r->entry.is_dir ? EISDIR : EEXIST);
    return;
  }
  Result<std::shared_ptr<LocalFile>> f = OpenForWrite(r->entry, truncate);
  if (!f.ok()) {
    fuse_reply_err(req, ToErrno(f.status()));
    return;
  }
  Remember(r->entry);
  fi->fh = NewHandle(Handle{.id = r->entry.id, .file = *f, .entry = nullptr, .writable = true,
                            .opener = ThreadGroupOf(fuse_req_ctx(req)->pid)});
  fi->direct_io = UncachedWrites();  // backed by the local file, as in Open
  fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.ino = CkptIno(r->entry.id);
  FillStat(r->entry, &p.attr);
  p.attr_timeout = p.entry_timeout = options_.attr_timeout;
  if (fuse_reply_create(req, &p, fi) != 0) Release(nullptr, p.ino, fi);
}

void CkptFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  proto::CkptEntry e;
  if (!CurrentEntry(req, ino, &e, /*for_read=*/!Writable(fi->flags))) return;
  if (e.is_dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  Handle h{.id = e.id};
  if (Writable(fi->flags)) {
    if (files_dir_.empty()) {
      fuse_reply_err(req, EROFS);
      return;
    }
    Result<std::shared_ptr<LocalFile>> f = OpenForWrite(e, (fi->flags & O_TRUNC) != 0);
    if (!f.ok()) {
      fuse_reply_err(req, ToErrno(f.status()));
      return;
    }
    h.file = *f;
    h.writable = true;
    h.opener = ThreadGroupOf(fuse_req_ctx(req)->pid);
  } else {
    // A reader on the node that is writing the file sees the writer's bytes.
    h.file = OpenLocal(e.id);
    if (h.file == nullptr) h.copy = OpenWholeCopy(e);
    h.entry = std::make_shared<const proto::CkptEntry>(std::move(e));
  }
  fi->fh = NewHandle(std::move(h));
  // Pages cached by an earlier open may be of an older generation.
  fi->keep_cache = 0;
  // So may the size the kernel cached (for up to attr_timeout) if it looked
  // before another mount's commit: reads would stop there, and an empty file
  // would read empty. Dropped, the attributes are asked again (GETATTR) when
  // the reader stats or reads past the cached size. Only the attributes
  // (offset -1): no page lock, so no deadlock with this OPEN.
  if (fuse_session* se = session_.load()) (void)fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  // Every handle skips the mount's page cache where the kernel still lets
  // it be mapped (Options::uncached_writes): writes so that the bytes are
  // cached once, as the local file's pages; reads so that each handle reads
  // its own generation, never pages another handle's generation left (and
  // a direct read is not cut at a size another generation gave the inode).
  fi->direct_io = UncachedWrites();
  if (fuse_reply_open(req, fi) != 0) Release(nullptr, ino, fi);
}

void CkptFs::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Handle h;
  {
    MutexLock lock(&mu_);
    auto it = handles_.find(fi->fh);
    if (it == handles_.end()) {
      fuse_reply_err(req, EBADF);
      return;
    }
    h = it->second;
  }
  // On the node writing the file every handle reads the writer's bytes, as
  // on a local file system (one file), also one opened before the writer.
  if (h.file == nullptr) h.file = OpenLocal(h.id);
  if (h.file == nullptr && h.copy != nullptr && ReadWholeCopy(req, h, size, off)) return;
  if (h.file != nullptr) {
    std::vector<char> buf(size);
    MutexLock lock(&h.file->mu);
    const ssize_t n = ::pread(h.file->fd.get(), buf.data(), size, off);
    if (n < 0) {
      fuse_reply_err(req, errno);
      return;
    }
    fuse_reply_buf(req, buf.data(), size_t(n));
    return;
  }
  Result<std::vector<CkptChunks::Piece>> pieces = chunks_.ReadPieces(*h.entry, uint64_t(off), size);
  if (!pieces.ok()) {
    options_.logger->error("read checkpoint {} at {}: {}", h.entry->path, off, pieces.status().ToString());
    fuse_reply_err(req, EIO);
    return;
  }
  // Straight from the chunks (kept alive by `pieces` until the reply is
  // written): one writev to the FUSE device copies them once.
  if (pieces->empty()) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  std::vector<iovec> iov;
  iov.reserve(pieces->size());
  for (const CkptChunks::Piece& p : *pieces) iov.push_back(iovec{const_cast<char*>(p.data), p.size});
  fuse_reply_iov(req, iov.data(), int(iov.size()));
}

std::shared_ptr<const UniqueFd> CkptFs::OpenWholeCopy(const proto::CkptEntry& e) {
  if (files_dir_.empty() || e.gen == 0 || e.size == 0) return nullptr;
  UniqueFd fd(::open((files_dir_ + "/" + std::to_string(e.id)).c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || uint64_t(st.st_size) != e.size ||
      ReplicaStore::StampedGeneration(fd.get()) != std::optional<uint64_t>(e.gen)) {
    return nullptr;
  }
  return std::make_shared<const UniqueFd>(std::move(fd));
}

bool CkptFs::ReadWholeCopy(fuse_req_t req, const Handle& h, size_t size, off_t off) {
  // The stamp is asked at every read: the copy is written in place when this
  // node opens the file for writing again, and loses its stamp before its
  // first byte changes (LocalFile::WillChange). Once it no longer holds the
  // handle's generation, the handle reads through CkptChunks: the replicas,
  // which are never rewritten. (A write beginning on this node between the
  // check and the read below is seen by this read, as handles on the
  // writer's node see the writer's bytes.) The descriptor keeps the copy's
  // bytes even if eviction removes its name meanwhile.
  if (ReplicaStore::StampedGeneration(h.copy->get()) != std::optional<uint64_t>(h.entry->gen)) return false;
  if (off < 0 || uint64_t(off) >= h.entry->size || size == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return true;
  }
  const size_t n = size_t(std::min<uint64_t>(size, h.entry->size - uint64_t(off)));
  // Spliced from the copy's pages to the kernel where libfuse can (its pipe
  // must hold the whole reply: past fs.pipe-max-size, 1 MiB by default, only
  // with CAP_SYS_RESOURCE), else read into memory and written; either way
  // the kernel reads ahead in the copy as in any local file, and no chunk is
  // hashed or copied again here.
  fuse_bufvec v = FUSE_BUFVEC_INIT(n);
  v.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  v.buf[0].fd = h.copy->get();
  v.buf[0].pos = off;
  chunks_.CountLocal(n);
  whole_copy_bytes_ += n;
  fuse_reply_data(req, &v, FUSE_BUF_SPLICE_MOVE);
  return true;
}

void CkptFs::KillSuidOnWrite(fuse_req_t req, fuse_ino_t ino, LocalFile& f) {
  uint32_t mode;
  {
    MutexLock lock(&f.mu);
    mode = f.mode;
  }
  const bool suid = (mode & S_ISUID) != 0, sgid = (mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP);
  if ((!suid && !sgid) || fuse_req_ctx(req)->uid == 0) return;
  const uint32_t cleared = mode & ~uint32_t(S_ISUID | (sgid ? S_ISGID : 0));
  Result<std::string> path = PathOf(ino);
  if (!path.ok()) return;
  Result<proto::CkptEntryReply> r =
      Ask(proto::CkptSetAttr{.path = *path, .id = ino - kCkptInoBase, .set_mode = true, .mode = cleared});
  if (!r.ok()) {
    options_.logger->warn("checkpoint {}: set-user-ID not cleared on a write: {}", *path, r.status().ToString());
    return;
  }
  {
    MutexLock lock(&f.mu);
    f.mode = cleared;
  }
  if (fuse_session* se = session_.load()) (void)fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
}

void CkptFs::Write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off, fuse_file_info* fi) {
  std::shared_ptr<LocalFile> f;
  {
    MutexLock lock(&mu_);
    auto it = handles_.find(fi->fh);
    if (it != handles_.end()) {
      f = it->second.file;
      // Writes through a page-cache mapping carry no owner (0).
      if (fi->lock_owner != 0 && it->second.writable) it->second.writers.insert(fi->lock_owner);
    }
  }
  if (f == nullptr) {
    fuse_reply_err(req, EBADF);
    return;
  }
  if (uint64_t(off) + size > MaxFileSize()) {
    fuse_reply_err(req, EFBIG);  // now, not as an EINVAL at close after all the bytes
    return;
  }
  KillSuidOnWrite(req, ino, *f);
  MutexLock lock(&f->mu);
  f->WillChange();
  if (Status s = PwriteAll(f->fd.get(), data, size, off); !s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  f->size = std::max<uint64_t>(f->size, uint64_t(off) + size);
  write_behind_.Wrote(f, uint64_t(off), size);
  fuse_reply_write(req, size);
}

void CkptFs::Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // A close(2) drops its process's POSIX locks on the file (FUSE leaves that
  // to us: the kernel kept none).
  ReleaseLocks(ino - kCkptInoBase, fi->lock_owner, /*flock=*/false);
  Sync(req, fi, /*closing=*/true);
}

void CkptFs::Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) { Sync(req, fi, /*closing=*/false); }

const std::string& CkptFs::MountDev() {
  std::call_once(dev_once_, [this] {
    if (options_.mountpoint.empty()) return;
    char resolved[PATH_MAX];
    if (::realpath(options_.mountpoint.c_str(), resolved) == nullptr) return;
    if (Result<std::string> dev = MountDevice(resolved); dev.ok()) dev_ = *dev;
  });
  return dev_;
}

bool CkptFs::StillWriting(pid_t pid, fuse_ino_t ino) {
  // Another descriptor of the file open for writing (the one being closed
  // is already out of the table when FLUSH comes), or a shared writable
  // mapping, which outlives the descriptor it was made from.
  return ProcessHasOpen(pid, ProcOpenQuery{.dev = MountDev(), .ino = ino, .writable_only = true,
                                           .shared_writable_maps = true});
}

void CkptFs::Sync(fuse_req_t req, fuse_file_info* fi, bool closing) {
  std::shared_ptr<LocalFile> f;
  fuse_ino_t ino = 0;
  {
    MutexLock lock(&mu_);
    auto it = handles_.find(fi->fh);
    if (it != handles_.end()) {
      const Handle& h = it->second;
      ino = CkptIno(h.id);
      // An fsync(2) asks for the file's durability on any descriptor. A
      // close commits only what its closer wrote through this open file, and
      // only if the closer wrote through it: a forked child's exit (its
      // copy of the descriptor) must not publish its parent's half-written
      // file. A reader's close has nothing to make durable.
      if (!closing) f = h.file;
      else if (h.writable && (h.writers.empty() ? ThreadGroupOf(fuse_req_ctx(req)->pid) == h.opener
                                                : h.writers.contains(fi->lock_owner))) {
        f = h.file;
      }
    }
  }
  // Not its last descriptor of the file, or a mapping remains: that close
  // (or the release after the mapping) commits.
  if (f != nullptr && closing && StillWriting(fuse_req_ctx(req)->pid, ino)) f = nullptr;
  if (f == nullptr) {
    fuse_reply_err(req, 0);
    return;
  }
  Status s = CommitIfDirty(*f, /*writing=*/true);
  fuse_reply_err(req, s.ok() ? 0 : ToErrno(s));
}

void CkptFs::Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Handle h;
  bool last_writer = false, still_writing = false, last_of_id = false;
  {
    MutexLock lock(&mu_);
    auto it = handles_.find(fi->fh);
    if (it != handles_.end()) {
      h = std::move(it->second);
      handles_.erase(it);
      DropHandle(fi->fh);
    }
    // Counted by handle, not by use_count(): the write-behind holds the file
    // for a moment while it sends a chunk.
    last_writer = h.file != nullptr &&
                  std::none_of(handles_.begin(), handles_.end(), [&](const auto& kv) { return kv.second.file == h.file; });
    still_writing = std::any_of(handles_.begin(), handles_.end(),
                                [&](const auto& kv) { return kv.second.id == h.id && kv.second.writable; });
    last_of_id = std::none_of(handles_.begin(), handles_.end(), [&](const auto& kv) { return kv.second.id == h.id; });
  }
  // The last close of an open file drops the flock taken through it, and
  // its OFD locks (see Handle::lockers).
  if (fi->flock_release) ReleaseLocks(ino - kCkptInoBase, fi->lock_owner, /*flock=*/true);
  for (uint64_t owner : h.lockers) ReleaseLocks(ino - kCkptInoBase, owner, /*flock=*/false);
  // close(2) already committed through flush unless a mapping or another
  // descriptor kept the file open; this is the last chance to.
  if (last_writer) {
    (void)CommitIfDirty(*h.file, /*writing=*/false);
    // Opened for writing but never written: the copy still holds the
    // committed generation, and says so again (OpenFirst took its stamp).
    MutexLock lock(&h.file->mu);
    if (!h.file->dirty && h.file->gen > 0) ReplicaStore::StampGeneration(h.file->fd.get(), h.file->gen);
  }
  // Written no more here, or read no more: the coordinator may drain it,
  // and retire the generation our readers held.
  if ((h.writable && !still_writing) || last_of_id) WakeSession();
  if (req != nullptr) fuse_reply_err(req, 0);
}

}  // namespace hoard::fuse
