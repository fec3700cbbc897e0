// HoardFs lifecycle, the map watcher, and the operations table (each op
// routed once to the dataset or the checkpoint tree).
#include "fuse/hoard_fs.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "common/errno.h"
#include "common/file_util.h"
#include "common/mountinfo.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

// Writes `value` to `path` in one write(2): a sysfs knob (which cannot be
// renamed into), or a file that is then renamed into place.
Status WriteKnob(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return Status::FromErrno(errno, "write " + path);
  }
  return Status::Ok();
}

HoardFs* Fs(fuse_req_t req) { return static_cast<HoardFs*>(fuse_req_userdata(req)); }

// Runs one operation; an exception becomes EIO for this request only.
template <typename F>
void Guarded(fuse_req_t req, const char* op, F&& f) {
  // Until the handler returns: it has replied by then (a read, after its data).
  metrics::ScopedTimer timer(Fs(req)->stats().op_latency.Find(op));
  try {
    f();
  } catch (const std::exception& e) {
    Fs(req)->OpFailed(op, e.what());
    fuse_reply_err(req, EIO);
  }
}

// How far apart the requests of a sequential reader may arrive: those of one
// kernel read-ahead window come in any order (several FUSE threads take them).
uint64_t SequentialSlack(uint32_t read_ahead_kb) {
  return std::max<uint64_t>(8u << 20, 2 * (uint64_t(read_ahead_kb) << 10));
}

}  // namespace

HoardFs::HoardFs(Options options)
    : options_(std::move(options)),
      watcher_(ClusterWatcher::Options{
          .coordinator = options_.coordinator,
          .self = "",
          .mount = {.node = options_.node_name, .mountpoint = options_.mountpoint},
          .cache_dir = options_.cache_dir,
          .timeout = std::chrono::milliseconds(3000),
          .logger = options_.logger,
          .context = options_.context,
          .on_change = [this](const std::shared_ptr<const ClusterView>& v) { OnViewChange(v); }}),
      reader_(ChunkReader::Options{.local_store = options_.local_store,
                                   .read_tier_dir = options_.read_tier_dir,
                                   .read_tier_bytes = options_.read_tier_bytes,
                                   .read_tier_min_free = options_.read_tier_min_free,
                                   .peer_timeout = options_.peer_timeout,
                                   .peer_connect_timeout = options_.peer_connect_timeout,
                                   .memory_cache_bytes = options_.memory_cache_bytes,
                                   .logger = options_.logger,
                                   .clock = options_.clock,
                                   .context = options_.context,
                                   .open_origin = options_.open_origin,
                                   .on_newer_placement =
                                       [this] {
                                         {
                                           MutexLock lock(&mu_);
                                           poll_now_ = true;
                                         }
                                         cv_.NotifyAll();
                                       },
                                   .readahead_chunks = options_.readahead_chunks,
                                   .readahead_threads = options_.readahead_threads,
                                   .sequential_slack = SequentialSlack(options_.read_ahead_kb)},
              [this] { return watcher_.Current(); }),
      ckpt_(std::make_unique<CkptFs>(CkptFs::Options{.coordinator = options_.coordinator,
                                                     .node_name = options_.node_name,
                                                     .local_store = options_.local_store,
                                                     .peer_timeout = options_.peer_timeout,
                                                     .sync_level = options_.ckpt_sync_level,
                                                     .write_behind_threads = options_.ckpt_write_behind_threads,
                                                     .logger = options_.logger,
                                                     .context = options_.context,
                                                     .open_origin = options_.open_ckpt_origin,
                                                     .uncached_writes = [this] { return passthrough_.direct_io_mmap(); },
                                                     .mountpoint = options_.mountpoint,
                                                     .clock = options_.clock,
                                                     .state_dir = options_.session_dir.empty()
                                                                      ? ""
                                                                      : options_.session_dir + "/ckpt",
                                                     .takeover = options_.takeover},
                                     [this] { return watcher_.Current(); })),
      passthrough_(options_.logger),
      session_io_(SessionIo::Options{.init_file = options_.session_dir.empty() ? "" : options_.session_dir + "/init",
                                     .takeover = options_.takeover,
                                     .passthrough = &passthrough_,
                                     .logger = options_.logger}),
      start_time_(options_.clock->WallSeconds()),
      datasets_(DatasetFs::Options{.dataset_timeout = options_.dataset_timeout,
                                   .top_timeout = options_.top_timeout,
                                   .start_time = start_time_,
                                   .logger = options_.logger},
                DatasetFs::Shared{.ns = &ns_,
                                  .watcher = &watcher_,
                                  .reader = &reader_,
                                  .passthrough = &passthrough_,
                                  .stats = &stats_,
                                  .stat_checkpoints = [this](struct stat* st) { ckpt_->StatRoot(st); },
                                  .lock_waiter = &ckpt_->lock_waiter(),
                                  .mount_dev = [this]() -> const std::string& { return ckpt_->MountDev(); }}) {}

