#include "fuse/passthrough.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <linux/fuse.h>

#include "common/status.h"
#include "common/file_util.h"

namespace hoard::fuse {
namespace {

// The parts of <linux/fuse.h> from Linux 6.9 that Debian 12's headers (6.1)
// lack. The kernel's ABI, so they cannot change.
constexpr uint32_t kInitPassthroughFlag2 = 1u << (37 - 32);  // FUSE_PASSTHROUGH, in flags2
constexpr uint32_t kInitDirectIoMmapFlag2 = 1u << (36 - 32);  // FUSE_DIRECT_IO_ALLOW_MMAP, in flags2
constexpr uint32_t kInitExtFlag = 1u << 30;                   // FUSE_INIT_EXT: flags2 is meaningful
constexpr uint32_t kOpcodeInit = 26;                          // FUSE_INIT
constexpr size_t kInitInFlagsOffset = sizeof(fuse_in_header) + 12;   // fuse_init_in.flags
constexpr size_t kInitInFlags2Offset = sizeof(fuse_in_header) + 16;  // fuse_init_in.flags2
constexpr size_t kInitOutFlagsOffset = 12;                    // fuse_init_out.flags
constexpr size_t kInitOutFlags2Offset = 32;                   // fuse_init_out.flags2
constexpr size_t kInitOutStackDepthOffset = 36;               // fuse_init_out.max_stack_depth
constexpr size_t kInitOutSize = 64;                           // sizeof(fuse_init_out)
constexpr uint32_t kOpenPassthrough = 1u << 7;                // FOPEN_PASSTHROUGH
constexpr uint32_t kOpenDirectIo = 1u << 0;                   // FOPEN_DIRECT_IO
constexpr uint32_t kOpenNoFlush = 1u << 5;                    // FOPEN_NOFLUSH

struct BackingMap {  // struct fuse_backing_map
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
struct OpenOut {  // struct fuse_open_out, with backing_id where 6.1 has padding
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
static_assert(sizeof(OpenOut) == 16);
#define HOARD_FUSE_DEV_IOC_BACKING_OPEN _IOW(229, 1, BackingMap)
#define HOARD_FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

// A backing file the stores use lives on an ordinary filesystem (depth 0);
// 1 leaves room for the mount itself to be an overlay's lower layer.
constexpr uint32_t kMaxStackDepth = 1;

}  // namespace

Passthrough::~Passthrough() {
  MutexLock lock(&mu_);
  if (records_ != nullptr) ::munmap(records_, sizeof(Record) * kRecords);
}

Status Passthrough::Persist(const std::string& path, bool takeover) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  const size_t bytes = sizeof(Record) * kRecords;
  // A fresh session starts from an empty table: truncating to 0 first
  // zeroes whatever an earlier mount left.
  if (!takeover && ::ftruncate(fd.get(), 0) != 0) return Status::FromErrno(errno, "truncate " + path);
  if (::ftruncate(fd.get(), off_t(bytes)) != 0) return Status::FromErrno(errno, "size " + path);
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return Status::FromErrno(errno, "map " + path);
  MutexLock lock(&mu_);
  records_ = static_cast<Record*>(m);
  inodes_.clear();
  free_records_.clear();
  size_t loaded = 0;
  for (uint32_t i = kRecords; i-- > 0;) {
    Record& r = records_[i];
    const uint64_t ino = __atomic_load_n(&r.ino, __ATOMIC_ACQUIRE);
    if (ino == 0 || (r.cached == 0 && r.passthrough == 0) || inodes_.contains(ino)) {
      r.ino = 0;
      free_records_.push_back(i);  // popped from the back: low records first
      continue;
    }
    inodes_[ino] = Inode{.cached = r.cached, .passthrough = r.passthrough, .backing_id = r.backing_id, .record = i};
    ++loaded;
  }
  loaded_ = loaded > 0;
  if (loaded > 0) logger_->info("passthrough: took over the opens of {} inode(s) from the last process", loaded);
  return Status::Ok();
}

void Passthrough::Save(fuse_ino_t ino, Inode& in) {
  if (records_ == nullptr) return;
  if (in.cached == 0 && in.passthrough == 0) {
    if (in.record != kNoRecord) {
      __atomic_store_n(&records_[in.record].ino, uint64_t(0), __ATOMIC_RELEASE);
      free_records_.push_back(in.record);
      in.record = kNoRecord;
    }
    return;
  }
  if (in.record == kNoRecord) {
    if (free_records_.empty()) {
      // Only a takeover needs the record: the open itself goes on.
      if (!table_full_logged_) {
        table_full_logged_ = true;
        logger_->warn("passthrough: more than {} inodes open at once; opens past that would not survive a restart "
                      "of the mount",
                      kRecords);
      }
      return;
    }
    in.record = free_records_.back();
    free_records_.pop_back();
  }
  // The counts before the inode number: a record is live once it has one.
  Record& r = records_[in.record];
  r.backing_id = in.backing_id;
  r.cached = in.cached;
  r.passthrough = in.passthrough;
  __atomic_store_n(&r.ino, uint64_t(ino), __ATOMIC_RELEASE);
}

void Passthrough::Start(fuse_session* se, bool enable) {
  {
    // A new session (the same file system mounted again) starts afresh: the
    // backing ids of the last one died with its connection. A takeover's
    // (Persist) are the connection's still.
    MutexLock lock(&mu_);
    if (!loaded_) {
      for (auto& [ino, in] : inodes_) {
        in.cached = in.passthrough = 0;
        Save(ino, in);
      }
      inodes_.clear();
    }
  }
  se_ = se;
  kernel_flags2_.store(0);
  direct_io_mmap_.store(false);
  enabled_.store(enable, std::memory_order_relaxed);
}

void Passthrough::NoteInitRequest(const void* buf, size_t n) {
  const char* in = static_cast<const char*>(buf);
  if (n >= kInitInFlags2Offset + 4 && reinterpret_cast<const fuse_in_header*>(in)->opcode == kOpcodeInit) {
    uint32_t flags = 0, flags2 = 0;
    std::memcpy(&flags, in + kInitInFlagsOffset, 4);
    if (flags & kInitExtFlag) std::memcpy(&flags2, in + kInitInFlags2Offset, 4);
    kernel_flags2_.store(flags2);
  }
}

ssize_t Passthrough::SendInitReply(int fd, iovec* iov, int count, bool send) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  auto write = [&](iovec* v, int n) -> ssize_t { return send ? ::writev(fd, v, n) : ssize_t(total); };
  if (!enabled()) return write(iov, count);
  if (count != 2 || iov[1].iov_len < kInitOutStackDepthOffset + 4 || iov[1].iov_len > kInitOutSize) {
    // Not the reply we know (an error, or a protocol too old for flags2).
    enabled_.store(false, std::memory_order_relaxed);
    return write(iov, count);
  }
  char out[kInitOutSize] = {};
  std::memcpy(out, iov[1].iov_base, iov[1].iov_len);
  uint32_t flags = 0;
  std::memcpy(&flags, out + kInitOutFlagsOffset, 4);
  if (!(flags & kInitExtFlag)) {
    enabled_.store(false, std::memory_order_relaxed);
    return write(iov, count);
  }
  uint32_t flags2 = 0;
  std::memcpy(&flags2, out + kInitOutFlags2Offset, 4);
  flags2 |= kInitPassthroughFlag2;
  // Only where the kernel has passthrough too (6.9): the 6.6-6.8 kernels
  // that first offered the flag failed msync and writeback of such shared
  // mappings until a later stable fix ("fuse: fix VM_MAYSHARE and
  // direct_io_allow_mmap"), and cached handles work on every kernel.
  const uint32_t offered = kernel_flags2_.load();
  const bool mmap = (offered & kInitDirectIoMmapFlag2) && (offered & kInitPassthroughFlag2);
  if (mmap) flags2 |= kInitDirectIoMmapFlag2;
  std::memcpy(out + kInitOutFlags2Offset, &flags2, 4);
  std::memcpy(out + kInitOutStackDepthOffset, &kMaxStackDepth, 4);
  iovec patched[2] = {iov[0], {out, iov[1].iov_len}};
  const ssize_t n = write(patched, 2);
  if (n >= 0 && mmap) direct_io_mmap_.store(true, std::memory_order_release);
  return n;
}

Passthrough::Decision Passthrough::Open(fuse_ino_t ino, int fd) {
  MutexLock lock(&mu_);
  Inode& in = inodes_[ino];
  if (in.passthrough > 0) {
    // Open for passthrough already: this open must share the backing file.
    ++in.passthrough;
    Save(ino, in);
    return {.passthrough = true, .backing_id = in.backing_id};
  }
  if (in.cached > 0 || fd < 0 || !enabled()) {
    ++in.cached;
    Save(ino, in);
    return {};
  }
  BackingMap map{.fd = fd, .flags = 0, .padding = 0};
  const int id = ::ioctl(fuse_session_fd(se_.load()), HOARD_FUSE_DEV_IOC_BACKING_OPEN, &map);
  if (id < 0) {
    Disable(errno);
    ++in.cached;
    Save(ino, in);
    return {};
  }
  in.passthrough = 1;
  in.backing_id = id;
  Save(ino, in);
  return {.passthrough = true, .backing_id = id};
}

void Passthrough::Release(fuse_ino_t ino, bool passthrough) {
  int32_t close_id = -1;
  {
    MutexLock lock(&mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return;
    Inode& in = it->second;
    if (passthrough && in.passthrough > 0) {
      if (--in.passthrough == 0) close_id = in.backing_id;
    } else if (!passthrough && in.cached > 0) {
      --in.cached;
    }
    Save(ino, in);
    if (in.passthrough == 0 && in.cached == 0) inodes_.erase(it);
  }
  // The kernel holds its own reference while files use it; the id only lets
  // later opens name the same backing file.
  if (close_id >= 0) CloseBacking(close_id);
}

void Passthrough::CloseBacking(int32_t id) {
  uint32_t arg = static_cast<uint32_t>(id);
  if (::ioctl(fuse_session_fd(se_.load()), HOARD_FUSE_DEV_IOC_BACKING_CLOSE, &arg) != 0) {
    logger_->warn("passthrough: closing backing id {}: {}", id, std::strerror(errno));
  }
}

void Passthrough::Disable(int err) {
  if (!enabled_.exchange(false)) return;
  logger_->warn("kernel passthrough off for this mount: registering a chunk file failed ({}); reads go through "
                "the mount",
                std::strerror(err));
}

int Passthrough::ReplyOpen(fuse_req_t req, const fuse_file_info& fi, int32_t backing_id) {
  OpenOut out{};
  out.fh = fi.fh;
  // The kernel refuses (EIO) a passthrough open with any other flag than
  // these (FOPEN_PASSTHROUGH_MASK); keep_cache means nothing here: the page
  // cache used is the backing file's.
  out.open_flags = kOpenPassthrough;
  if (fi.direct_io) out.open_flags |= kOpenDirectIo;
  if (fi.noflush) out.open_flags |= kOpenNoFlush;
  out.backing_id = backing_id;
  return fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
}

}  // namespace hoard::fuse
