#include "fuse/passthrough.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <linux/fuse.h>

#include "common/status.h"

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

ssize_t Splice(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

bool Passthrough::Install(fuse_session* se, WritevFn writev, ReadFn read) {
  fuse_custom_io io{};
  io.writev = writev;
  io.read = read;
  // Without these libfuse would stop splicing local chunks to the kernel.
  io.splice_send = &Splice;
  io.splice_receive = &Splice;
  // The mounted session keeps its /dev/fuse fd; libfuse only starts using
  // our functions on it.
  if (const int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se)); rc != 0) {
    logger_->warn("kernel passthrough off: libfuse refused custom I/O ({})", std::strerror(-rc));
    return false;
  }
  // A new session (the same file system mounted again) starts afresh: the
  // backing ids of the last one died with its connection.
  {
    MutexLock lock(&mu_);
    inodes_.clear();
  }
  se_ = se;
  init_replied_.store(false);
  init_read_.store(false);
  kernel_flags2_.store(0);
  direct_io_mmap_.store(false);
  enabled_.store(true, std::memory_order_relaxed);
  return true;
}

ssize_t Passthrough::Read(int fd, void* buf, size_t len) {
  const ssize_t n = ::read(fd, buf, len);
  // INIT is the first request a session reads; libfuse reads it (with
  // read(2), not splice) before it calls the file system's init.
  if (n < 0 || init_read_.load(std::memory_order_acquire)) return n;
  const char* in = static_cast<const char*>(buf);
  if (size_t(n) >= kInitInFlags2Offset + 4 &&
      reinterpret_cast<const fuse_in_header*>(in)->opcode == kOpcodeInit) {
    uint32_t flags = 0, flags2 = 0;
    std::memcpy(&flags, in + kInitInFlagsOffset, 4);
    if (flags & kInitExtFlag) std::memcpy(&flags2, in + kInitInFlags2Offset, 4);
    kernel_flags2_.store(flags2);
  }
  init_read_.store(true, std::memory_order_release);
  return n;
}

ssize_t Passthrough::Writev(int fd, iovec* iov, int count) {
  // The kernel sends no request before INIT is answered, so the first reply
  // is INIT's: its header, then fuse_init_out. Notifications (unique 0) may
  // come first, from the thread that watches the cluster.
  if (init_replied_.load(std::memory_order_acquire) || count < 1 || iov[0].iov_len < sizeof(fuse_out_header) ||
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == 0 || init_replied_.exchange(true)) {
    return ::writev(fd, iov, count);
  }
  if (count != 2 || iov[1].iov_len < kInitOutStackDepthOffset + 4 || iov[1].iov_len > kInitOutSize) {
    // Not the reply we know (an error, or a protocol too old for flags2).
    enabled_.store(false, std::memory_order_relaxed);
    return ::writev(fd, iov, count);
  }
  char out[kInitOutSize] = {};
  std::memcpy(out, iov[1].iov_base, iov[1].iov_len);
  uint32_t flags = 0;
  std::memcpy(&flags, out + kInitOutFlagsOffset, 4);
  if (!(flags & kInitExtFlag)) {
    enabled_.store(false, std::memory_order_relaxed);
    return ::writev(fd, iov, count);
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
  const ssize_t n = ::writev(fd, patched, 2);
  if (n >= 0 && mmap) direct_io_mmap_.store(true, std::memory_order_release);
  return n;
}

Passthrough::Decision Passthrough::Open(fuse_ino_t ino, int fd) {
  MutexLock lock(&mu_);
  Inode& in = inodes_[ino];
  if (in.passthrough > 0) {
    // Open for passthrough already: this open must share the backing file.
    ++in.passthrough;
    return {.passthrough = true, .backing_id = in.backing_id};
  }
  if (in.cached > 0 || fd < 0 || !enabled()) {
    ++in.cached;
    return {};
  }
  BackingMap map{.fd = fd, .flags = 0, .padding = 0};
  const int id = ::ioctl(fuse_session_fd(se_.load()), HOARD_FUSE_DEV_IOC_BACKING_OPEN, &map);
  if (id < 0) {
    Disable(errno);
    ++in.cached;
    return {};
  }
  in.passthrough = 1;
  in.backing_id = id;
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