HoardFs::~HoardFs() { Stop(); }

Status HoardFs::SetSession(fuse_session* session) {
  if (session != nullptr && session_.load() == nullptr) {
    if (!options_.session_dir.empty()) {
      if (Status s = passthrough_.Persist(options_.session_dir + "/open-files", options_.takeover); !s.ok()) {
        options_.logger->warn("passthrough opens will not survive a restart of the mount: {}", s.ToString());
      }
    }
    passthrough_.Start(session, options_.passthrough);
    // The session's userdata is this HoardFs (fuse_session_new in main.cc).
    HOARD_RETURN_IF_ERROR(session_io_.Install(
        session,
        [](int fd, void* buf, size_t len, void* userdata) {
          return static_cast<HoardFs*>(userdata)->session_io_.Read(fd, buf, len);
        },
        [](int fd, iovec* iov, int count, void* userdata) {
          return static_cast<HoardFs*>(userdata)->session_io_.Writev(fd, iov, count);
        }));
  }
  session_.store(session);
  ckpt_->SetSession(session);
  return Status::Ok();
}

Status HoardFs::Start() {
  HOARD_RETURN_IF_ERROR(MakeDirs(options_.cache_dir));
  if (!options_.session_dir.empty()) {
    HOARD_RETURN_IF_ERROR(MakeDirs(options_.session_dir));
    if (Status s = ns_.KeepSlots(options_.session_dir + "/slots", options_.takeover); !s.ok()) {
      options_.logger->warn("dataset slots will not survive a restart of the mount: {}", s.ToString());
    }
    if (Status s = ckpt_->TakeOver(); !s.ok()) options_.logger->warn("checkpoint handles: {}", s.ToString());
  }
  if (Status s = watcher_.LoadCached(); !s.ok() && s.code() != Code::kNotFound) {
    options_.logger->warn("saved cluster map not used: {}", s.ToString());
  }
  if (Status s = watcher_.Sync(); !s.ok()) {
    options_.logger->warn("coordinator not reachable yet ({}); serving the last known datasets", s.ToString());
  }
  watch_thread_ = std::thread([this] { WatchLoop(); });
  ckpt_->Start();
  return Status::Ok();
}

void HoardFs::Stop(bool end_session) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (watch_thread_.joinable()) watch_thread_.join();
  ckpt_->Stop(end_session);
}

void HoardFs::WatchLoop() {
  Clock* const clock = options_.clock;
  MutexLock lock(&mu_);
  auto next_poll = clock->Now() + options_.poll_interval;
  while (!stopping_) {
    while (!stopping_ && !poll_now_ && pending_inval_.empty() && clock->Now() < next_poll) {
      clock->WaitUntil(&cv_, &mu_, next_poll);
    }
    if (stopping_) break;
    std::vector<std::string> names = std::move(pending_inval_);
    pending_inval_.clear();
    if (poll_now_) next_poll = clock->Now();
    poll_now_ = false;
    lock.Unlock();
    fuse_session* se = session_.load();
    for (const std::string& name : names) {
      // The kernel may hold /datasets/NAME for top_timeout; drop it now so the
      // new version (or its absence) shows at once.
      if (se != nullptr) (void)fuse_lowlevel_notify_inval_entry(se, kDatasetsIno, name.data(), name.size());
    }
    if (clock->Now() >= next_poll) {
      std::vector<uint64_t> read;
      const std::shared_ptr<const Namespace::Listing> listing = ns_.List();
      for (const auto& [name, md] : listing->datasets) {
        if (md->read.exchange(false, std::memory_order_relaxed)) read.push_back(md->view->meta.uid);
      }
      Status s = watcher_.Poll(std::move(read));
      if (!s.ok()) options_.logger->debug("map poll: {}", s.ToString());
      if (se != nullptr && initialized_.load() && !read_ahead_done_) TuneReadAhead();
      // Chunk files evicted or deleted since the last poll are released by
      // each busy worker thread at its next read.
      reader_.ForgetLocalFds();
      // The node's datasets and checkpoints may have grown into the read
      // tier's share of the node's capacity: give it back.
      if (ReadTier* tier = reader_.read_tier()) tier->Trim();
      WriteStats();
      next_poll = clock->Now() + options_.poll_interval;
    }
    lock.Lock();
  }
}

