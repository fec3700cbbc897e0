#include "common/direct_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace hoard {

void AlignedFree::operator()(char* p) const { std::free(p); }

AlignedBuffer AllocateAligned(size_t size) {
  void* p = nullptr;
  if (::posix_memalign(&p, DirectIo::kAlign, size) != 0) return nullptr;
  return AlignedBuffer(static_cast<char*>(p));
}

UniqueFd DirectIo::Open(const std::string& path, int flags, mode_t mode) {
  if (enabled()) {
    UniqueFd fd(::open(path.c_str(), flags | O_DIRECT, mode));
    if (fd.valid() || errno != EINVAL) return fd;
    enabled_.store(false, std::memory_order_relaxed);  // tmpfs and others: buffered from now on
  }
  return UniqueFd(::open(path.c_str(), flags, mode));
}

Status DirectIo::WriteWhole(int fd, std::initializer_list<std::string_view> parts,
                            const std::function<Status(uint64_t)>& before_write) {
  uint64_t total = 0;
  for (std::string_view p : parts) total += p.size();
  const int fl = ::fcntl(fd, F_GETFL);
  const bool was_direct = fl >= 0 && (fl & O_DIRECT) != 0;
  if (was_direct) {
    Status s = WriteDirect(fd, parts, total, before_write);
    if (s.code() != Code::kInvalidArgument) return s;
    // The filesystem took O_DIRECT at open but not the writes: go on
    // buffered, on this fd and every later file.
    enabled_.store(false, std::memory_order_relaxed);
    if (::fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0) return Status::FromErrno(errno, "clear O_DIRECT");
  }
  uint64_t written = 0;
  for (std::string_view part : parts) {
    if (before_write) HOARD_RETURN_IF_ERROR(before_write(written));
    HOARD_RETURN_IF_ERROR(PwriteAll(fd, part.data(), part.size(), static_cast<off_t>(written)));
    written += part.size();
  }
  // A refused direct write may have left padding behind.
  if (was_direct && ::ftruncate(fd, static_cast<off_t>(total)) != 0) return Status::FromErrno(errno, "truncate");
  return Status::Ok();
}

Status DirectIo::WriteDirect(int fd, std::initializer_list<std::string_view> parts, uint64_t total,
                             const std::function<Status(uint64_t)>& before_write) {
  thread_local AlignedBuffer buf;
  if (buf == nullptr && (buf = AllocateAligned(kPiece)) == nullptr) {
    return Status::NoSpace("out of memory for a direct write buffer");
  }
  auto part = parts.begin();
  size_t in_part = 0;  // bytes of *part already copied
  uint64_t written = 0;
  while (written < total) {
    // Gather the next piece from the parts.
    size_t filled = 0;
    while (filled < kPiece && part != parts.end()) {
      const size_t n = std::min(kPiece - filled, part->size() - in_part);
      std::memcpy(buf.get() + filled, part->data() + in_part, n);
      filled += n;
      in_part += n;
      if (in_part == part->size()) {
        ++part;
        in_part = 0;
      }
    }
    // Only the last piece can be short: pad it to whole blocks.
    const size_t padded = RoundUp(filled);
    std::memset(buf.get() + filled, 0, padded - filled);
    if (before_write) HOARD_RETURN_IF_ERROR(before_write(written));
    HOARD_RETURN_IF_ERROR(PwriteAll(fd, buf.get(), padded, static_cast<off_t>(written)));
    written += filled;
  }
  if (total % kAlign != 0 && ::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    return Status::FromErrno(errno, "truncate");
  }
  return Status::Ok();
}

}  // namespace hoard
