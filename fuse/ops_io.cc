// File operations: open, read, release.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "fuse/errno.h"
#include "fuse/hoard_fs.h"
#include "fuse/inode.h"

namespace hoard::fuse {

void HoardFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const MountedDataset* ds = ns_.Slot(SlotOf(ino));
  const uint64_t entry = EntryOf(ino);
  if (!IsDatasetIno(ino) || ds == nullptr || entry >= ds->manifest().entry_count()) {
    fuse_reply_err(req, IsDatasetIno(ino) ? ESTALE : EISDIR);
    return;
  }
  const EntryRecord& r = ds->manifest().entry(static_cast<uint32_t>(entry));
  if (r.is_dir()) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);  // datasets are read-only versions of the origin
    return;
  }
  auto* of = new OpenFile{ds, static_cast<uint32_t>(entry), nullptr, ds->manifest().chunk_count(uint32_t(entry))};
  of->local_fds.reset(new std::atomic<int>[of->chunks]);
  for (uint64_t i = 0; i < of->chunks; ++i) of->local_fds[i].store(-1, std::memory_order_relaxed);
  fi->fh = reinterpret_cast<uint64_t>(of);
  // The version is immutable: pages cached by an earlier open stay valid.
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

int HoardFs::LocalFd(OpenFile* of, uint64_t chunk) {
  int fd = of->local_fds[chunk].load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  // Not opened yet, or not local when last tried (it may have been cached since).
  fd = reader_.OpenLocal(*of->dataset, of->entry, static_cast<uint32_t>(chunk));
  if (fd < 0) return -1;
  int expected = -1;
  if (!of->local_fds[chunk].compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
    ::close(fd);  // another reader opened it first
    return expected;
  }
  return fd;
}

void HoardFs::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* of = reinterpret_cast<OpenFile*>(fi->fh);
  const Manifest& m = of->dataset->manifest();
  const uint64_t file_size = m.entry(of->entry).size;
  if (off < 0 || uint64_t(off) >= file_size || size == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const uint64_t end = std::min<uint64_t>(file_size, uint64_t(off) + size);
  const uint64_t chunk_size = m.chunk_size();

  // One buffer per chunk the range touches: a local chunk file's fd (spliced
  // by libfuse when the kernel allows) or the bytes fetched from the network.
  const size_t pieces = (end - 1) / chunk_size - uint64_t(off) / chunk_size + 1;
  std::vector<char> vec_storage(sizeof(fuse_bufvec) + (pieces - 1) * sizeof(fuse_buf));
  auto* vec = reinterpret_cast<fuse_bufvec*>(vec_storage.data());
  *vec = FUSE_BUFVEC_INIT(0);
  vec->count = pieces;
  std::vector<ChunkReader::Bytes> keep;  // remote bytes must outlive the reply
  uint64_t pos = uint64_t(off);
  for (size_t i = 0; i < pieces; ++i) {
    const uint64_t chunk = pos / chunk_size;
    const uint64_t in_chunk = pos - chunk * chunk_size;
    const uint64_t len = std::min(end, (chunk + 1) * chunk_size) - pos;
    fuse_buf& b = vec->buf[i];
    b = fuse_buf{};
    b.size = len;
    const int fd = LocalFd(of, chunk);
    if (fd >= 0) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = fd;
      b.pos = static_cast<off_t>(in_chunk);
      reader_.counters().local_bytes.fetch_add(len, std::memory_order_relaxed);
    } else {
      Result<ChunkReader::Bytes> bytes = reader_.FetchRemote(*of->dataset, of->entry, static_cast<uint32_t>(chunk));
      if (!bytes.ok()) {
        options_.logger->error("read {}/{} at {}: {}", of->dataset->name, m.Path(of->entry), pos,
                               bytes.status().ToString());
        fuse_reply_err(req, ToErrno(bytes.status()));
        return;
      }
      b.mem = const_cast<char*>((*bytes)->data() + in_chunk);
      keep.push_back(std::move(*bytes));
    }
    pos += len;
  }
  fuse_reply_data(req, vec, FUSE_BUF_SPLICE_MOVE);
}

void HoardFs::Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* of = reinterpret_cast<OpenFile*>(fi->fh);
  for (uint64_t i = 0; i < of->chunks; ++i) {
    int fd = of->local_fds[i].load(std::memory_order_relaxed);
    if (fd >= 0) ::close(fd);
  }
  delete of;
  fuse_reply_err(req, 0);
}

}  // namespace hoard::fuse