void HoardFs::OnViewChange(const std::shared_ptr<const ClusterView>& view) {
  std::vector<std::string> changed = ns_.Update(*view);
  if (changed.empty()) return;
  for (const std::string& name : changed) {
    options_.logger->info("dataset {} {}", name, ns_.Find(name) ? "mounted" : "unmounted");
  }
  // Copies in the read tier of a dataset that is gone (not a new version of
  // it: unchanged files keep their chunks) are of no use any more.
  if (ReadTier* tier = reader_.read_tier()) {
    MutexLock lock(&mu_);
    std::set<uint64_t> now;
    for (const auto& [name, ds] : view->datasets()) now.insert(ds->meta.uid);
    for (uint64_t uid : mounted_uids_) {
      if (!now.count(uid)) tier->RemoveDataset(uid);
    }
    mounted_uids_ = std::move(now);
  }
  {
    MutexLock lock(&mu_);
    pending_inval_.insert(pending_inval_.end(), changed.begin(), changed.end());
  }
  cv_.NotifyAll();
}

void HoardFs::TuneReadAhead() {
  read_ahead_done_ = true;  // one attempt: a failure is logged, not retried
  if (options_.read_ahead_kb == 0 || options_.mountpoint.empty()) return;
  // The mount's backing device is "0:N" in /proc/self/mountinfo; reading it
  // there (not with stat) never sends a request to our own mount, which could
  // hang while the session is shutting down.
  Result<std::string> dev = MountDevice(options_.mountpoint);
  if (!dev.ok()) {
    options_.logger->warn("read-ahead left at the kernel default: {}", dev.status().ToString());
    return;
  }
  const std::string knob = "/sys/class/bdi/" + *dev + "/read_ahead_kb";
  if (Status s = WriteKnob(knob, std::to_string(options_.read_ahead_kb)); !s.ok()) {
    options_.logger->warn("read-ahead left at the kernel default: {}", s.ToString());
    return;
  }
  options_.logger->info("kernel read-ahead for the mount: {} KiB", options_.read_ahead_kb);
}

void HoardFs::WriteStats() {
  if (options_.cache_dir.empty()) return;
  const ChunkReader::Counters& c = reader_.counters();
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  std::string sizes;
  for (size_t b = 0; b < MountStats::kSizeBuckets; ++b) {
    if (b > 0) sizes += ", ";
    sizes += "\"" + std::to_string(4 << b) + (b + 1 == MountStats::kSizeBuckets ? "+" : "") +
             "\": " + std::to_string(v(stats_.read_sizes[b]));
  }
  std::string json = "{\"lookups\": " + std::to_string(v(stats_.lookups)) +
                     ", \"getattrs\": " + std::to_string(v(stats_.getattrs)) +
                     ", \"readdirs\": " + std::to_string(v(stats_.readdirs)) +
                     ", \"opens\": " + std::to_string(v(stats_.opens)) +
                     ", \"passthrough_opens\": " + std::to_string(v(stats_.passthrough_opens)) +
                     ", \"passthrough_bytes\": " + std::to_string(v(stats_.passthrough_bytes)) +
                     ", \"flushes\": " + std::to_string(v(stats_.flushes)) +
                     ", \"reads\": " + std::to_string(v(stats_.reads)) +
                     ", \"read_bytes\": " + std::to_string(v(stats_.read_bytes)) +
                     ", \"read_errors\": " + std::to_string(v(stats_.read_errors)) +
                     ", \"local_bytes\": " + std::to_string(v(c.local_bytes)) +
                     ", \"peer_bytes\": " + std::to_string(v(c.peer_bytes)) +
                     ", \"origin_bytes\": " + std::to_string(v(c.origin_bytes)) +
                     ", \"range_fetches\": " + std::to_string(v(c.range_fetches)) +
                     ", \"peer_failures\": " + std::to_string(v(c.peer_failures)) +
                     ", \"overdue_requests\": " + std::to_string(reader_.hedger().overdue()) +
                     ", \"hedges\": " + std::to_string(reader_.hedger().hedges()) +
                     ", \"hedges_won\": " + std::to_string(reader_.hedger().hedges_won()) +
                     ", \"slow_peer_suspicions\": " + std::to_string(reader_.hedger().slow_suspicions()) +
                     ", \"corrupt_local_chunks\": " + std::to_string(v(c.corrupt_local_chunks)) +
                     ", \"readahead_chunks\": " + std::to_string(v(c.readahead_chunks)) +
                     ", \"readahead_bytes\": " + std::to_string(v(c.readahead_bytes)) +
                     ", \"readahead_used\": " + std::to_string(v(c.readahead_used)) +
                     ", \"readahead_unused\": " + std::to_string(v(c.readahead_unused)) +
                     ", \"readahead_failures\": " + std::to_string(v(c.readahead_failures)) +
                     ", \"read_sizes_kib\": {" + sizes + "}}\n";
  if (json == last_stats_) return;
  // Replaced by rename so readers never see half a file, but not fsynced:
  // counters are not worth a disk flush every second.
  const std::string path = JoinPath(options_.cache_dir, "stats.json");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Status s = WriteKnob(tmp, json);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::FromErrno(errno, "rename " + tmp);
  if (!s.ok()) {
    (void)::unlink(tmp.c_str());
    options_.logger->debug("stats: {}", s.ToString());
    return;
  }
  last_stats_ = std::move(json);
}

