// The dataset tree's file operations (fuse/dataset_fs.h): open, read, release, flush.
//
// Dataset reads are stateless: everything a read needs is in its inode number
// (the dataset slot and the manifest entry). The only per-file state is
// Passthrough's count of open files per inode (fuse/passthrough.h): a file
// wholly in one local chunk file is opened for kernel passthrough, and its
// reads never reach us. A warm read of a local chunk is one thread-local fd
// lookup and a splice from the chunk file: no lock, no allocation, no copy
// through this process.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "fuse/dataset_fs.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

// A dataset open's fh: 0, or this for one the kernel reads by passthrough.
constexpr uint64_t kPassthroughFh = 1;

// A random read's piece of a chunk is fetched as a range when it is at most
// this fraction of the chunk (512 KiB of 4 MiB), else as the whole chunk.
constexpr uint64_t kRangeFraction = 8;

}  // namespace

void DatasetFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const MountedDataset* ds = ns_.Slot(SlotOf(ino));
  const uint64_t entry = EntryOf(ino);
  if (!IsDatasetIno(ino) || ds == nullptr || entry >= ds->manifest().entry_count()) {
    fuse_reply_err(req, IsDatasetIno(ino) ? ESTALE : EISDIR);
    return;
  }
  if (ds->manifest().entry(static_cast<uint32_t>(entry)).is_dir()) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);  // datasets are read-only versions of the origin
    return;
  }
  // Counted at the open too: a passthrough open's reads never reach us.
  ds->NoteRead();
  // The version is immutable: pages cached by an earlier open stay valid.
  fi->keep_cache = 1;
  // Nothing to do at close(2): no FLUSH round trip for each file a reader
  // closes (a quarter of a small file's round trips).
  fi->noflush = 1;
  // A file of one chunk is opened to be read whole: if its chunk is on this
  // node's disk, open the chunk file now and have the disk start on it, so
  // that the reply and the reader's READ travel while the disk works. For a
  // small cold file that halves what the READ waits for. (A larger file may
  // be read anywhere; a sequential reader of it gets read-ahead. Starting
  // the fetch of a remote chunk here measured slower: bench/RESULTS.md.)
  LocalFds::Deferred deferred;
  const uint64_t size = ds->manifest().entry(static_cast<uint32_t>(entry)).size;
  int local = -1;
  if (size > 0 && size <= ds->manifest().chunk_size()) {
    // Checked whole: a passthrough open hands the kernel the file to read
    // as it likes, and no read of it comes back to us.
    local = reader_.LocalFd(*ds, static_cast<uint32_t>(entry), 0, 0, &deferred);
  }
  // Such a chunk file, if it is exactly the file's bytes (its record in the
  // xattr), can back the open: the kernel reads it without asking us. Asked
  // even with passthrough off: an inode opened for passthrough before it was
  // turned off must go on sharing its backing file (the kernel fails any
  // other open of it with EIO).
  struct stat st;
  const bool exact = local >= 0 && passthrough_.enabled() && ::fstat(local, &st) == 0 && uint64_t(st.st_size) == size;
  const Passthrough::Decision d = passthrough_.Open(ino, exact ? local : -1);
  fi->fh = d.passthrough ? kPassthroughFh : 0;
  // Counted before the reply, so the opener sees it counted.
  if (d.passthrough) {
    stats_.passthrough_opens.fetch_add(1, std::memory_order_relaxed);
    stats_.passthrough_bytes.fetch_add(size, std::memory_order_relaxed);
  }
  const int rc = d.passthrough ? Passthrough::ReplyOpen(req, *fi, d.backing_id) : fuse_reply_open(req, fi);
  if (rc != 0) {
    // An open the kernel never got (its caller was interrupted) gets no RELEASE.
    passthrough_.Release(ino, d.passthrough);
    if (d.passthrough) {
      stats_.passthrough_opens.fetch_sub(1, std::memory_order_relaxed);
      stats_.passthrough_bytes.fetch_sub(size, std::memory_order_relaxed);
    }
  }
}

