// File: checkpoint/ckpt_write_behind.h
//
// WriteBehind replicates a checkpoint file's chunks while the training job is
// still writing it, so that fsync/close, which must return only once the file
// is at R, finds most chunks already at their holders and waits for the tail.
// Without it the commit reads back, checksums and sends every byte after the
// last write: for a sequential writer, write time plus replication time,
// instead of roughly the larger of the two.
//
// A write that reaches the end of a chunk queues that chunk. A pool of
// threads (a WorkQueue, common/work_queue.h) takes queued chunks, reads them back from the page cache, starts
// the local disk's writeback of them (sync_file_range, so the commit's
// fdatasync has less left to flush), checksums them and sends them to their
// holders for the file's next generation (Committer::SendChunk), and records
// the result in the file's SentChunks. A chunk written again afterwards is
// simply sent again by the commit (checkpoint/ckpt_sent_chunks.h says why that is
// safe). Nothing here is needed for correctness: a chunk that is dropped
// (queue full, a send that failed, the mount stopping) is sent by the commit.
//
// Thread-safety: Wrote may be called from any thread, with the file's
// LocalFile::mu held (it orders the version bump with the write).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "common/work_queue.h"
#include "checkpoint/ckpt_commit.h"

namespace hoard::fuse {

class WriteBehind {
 public:
  // `threads` 0 turns it off: commits send everything.
  WriteBehind(int threads, Committer* committer, std::function<std::shared_ptr<const ClusterView>()> current_view);
  ~WriteBehind();  // drops what is queued (the commits send it)

  // `f` got bytes [off, off + len): bumps the versions of the chunks they
  // touch and queues the chunks the write completed.
  void Wrote(const std::shared_ptr<LocalFile>& f, uint64_t off, uint64_t len) REQUIRES(f->mu);

 private:
  struct Item {
    std::weak_ptr<LocalFile> file;
    uint32_t index;
    uint64_t gen;  // the file's next generation when queued
  };
  // Beyond this many queued chunks, new ones are left to the commit (a
  // writer much faster than the network must not queue without bound).
  static constexpr size_t kMaxQueued = 4096;

  void Send(LocalFile& f, const Item& item, std::string& buf);

  Committer* committer_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  // A chunk buffer per worker thread (indexed by the queue's thread index).
  std::vector<std::string> bufs_;
  // Null when off. Its lock is taken with a LocalFile::mu held (Wrote),
  // never the other way round. Declared last: its threads use the above.
  std::unique_ptr<WorkQueue<Item>> queue_;
};

}  // namespace hoard::fuse