void HoardFs::Init(fuse_conn_info* conn) {
  // Reads of local chunks are answered from the chunk file's fd; let libfuse
  // splice them to the kernel instead of copying through our memory.
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  // Directory listings come with attributes: `ls -l` and os.scandir need no
  // extra lookups. Every part of a listing, not only its first (the kernel's
  // "auto" mode): the entries cost the mount nothing extra, and a reader that
  // lists a directory and then opens its files would otherwise send a LOOKUP
  // for each file past the first few dozen.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // File locks go to us (the coordinator keeps checkpoint files' for the
  // whole cluster: checkpoint/ckpt_fs.h), not to the kernel's node-local table.
  if (conn->capable & FUSE_CAP_POSIX_LOCKS) conn->want |= FUSE_CAP_POSIX_LOCKS;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS) conn->want |= FUSE_CAP_FLOCK_LOCKS;
  // Lookups in different directories may run in parallel.
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // Symlink targets never change within a dataset version.
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // Data is immutable; the kernel must not drop cached pages because an
  // mtime it saw once "changed".
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  // Checkpoint writes: up to 1 MiB per request rather than 128 KiB (a
  // quarter of the round trips through the mount for a large torch.save).
  // (The kernel's no-open mode, which would save a round trip per dataset
  // open, is all or nothing per mount: checkpoint files need their opens.)
  conn->max_write = 1u << 20;
  // Many readers of many small files: let the kernel keep more requests in
  // flight than the default 12 before it throttles them.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  initialized_.store(true);
}

void HoardFs::Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
                     unsigned flags) {
  // Between the trees, as between two file systems: mv then copies and
  // removes.
  if (IsCkptIno(parent) != IsCkptIno(newparent)) {
    fuse_reply_err(req, EXDEV);
    return;
  }
  Route(parent, [&](auto& fs) { fs.Rename(req, parent, name, newparent, newname, flags); });
}

void HoardFs::StatFs(fuse_req_t req, fuse_ino_t) {
  // The free space that matters is the cache disk's.
  struct statvfs sv;
  const std::string& where = options_.local_store.empty() ? options_.cache_dir : options_.local_store;
  if (::statvfs(where.c_str(), &sv) != 0) {
    fuse_reply_err(req, ToErrno(Status::FromErrno(errno, "statvfs")));
    return;
  }
  sv.f_namemax = 255;
  fuse_reply_statfs(req, &sv);
}

