// HoardFs lifecycle, the map watcher, and the operations table.
#include "fuse/hoard_fs.h"

#include <cerrno>
#include <ctime>

#include "common/file_util.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

HoardFs* Fs(fuse_req_t req) { return static_cast<HoardFs*>(fuse_req_userdata(req)); }

// Runs one operation; an exception becomes EIO for this request only.
template <typename F>
void Guarded(fuse_req_t req, const char* op, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    Fs(req)->OpFailed(op, e.what());
    fuse_reply_err(req, EIO);
  }
}

}  // namespace

HoardFs::HoardFs(Options options)
    : options_(std::move(options)),
      watcher_(ClusterWatcher::Options{
          .coordinator = options_.coordinator,
          .self = "",
          .cache_dir = options_.cache_dir,
          .timeout = std::chrono::milliseconds(3000),
          .logger = options_.logger,
          .context = options_.context,
          .on_change = [this](const std::shared_ptr<const ClusterView>& v) { OnViewChange(v); }}),
      reader_(ChunkReader::Options{.local_store = options_.local_store,
                                   .peer_timeout = options_.peer_timeout,
                                   .peer_connect_timeout = options_.peer_connect_timeout,
                                   .logger = options_.logger,
                                   .context = options_.context,
                                   .open_origin = options_.open_origin},
              [this] { return watcher_.Current(); }),
      start_time_(static_cast<int64_t>(::time(nullptr))) {}

HoardFs::~HoardFs() { Stop(); }

Status HoardFs::Start() {
  HOARD_RETURN_IF_ERROR(MakeDirs(options_.cache_dir));
  if (Status s = watcher_.LoadCached(); !s.ok() && s.code() != Code::kNotFound) {
    options_.logger->warn("saved cluster map not used: {}", s.ToString());
  }
  if (Status s = watcher_.Sync(); !s.ok()) {
    options_.logger->warn("coordinator not reachable yet ({}); serving the last known datasets", s.ToString());
  }
  watch_thread_ = std::thread([this] { WatchLoop(); });
  return Status::Ok();
}

void HoardFs::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void HoardFs::WatchLoop() {
  std::unique_lock lock(mu_);
  auto next_poll = std::chrono::steady_clock::now() + options_.poll_interval;
  while (!stopping_) {
    cv_.wait_until(lock, next_poll, [this] { return stopping_ || !pending_inval_.empty(); });
    if (stopping_) break;
    std::vector<std::string> names = std::move(pending_inval_);
    pending_inval_.clear();
    lock.unlock();
    fuse_session* se = session_.load();
    for (const std::string& name : names) {
      // The kernel may hold /datasets/NAME for top_timeout; drop it now so the
      // new version (or its absence) shows at once.
      if (se != nullptr) (void)fuse_lowlevel_notify_inval_entry(se, kDatasetsIno, name.data(), name.size());
    }
    if (std::chrono::steady_clock::now() >= next_poll) {
      Status s = watcher_.Poll();
      if (!s.ok()) options_.logger->debug("map poll: {}", s.ToString());
      next_poll = std::chrono::steady_clock::now() + options_.poll_interval;
    }
    lock.lock();
  }
}

void HoardFs::RefreshNow() {
  if (Status s = watcher_.RefreshForRequest(); !s.ok()) options_.logger->debug("refresh: {}", s.ToString());
}

void HoardFs::OnViewChange(const std::shared_ptr<const ClusterView>& view) {
  std::vector<std::string> changed = ns_.Update(*view);
  if (changed.empty()) return;
  for (const std::string& name : changed) {
    options_.logger->info("dataset {} {}", name, ns_.Find(name) ? "mounted" : "unmounted");
  }
  {
    std::lock_guard lock(mu_);
    pending_inval_.insert(pending_inval_.end(), changed.begin(), changed.end());
  }
  cv_.notify_all();
}

void HoardFs::Init(fuse_conn_info* conn) {
  // Reads of local chunks are answered from the chunk file's fd; let libfuse
  // splice them to the kernel instead of copying through our memory.
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  // Directory listings come with attributes: `ls -l` and os.scandir need no
  // extra lookups.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Lookups in different directories may run in parallel.
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // Symlink targets never change within a dataset version.
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // Data is immutable; the kernel must not drop cached pages because an
  // mtime it saw once "changed".
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

const fuse_lowlevel_ops& HoardFs::Ops() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = [](void* userdata, fuse_conn_info* conn) { static_cast<HoardFs*>(userdata)->Init(conn); };
    o.lookup = [](fuse_req_t req, fuse_ino_t parent, const char* name) {
      Guarded(req, "lookup", [&] { Fs(req)->Lookup(req, parent, name); });
    };
    // Inodes carry no state, so there is nothing to forget.
    o.forget = [](fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); };
    o.forget_multi = [](fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); };
    o.getattr = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "getattr", [&] { Fs(req)->GetAttr(req, ino, fi); });
    };
    o.readlink = [](fuse_req_t req, fuse_ino_t ino) { Guarded(req, "readlink", [&] { Fs(req)->ReadLink(req, ino); }); };
    o.statfs = [](fuse_req_t req, fuse_ino_t ino) { Guarded(req, "statfs", [&] { Fs(req)->StatFs(req, ino); }); };
    o.opendir = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "opendir", [&] { Fs(req)->OpenDir(req, ino, fi); });
    };
    o.readdir = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
      Guarded(req, "readdir", [&] { Fs(req)->ReadDir(req, ino, size, off, fi, false); });
    };
    o.readdirplus = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
      Guarded(req, "readdirplus", [&] { Fs(req)->ReadDir(req, ino, size, off, fi, true); });
    };
    o.releasedir = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "releasedir", [&] { Fs(req)->ReleaseDir(req, ino, fi); });
    };
    o.open = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "open", [&] { Fs(req)->Open(req, ino, fi); });
    };
    o.read = [](fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
      Guarded(req, "read", [&] { Fs(req)->Read(req, ino, size, off, fi); });
    };
    o.release = [](fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
      Guarded(req, "release", [&] { Fs(req)->Release(req, ino, fi); });
    };
    // Datasets are read-only versions of their origin: every change is EROFS
    // (without these the kernel would answer ENOSYS, which tools misread).
    o.setattr = [](fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { Fs(req)->ReadOnly(req); };
    o.mknod = [](fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Fs(req)->ReadOnly(req); };
    o.mkdir = [](fuse_req_t req, fuse_ino_t, const char*, mode_t) { Fs(req)->ReadOnly(req); };
    o.unlink = [](fuse_req_t req, fuse_ino_t, const char*) { Fs(req)->ReadOnly(req); };
    o.rmdir = [](fuse_req_t req, fuse_ino_t, const char*) { Fs(req)->ReadOnly(req); };
    o.symlink = [](fuse_req_t req, const char*, fuse_ino_t, const char*) { Fs(req)->ReadOnly(req); };
    o.rename = [](fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
      Fs(req)->ReadOnly(req);
    };
    o.link = [](fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Fs(req)->ReadOnly(req); };
    o.create = [](fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { Fs(req)->ReadOnly(req); };
    o.setxattr = [](fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { Fs(req)->ReadOnly(req); };
    o.removexattr = [](fuse_req_t req, fuse_ino_t, const char*) { Fs(req)->ReadOnly(req); };
    return o;
  }();
  return ops;
}

}  // namespace hoard::fuse