void DatasetFs::Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  // AnySlot: a file opened before its dataset was removed keeps reading it.
  const MountedDataset* ds = ns_.AnySlot(SlotOf(ino));
  const uint64_t entry_id = EntryOf(ino);
  if (!IsDatasetIno(ino) || ds == nullptr || entry_id >= ds->manifest().entry_count()) {
    fuse_reply_err(req, IsDatasetIno(ino) ? ESTALE : EISDIR);
    return;
  }
  auto entry = static_cast<uint32_t>(entry_id);
  if (ds->retired.load(std::memory_order_acquire)) {
    // A file opened before its version was replaced (`dataset refresh`): if
    // the current version has the same file (the same key: same path, size
    // and mtime), read it as that file, whose owners serve it. A file that
    // changed keeps reading its own version: its chunks wherever they still
    // are, else the origin, which refuses a changed file: EIO, never the new
    // bytes.
    uint32_t current_entry = 0;
    if (const MountedDataset* current = ns_.Successor(*ds, entry, &current_entry); current != nullptr) {
      ds = current;
      entry = current_entry;
    }
  }
  const Manifest& m = ds->manifest();
  const uint64_t file_size = m.entry(entry).size;
  if (off < 0 || uint64_t(off) >= file_size || size == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const uint64_t end = std::min<uint64_t>(file_size, uint64_t(off) + size);
  const uint64_t chunk_size = m.chunk_size();
  stats_.CountRead(end - uint64_t(off));
  ds->NoteRead();
  // A sequential reader gets the chunks after this one fetched ahead, while
  // this request waits for its own; a random one gets just its range of a
  // chunk it does not hold.
  const bool random = reader_.NoteRead(*ds, entry, uint64_t(off), end);

  // One buffer per chunk the range touches: a local chunk file's fd (spliced
  // by libfuse) or bytes fetched from the network. The kernel sends at most
  // 1 MiB and chunks are at least 64 KiB, so the vector lives on the stack.
  const size_t pieces = (end - 1) / chunk_size - uint64_t(off) / chunk_size + 1;
  constexpr size_t kStackPieces = 20;
  alignas(fuse_bufvec) char stack_vec[sizeof(fuse_bufvec) + kStackPieces * sizeof(fuse_buf)];
  std::vector<char> heap_vec;
  char* vec_mem = stack_vec;
  if (pieces > kStackPieces) {
    heap_vec.resize(sizeof(fuse_bufvec) + pieces * sizeof(fuse_buf));
    vec_mem = heap_vec.data();
  }
  auto* vec = reinterpret_cast<fuse_bufvec*>(vec_mem);
  *vec = FUSE_BUFVEC_INIT(0);
  vec->count = pieces;
  // Network bytes must outlive the reply, and so must every local fd this
  // request uses: a cached fd evicted by a later piece is closed by
  // `deferred` after the reply, not under it.
  std::vector<ChunkReader::Bytes> remote;
  LocalFds::Deferred deferred;
  uint64_t pos = uint64_t(off);
  uint64_t local = 0;
  for (size_t i = 0; i < pieces; ++i) {
    const uint64_t chunk = pos / chunk_size;
    const uint64_t in_chunk = pos - chunk * chunk_size;
    const uint64_t len = std::min(end, (chunk + 1) * chunk_size) - pos;
    fuse_buf& b = vec->buf[i];
    b = fuse_buf{};
    b.size = len;
    if (const int fd = reader_.LocalFd(*ds, entry, static_cast<uint32_t>(chunk), in_chunk, &deferred);
        fd >= 0) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = fd;
      b.pos = static_cast<off_t>(in_chunk);
      local += len;
    } else {
      uint64_t at = in_chunk;
      // A small piece of a random read fetches just its range. A large one
      // (a page fault's read-around: 1 MiB requests) takes the whole chunk,
      // which the memory cache and the read tier then keep for the next
      // faults near it: measured faster than ranges fetched again each time.
      const bool range = random && len * kRangeFraction <= chunk_size;
      Result<ChunkReader::Bytes> bytes =
          range ? reader_.FetchRange(*ds, entry, static_cast<uint32_t>(chunk), in_chunk, len, &at)
                 : reader_.FetchRemote(*ds, entry, static_cast<uint32_t>(chunk));
      if (!bytes.ok()) {
        options_.logger->error("read {}/{} at {}: {}", ds->name, m.Path(entry), pos, bytes.status().ToString());
        stats_.read_errors.fetch_add(1, std::memory_order_relaxed);
        // Whatever the cause, a read that cannot be served is an I/O error:
        // ENOENT or ENOSPC from read(2) would only confuse the reader.
        fuse_reply_err(req, EIO);
        return;
      }
      b.mem = const_cast<char*>((*bytes)->data() + at);
      remote.push_back(std::move(*bytes));
    }
    pos += len;
  }
  if (local > 0) {
    reader_.counters().local_bytes.fetch_add(local, std::memory_order_relaxed);
    // Spliced, but not moved: with SPLICE_F_MOVE the kernel may steal a page
    // out of the chunk file's page cache into the file's, and the next read
    // of that chunk then finds it not wholly cached and checks all of it
    // again (measured: 8,770 whole-chunk checks for 10,965 random 16 KiB
    // reads of 64 chunks; bench/RESULTS.md, issue 34 item 4).
    fuse_reply_data(req, vec, static_cast<fuse_buf_copy_flags>(0));
    return;
  }
  // Only bytes in memory: one writev to the FUSE device copies them once.
  // (libfuse would splice them, which first copies them into a pipe: a
  // third of the mount's CPU time when reading small files through.)
  iovec stack_iov[kStackPieces];
  std::vector<iovec> heap_iov;
  iovec* iov = stack_iov;
  if (pieces > kStackPieces) {
    heap_iov.resize(pieces);
    iov = heap_iov.data();
  }
  for (size_t i = 0; i < pieces; ++i) iov[i] = iovec{vec->buf[i].mem, vec->buf[i].size};
  fuse_reply_iov(req, iov, static_cast<int>(pieces));
}

void DatasetFs::Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  passthrough_.Release(ino, fi->fh == kPassthroughFh);
  if (fi->flock_release) dataset_locks_.ReleaseOwner(ino, 1, fi->lock_owner, /*flock=*/true);
  fuse_reply_err(req, 0);
}

void DatasetFs::Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // A close(2) drops its process's POSIX locks on the file.
  dataset_locks_.ReleaseOwner(ino, 1, fi->lock_owner, /*flock=*/false);
  fuse_reply_err(req, 0);
}

}  // namespace hoard::fuse