// Each op is routed once, by the inode it acts on (for one that creates or
// removes a name: the directory), to the tree that serves it (Route); the
// trees' own methods say what each does or refuses.
const fuse_lowlevel_ops& HoardFs::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = [](void* userdata, fuse_conn_info* conn) { static_cast<HoardFs*>(userdata)->Init(conn); };
    o.lookup = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Fs(req)->stats_.lookups.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "lookup", [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.Lookup(req, parent, name); }); });
    };
    // Inodes carry no state, so there is nothing to forget.
    o.forget = [](fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); };
    o.forget_multi = [](fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); };
    o.getattr = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Fs(req)->stats_.getattrs.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "getattr", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.GetAttr(req, ino, fi); }); });
    };
    o.readlink = [](fuse_req_t req, fuse_ino_t ino) {
      Guarded(req, "readlink", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.ReadLink(req, ino); }); });
    };
    o.statfs = [](fuse_req_t req, fuse_ino_t ino) { Guarded(req, "statfs", [&] { Fs(req)->StatFs(req, ino); }); };
    o.opendir = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "opendir", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.OpenDir(req, ino, fi); }); });
    };
    o.readdir = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
      Fs(req)->stats_.readdirs.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "readdir", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.ReadDir(req, ino, size, off, false); }); });
    };
    o.readdirplus = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
      Fs(req)->stats_.readdirs.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "readdirplus",
              [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.ReadDir(req, ino, size, off, true); }); });
    };
    // A directory handle holds nothing in either tree.
    o.releasedir = [](fuse_req_t req, fuse_ino_t, fuse_file_info*) {
      Guarded(req, "releasedir", [&] { fuse_reply_err(req, 0); });
    };
    o.open = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Fs(req)->stats_.opens.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "open", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Open(req, ino, fi); }); });
    };
    o.read = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
      Guarded(req, "read", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Read(req, ino, size, off, fi); }); });
    };
    o.release = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "release", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Release(req, ino, fi); }); });
    };
    o.flush = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Fs(req)->stats_.flushes.fetch_add(1, std::memory_order_relaxed);
      Guarded(req, "flush", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Flush(req, ino, fi); }); });
    };
    o.setattr = [](fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
      Guarded(req, "setattr", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.SetAttr(req, ino, attr, to_set, fi); }); });
    };
    o.mkdir = [](fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
      Guarded(req, "mkdir", [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.MkDir(req, parent, name, mode); }); });
    };
    o.unlink = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Guarded(req, "unlink", [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.Remove(req, parent, name, false); }); });
    };
    o.rmdir = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Guarded(req, "rmdir", [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.Remove(req, parent, name, true); }); });
    };
    o.rename = [](fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
                  unsigned flags) {
      Guarded(req, "rename", [&] { Fs(req)->Rename(req, parent, name, newparent, newname, flags); });
    };
    o.create = [](fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
      Guarded(req, "create",
              [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.Create(req, parent, name, mode, fi); }); });
    };
    o.write = [](fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
      Guarded(req, "write", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Write(req, ino, buf, size, off, fi); }); });
    };
    o.getlk = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
      Guarded(req, "getlk", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.GetLk(req, ino, fi, lock); }); });
    };
    o.setlk = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
      Guarded(req, "setlk", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.SetLk(req, ino, fi, lock, sleep); }); });
    };
    o.flock = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
      Guarded(req, "flock", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Flock(req, ino, fi, op); }); });
    };
    o.fsync = [](fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
      Guarded(req, "fsync", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.Fsync(req, ino, datasync, fi); }); });
    };
    o.fsyncdir = [](fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
      fuse_reply_err(req, 0);  // namespace changes are durable when they return
    };
    o.getxattr = [](fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
      Guarded(req, "getxattr", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.GetXattr(req, ino, name, size); }); });
    };
    o.listxattr = [](fuse_req_t req, fuse_ino_t ino, size_t size) {
      Guarded(req, "listxattr", [&] { Fs(req)->Route(ino, [&](auto& fs) { fs.ListXattr(req, ino, size); }); });
    };
    o.mknod = [](fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
      Guarded(req, "mknod", [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.MkNod(req, parent, name, mode); }); });
    };
    o.symlink = [](fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
      Guarded(req, "symlink",
              [&] { Fs(req)->Route(parent, [&](auto& fs) { fs.Symlink(req, target, parent, name); }); });
    };
    // The five below answer without work that could throw, so they are not
    // Guarded (nor timed). A hard link is routed by the directory it would
    // be made in, a copy_file_range by the file it would write.
    o.link = [](fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
      Fs(req)->Route(newparent, [&](auto& fs) { fs.Link(req, ino, newparent, newname); });
    };
    o.fallocate = [](fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fuse_file_info* fi) {
      Fs(req)->Route(ino, [&](auto& fs) { fs.Fallocate(req, ino, mode, offset, length, fi); });
    };
    o.copy_file_range = [](fuse_req_t req, fuse_ino_t in, off_t off_in, fuse_file_info* fi_in, fuse_ino_t out,
                           off_t off_out, fuse_file_info* fi_out, size_t len, int flags) {
      Fs(req)->Route(out,
                     [&](auto& fs) { fs.CopyFileRange(req, in, off_in, fi_in, out, off_out, fi_out, len, flags); });
    };
    o.setxattr = [](fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
      Fs(req)->Route(ino, [&](auto& fs) { fs.SetXattr(req, ino, name, value, size, flags); });
    };
    // No attribute can be removed in either tree (user.hoard.* are read-only).
    o.removexattr = [](fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); };
    return o;
  }();
  return ops;
}

}  // namespace hoard::fuse
