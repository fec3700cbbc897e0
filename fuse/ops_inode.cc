// The dataset tree's inode operations (fuse/dataset_fs.h): lookup, getattr, readlink.
#include <cerrno>
#include <cstring>

#include "fuse/dataset_fs.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

void SetTime(struct timespec* ts, int64_t ns) {
  ts->tv_sec = ns / 1'000'000'000;
  ts->tv_nsec = ns % 1'000'000'000;
  if (ts->tv_nsec < 0) {
    ts->tv_nsec += 1'000'000'000;
    ts->tv_sec -= 1;
  }
}

void FillSynthDir(fuse_ino_t ino, nlink_t nlink, int64_t mtime, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = nlink;
  st->st_size = 4096;
  st->st_blksize = 4096;
  st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

// The preferred I/O size we advertise: large enough that stdio and Python
// buffered readers ask for big reads, small enough not to waste memory on
// many small open files.
constexpr blksize_t kBlockSize = 128 * 1024;

}  // namespace

Status DatasetFs::Stat(fuse_ino_t ino, struct stat* st) const {
  if (ino == kRootIno) {
    FillSynthDir(ino, 4, start_time_, st);
    return Status::Ok();
  }
  if (ino == kCheckpointsIno) {
    stat_checkpoints_(st);
    return Status::Ok();
  }
  if (ino == kDatasetsIno) {
    FillSynthDir(ino, 2 + ns_.List()->datasets.size(), start_time_, st);
    return Status::Ok();
  }
  const MountedDataset* ds = ns_.Slot(SlotOf(ino));
  const uint64_t entry = EntryOf(ino);
  if (ds == nullptr || entry >= ds->manifest().entry_count()) {
    return Status::NotFound("inode belongs to a dataset version that is gone");
  }
  const EntryRecord& r = ds->manifest().entry(static_cast<uint32_t>(entry));
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mode = r.mode;
  st->st_uid = r.uid;
  st->st_gid = r.gid;
  SetTime(&st->st_mtim, r.mtime_ns);
  st->st_ctim = st->st_atim = st->st_mtim;
  st->st_blksize = kBlockSize;
  if (r.is_dir()) {
    st->st_nlink = 2 + r.size;  // a directory's `size` is its subdirectory count
    st->st_size = 4096;
    st->st_blocks = 8;
  } else {
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(r.size);
    st->st_blocks = static_cast<blkcnt_t>((r.size + 511) / 512);
  }
  return Status::Ok();
}

void DatasetFs::FillEntry(fuse_ino_t ino, const struct stat& st, fuse_entry_param* e) const {
  std::memset(e, 0, sizeof *e);
  e->ino = ino;
  e->attr = st;
  // Inside a dataset nothing changes for the life of the version.
  const double t = IsDatasetIno(ino) ? options_.dataset_timeout : options_.top_timeout;
  e->attr_timeout = t;
  e->entry_timeout = t;
}

DatasetFs::DatasetFs(Options options, Shared shared)
    : options_(std::move(options)),
      start_time_(options_.start_time),
      ns_(*shared.ns),
      watcher_(*shared.watcher),
      reader_(*shared.reader),
      passthrough_(*shared.passthrough),
      stats_(*shared.stats),
      stat_checkpoints_(std::move(shared.stat_checkpoints)),
      lock_waiter_(*shared.lock_waiter),
      mount_dev_(std::move(shared.mount_dev)) {}

void DatasetFs::RefreshNow() {
  // A lookup of a dataset just added waits for the sync that fetches it.
  if (Status s = watcher_.RefreshForRequest(ClusterWatcher::SyncInProgress::kWait); !s.ok()) {
    options_.logger->debug("refresh: {}", s.ToString());
  }
}

void DatasetFs::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_ino_t child = 0;
  double negative_timeout = 0;
  if (parent == kRootIno) {
    if (std::strcmp(name, "datasets") == 0) child = kDatasetsIno;
    if (std::strcmp(name, "checkpoints") == 0) child = kCheckpointsIno;
  } else if (parent == kDatasetsIno) {
    // A dataset may be added any moment: never cache its absence.
    const MountedDataset* ds = ns_.Find(name);
    if (ds == nullptr) {
      RefreshNow();
      ds = ns_.Find(name);
    }
    if (ds != nullptr) child = MakeIno(ds->slot, 0);
  } else {
    const MountedDataset* ds = ns_.Slot(SlotOf(parent));
    const uint64_t entry = EntryOf(parent);
    if (ds == nullptr || entry >= ds->manifest().entry_count()) {
      fuse_reply_err(req, ESTALE);
      return;
    }
    std::optional<uint32_t> c = ds->manifest().Lookup(static_cast<uint32_t>(entry), name);
    if (c) child = MakeIno(ds->slot, *c);
    negative_timeout = options_.dataset_timeout;  // the version is immutable
  }
  fuse_entry_param e;
  if (child == 0) {
    // A zero inode with a timeout makes the kernel cache the miss.
    std::memset(&e, 0, sizeof e);
    e.entry_timeout = negative_timeout;
    if (negative_timeout > 0) fuse_reply_entry(req, &e);
    else fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  if (Status s = Stat(child, &st); !s.ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  FillEntry(child, st, &e);
  fuse_reply_entry(req, &e);
}

void DatasetFs::GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  if (Status s = Stat(ino, &st); !s.ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  fuse_reply_attr(req, &st, IsDatasetIno(ino) ? options_.dataset_timeout : options_.top_timeout);
}

void DatasetFs::ReadLink(fuse_req_t req, fuse_ino_t ino) {
  const MountedDataset* ds = ns_.Slot(SlotOf(ino));
  const uint64_t entry = EntryOf(ino);
  if (!IsDatasetIno(ino) || ds == nullptr || entry >= ds->manifest().entry_count()) {
    fuse_reply_err(req, IsDatasetIno(ino) ? ESTALE : EINVAL);
    return;
  }
  if (!ds->manifest().entry(static_cast<uint32_t>(entry)).is_symlink()) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  std::string target(ds->manifest().symlink_target(static_cast<uint32_t>(entry)));
  fuse_reply_readlink(req, target.c_str());
}
}  // namespace hoard::fuse
