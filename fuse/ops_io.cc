// File operations: open, read, release.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "fuse/hoard_fs.h"
#include "fuse/inode.h"

namespace hoard::fuse {

HoardFs::LocalChunk::~LocalChunk() {
  if (fd >= 0) ::close(fd);
}

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
  auto* of = new OpenFile{ds, static_cast<uint32_t>(entry)};
  fi->fh = reinterpret_cast<uint64_t>(of);
  // The version is immutable: pages cached by an earlier open stay valid.
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

std::shared_ptr<HoardFs::LocalChunk> HoardFs::Local(OpenFile* of, uint64_t chunk) {
  {
    std::lock_guard lock(of->mu);
    for (const auto& lc : of->recent) {
      if (lc && lc->chunk == chunk) return lc;
    }
  }
  // Not open in this handle, or not local when last tried (it may have been
  // cached since): an open() is cheap next to fetching the chunk elsewhere.
  const int fd = reader_.OpenLocal(*of->dataset, of->entry, static_cast<uint32_t>(chunk));
  if (fd < 0) return nullptr;
  auto lc = std::make_shared<LocalChunk>();
  lc->chunk = chunk;
  lc->fd = fd;
  std::lock_guard lock(of->mu);
  of->recent[of->next_slot] = lc;
  of->next_slot = (of->next_slot + 1) % OpenFile::kRecent;
  return lc;
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
  // What the buffers point into must outlive the reply.
  std::vector<std::shared_ptr<LocalChunk>> locals;
  std::vector<ChunkReader::Bytes> remote;
  uint64_t pos = uint64_t(off);
  for (size_t i = 0; i < pieces; ++i) {
    const uint64_t chunk = pos / chunk_size;
    const uint64_t in_chunk = pos - chunk * chunk_size;
    const uint64_t len = std::min(end, (chunk + 1) * chunk_size) - pos;
    fuse_buf& b = vec->buf[i];
    b = fuse_buf{};
    b.size = len;
    if (std::shared_ptr<LocalChunk> lc = Local(of, chunk)) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = lc->fd;
      b.pos = static_cast<off_t>(in_chunk);
      locals.push_back(std::move(lc));
      reader_.counters().local_bytes.fetch_add(len, std::memory_order_relaxed);
    } else {
      Result<ChunkReader::Bytes> bytes = reader_.FetchRemote(*of->dataset, of->entry, static_cast<uint32_t>(chunk));
      if (!bytes.ok()) {
        options_.logger->error("read {}/{} at {}: {}", of->dataset->name, m.Path(of->entry), pos,
                               bytes.status().ToString());
        // Whatever the cause, a read that cannot be served is an I/O error:
        // ENOENT or ENOSPC from read(2) would only confuse the reader.
        fuse_reply_err(req, EIO);
        return;
      }
      b.mem = const_cast<char*>((*bytes)->data() + in_chunk);
      remote.push_back(std::move(*bytes));
    }
    pos += len;
  }
  fuse_reply_data(req, vec, FUSE_BUF_SPLICE_MOVE);
}

void HoardFs::Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<OpenFile*>(fi->fh);
  fuse_reply_err(req, 0);
}

}  // namespace hoard::fuse
