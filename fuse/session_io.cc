#include "fuse/session_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <linux/fuse.h>

#include "common/file_util.h"

namespace hoard::fuse {
namespace {

constexpr uint32_t kOpcodeInit = 26;  // FUSE_INIT
constexpr int32_t kNotifyResend = 7;  // FUSE_NOTIFY_RESEND (Linux 6.9; Debian 12's headers lack it)
// The unique of the replayed INIT: the kernel counts uniques up from 0 in
// steps of 2 and marks resent ones with bit 63, so it never issues this.
constexpr uint64_t kReplayUnique = 0x3fff'ffff'ffff'fff0ull;

ssize_t Splice(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

SessionIo::SessionIo(Options options) : options_(std::move(options)) {}

bool SessionIo::Prepare() {
  if (!options_.takeover) return false;
  Result<std::string> init = ReadFile(options_.init_file);
  if (init.ok() && init->size() >= sizeof(fuse_in_header) + 16 &&
      reinterpret_cast<const fuse_in_header*>(init->data())->opcode == kOpcodeInit) {
    saved_init_ = std::move(*init);
    reinterpret_cast<fuse_in_header*>(saved_init_.data())->unique = kReplayUnique;
    return false;
  }
  options_.logger->warn("takeover without a saved INIT ({}): serving as a new session",
                        init.ok() ? "not an INIT request" : init.status().ToString());
  options_.takeover = false;
  return true;
}

Status SessionIo::Install(fuse_session* se, ReadFn read, WritevFn writev) {
  // A later session of the same object (a test mounting again) is a new
  // connection: its INIT comes from the kernel.
  if (installed_) options_.takeover = false;
  installed_ = true;
  init_seen_.store(false);
  init_replied_.store(false);
  const bool resend_now = Prepare();
  fuse_custom_io io{};
  io.writev = writev;
  io.read = read;
  // Without these libfuse would stop splicing local chunks to the kernel.
  io.splice_send = &Splice;
  io.splice_receive = &Splice;
  // The session keeps its /dev/fuse fd; libfuse only starts using our
  // functions on it.
  if (const int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se)); rc != 0) {
    return Status::IoError(std::string("libfuse refused custom I/O: ") + std::strerror(-rc));
  }
  // A process that died before it saved INIT left it read and unanswered,
  // or still queued: either way the kernel has it to (re)send.
  if (resend_now) Resend(fuse_session_fd(se));
  return Status::Ok();
}

ssize_t SessionIo::Read(int fd, void* buf, size_t len) {
  if (options_.takeover) {
    if (!replay_taken_.exchange(true)) {
      if (len < saved_init_.size()) return -EINVAL;
      std::memcpy(buf, saved_init_.data(), saved_init_.size());
      options_.passthrough->NoteInitRequest(buf, saved_init_.size());
      return ssize_t(saved_init_.size());
    }
    // libfuse fails every request it reads before its INIT: the others wait
    // until the replayed one is answered.
    if (!taken_over_.load(std::memory_order_acquire)) {
      MutexLock lock(&mu_);
      while (!replayed_) replayed_cv_.Wait(&mu_);
    }
    return ::read(fd, buf, len);
  }
  const ssize_t n = ::read(fd, buf, len);
  // INIT is the first request of a session; libfuse reads it with read(2),
  // not splice, before it calls the file system's init.
  if (n > 0 && !init_seen_.load(std::memory_order_acquire) && size_t(n) >= sizeof(fuse_in_header) &&
      static_cast<const fuse_in_header*>(buf)->opcode == kOpcodeInit && !init_seen_.exchange(true)) {
    SaveInit(buf, size_t(n));
    options_.passthrough->NoteInitRequest(buf, size_t(n));
  }
  return n;
}

ssize_t SessionIo::Writev(int fd, iovec* iov, int count) {
  const auto* h = count >= 1 && iov[0].iov_len >= sizeof(fuse_out_header)
                      ? static_cast<const fuse_out_header*>(iov[0].iov_base)
                      : nullptr;
  if (h != nullptr && options_.takeover && h->unique == kReplayUnique) {
    const ssize_t n = options_.passthrough->SendInitReply(fd, iov, count, /*send=*/false);
    taken_over_.store(true, std::memory_order_release);
    Resend(fd);
    {
      MutexLock lock(&mu_);
      replayed_ = true;
    }
    replayed_cv_.NotifyAll();
    options_.logger->info("took over the FUSE connection{}", resent() ? "; the kernel resends what was in flight" : "");
    return n;
  }
  // The kernel sends no request before INIT is answered, so the first reply
  // of a fresh session is INIT's. Notifications (unique 0) may come first,
  // from the thread that watches the cluster.
  if (h != nullptr && !options_.takeover && h->unique != 0 && !init_replied_.load(std::memory_order_acquire) &&
      !init_replied_.exchange(true)) {
    return options_.passthrough->SendInitReply(fd, iov, count, /*send=*/true);
  }
  return ::writev(fd, iov, count);
}

void SessionIo::Resend(int fd) {
  fuse_out_header h{.len = sizeof(fuse_out_header), .error = kNotifyResend, .unique = 0};
  if (::write(fd, &h, sizeof h) == ssize_t(sizeof h)) {
    resent_.store(true, std::memory_order_release);
    return;
  }
  options_.logger->warn("the kernel cannot resend requests ({}; Linux 6.9 can): requests the last process read and "
                        "did not answer stay unanswered",
                        std::strerror(errno));
}

void SessionIo::SaveInit(const void* buf, size_t len) {
  if (options_.init_file.empty()) return;
  if (Status s = WriteFileAtomic(options_.init_file, std::string_view(static_cast<const char*>(buf), len)); !s.ok()) {
    options_.logger->warn("cannot keep the INIT request ({}): a restart of this mount will need a new mount",
                          s.ToString());
  }
}

}  // namespace hoard::fuse
