#include "checkpoint/ckpt_write_behind.h"

#include <fcntl.h>

#include "common/hash.h"

namespace hoard::fuse {

WriteBehind::WriteBehind(int threads, Committer* committer,
                         std::function<std::shared_ptr<const ClusterView>()> current_view)
    : committer_(committer), current_view_(std::move(current_view)) {
  if (threads <= 0) return;
  bufs_.resize(static_cast<size_t>(threads));
  queue_ = std::make_unique<WorkQueue<Item>>(
      WorkQueue<Item>::Options{.name = "write-behind", .threads = static_cast<size_t>(threads),
                               .max_items = kMaxQueued},
      [this](Item& item, size_t thread) {
        if (std::shared_ptr<LocalFile> f = item.file.lock()) Send(*f, item, bufs_[thread]);
      });
}

WriteBehind::~WriteBehind() {
  if (queue_) queue_->Stop();  // drops what is queued: the commits send it
}

void WriteBehind::Wrote(const std::shared_ptr<LocalFile>& f, uint64_t off, uint64_t len) {
  const uint64_t cs = committer_->chunk_size();
  f->sent.Touch(cs, off, len);
  if (!queue_ || len == 0 || cs == 0) return;
  // The chunks whose last byte this write wrote: a sequential writer is done
  // with them. (A random writer may come back; that chunk is sent again.)
  const uint64_t gen = f->sent.next_gen();
  for (uint64_t c = off / cs; (c + 1) * cs <= off + len; ++c) {
    // Full: this chunk and the rest are left to the commit.
    if (!queue_->Push(Item{f, static_cast<uint32_t>(c), gen})) break;
  }
}

void WriteBehind::Send(LocalFile& f, const Item& item, std::string& buf) {
  std::optional<SentChunks::Ticket> t = f.sent.Claim(item.index, item.gen);
  if (!t) return;  // a commit runs, the generation moved on, or it was sent already
  std::optional<SentChunks::Sent> sent;
  std::shared_ptr<const ClusterView> view = current_view_();
  const uint64_t cs = Committer::ChunkSize(view.get());
  const off_t off = static_cast<off_t>(uint64_t(item.index) * cs);
  buf.resize(cs);
  // Not under f.mu: a write that lands while we read bumps the chunk's
  // version, and Finish then discards what we send.
  if (PreadAll(f.fd.get(), buf.data(), cs, off).ok()) {
    // Start the disk's writeback now rather than all at the commit's
    // fdatasync; this does not wait for it.
    (void)::sync_file_range(f.fd.get(), off, static_cast<off_t>(cs), SYNC_FILE_RANGE_WRITE);
    const uint64_t checksum = Checksum64(buf.data(), cs);
    // The same bytes as the committed generation's chunk: its copies count.
    sent = Committer::SameAsBase(view.get(), f, t->index, checksum, cs, cs, committer_->copies_wanted(view.get()));
    if (!sent) {
      sent = SentChunks::Sent{.checksum = checksum, .length = cs, .chunk_size = cs};
      if (view != nullptr) sent->holders = committer_->SendChunk(*view, f.id, t->gen, t->index, checksum, buf);
    }
  }
  f.sent.Finish(*t, std::move(sent));
}

}  // namespace hoard::fuse
