#include "fuse/read_tier.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

namespace hoard::fuse {
namespace {

// Drops of copies are logged once per this many, not each.
constexpr uint64_t kDropLogEvery = 1000;
// The writer thread's nice value (see WriterLoop).
constexpr int kWriterNice = 10;
// Bytes written between two looks at the disk's free space.
constexpr uint64_t kDiskCheckBytes = 64u << 20;

}  // namespace

void ReadTier::AutoSize(const std::string& dir, uint64_t* capacity_bytes, uint64_t* min_free_bytes) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) {
    *capacity_bytes = 0;
    *min_free_bytes = 0;
    return;
  }
  const uint64_t size = uint64_t(st.f_blocks) * st.f_frsize;
  const uint64_t avail = uint64_t(st.f_bavail) * st.f_frsize;
  *capacity_bytes = avail / 2;
  *min_free_bytes = std::min<uint64_t>(size / 10, 1ull << 30);
}

ReadTier::ReadTier(Options options) : options_(std::move(options)) {}

Result<std::unique_ptr<ReadTier>> ReadTier::Open(Options options) {
  const std::string chunks = JoinPath(options.dir, "chunks");
  HOARD_RETURN_IF_ERROR(MakeDirs(chunks));
  std::unique_ptr<ReadTier> tier(new ReadTier(std::move(options)));
  tier->chunks_dir_ = UniqueFd(::open(chunks.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!tier->chunks_dir_.valid()) return Status::FromErrno(errno, "read tier " + chunks);
  ReadTier* t = tier.get();
  tier->writer_ = std::make_unique<WorkQueue<Task>>(
      WorkQueue<Task>::Options{.name = "read-tier",
                               .threads = 1,
                               .max_cost = t->options_.max_pending_bytes,
                               .count_running = true,
                               .on_drop =
                                   [t](Task& task) {
                                     if (!std::holds_alternative<Index>(task)) {
                                       t->counters_.dropped_chunks.fetch_add(1, std::memory_order_relaxed);
                                     }
                                   }},
      [t](Task& task) { t->Run(task); });
  tier->writer_->Push(Index{});
  return tier;
}

ReadTier::~ReadTier() {
  if (writer_) writer_->Stop();
}

void ReadTier::Offer(const ChunkKey& key, uint64_t dataset_uid, std::shared_ptr<const std::string> bytes) {
  const size_t size = bytes->size();
  // The queue would take a copy larger than the bound when it is empty.
  if (size > options_.max_pending_bytes || !writer_->Push(Copy{key, dataset_uid, std::move(bytes)}, size)) {
    counters_.dropped_chunks.fetch_add(1, std::memory_order_relaxed);
  }
}

void ReadTier::RemoveDataset(uint64_t dataset_uid) { (void)writer_->Push(Removal{dataset_uid}); }

void ReadTier::Discard(const ChunkKey& key) {
  // The name goes now, so that no other read checks the copy again; the
  // writer thread then drops it from the store's index.
  char rel[ChunkStore::kRelativePathSize];
  ChunkStore::RelativeChunkPath(key, rel);
  (void)::unlinkat(chunks_dir_.get(), rel, 0);
  (void)writer_->Push(Discarded{key});
}

void ReadTier::Flush() { writer_->WaitIdle(); }

void ReadTier::OpenStore() {
  // Index the copies a previous run left (reading each record) here, not in
  // Open: the mount must not wait for it. Until then nothing is written, and
  // reads of copies already work (the mount verifies a copy at first use).
  // Copies are background work: the readers of this node come first for the
  // CPU (a first pass is often CPU-bound on peers' transfers), so the writer
  // runs niced; a writer that falls behind drops copies, it never slows a read.
  // (This is the first task of the writer's only thread, which keeps the
  // nice value for its life.)
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWriterNice);
  // Not read back after each write (a second disk read per copy, on the
  // disk the readers use): the mount verifies a copy at its first use
  // instead, see on_stored.
  Result<std::unique_ptr<ChunkStore>> opened = ChunkStore::Open(ChunkStore::Options{
      .dir = options_.dir, .capacity_bytes = options_.capacity_bytes, .verify_puts = false,
      .logger = options_.logger});
  if (opened.ok()) {
    store_ = std::move(*opened);
    store_->ForEach([this](const ChunkKey& key, uint64_t, uint64_t) { order_.push_back(key); });
    UpdateUsage();
    options_.logger->info("read tier {}: {} copies, {} bytes, up to {} bytes", options_.dir, order_.size(),
                          counters_.used_bytes.load(), options_.capacity_bytes);
  } else {
    options_.logger->warn("read tier {} not written: {}", options_.dir, opened.status().ToString());
  }
}

void ReadTier::Run(Task& task) {
  if (std::holds_alternative<Index>(task)) {
    OpenStore();
  } else if (auto* copy = std::get_if<Copy>(&task)) {
    Store(*copy);
  } else if (store_ == nullptr) {
  } else if (auto* removal = std::get_if<Removal>(&task)) {
    const size_t n = store_->RemoveDataset(removal->dataset_uid);
    if (n > 0) options_.logger->info("read tier: removed {} copies of a removed dataset", n);
    UpdateUsage();
  } else if (Status s = store_->Remove(std::get<Discarded>(task).key); !s.ok() && s.code() != Code::kNotFound) {
    options_.logger->warn("read tier: removing a bad copy of {}: {}", std::get<Discarded>(task).key.Name(),
                          s.ToString());
  } else {
    UpdateUsage();
  }
}

void ReadTier::Store(const Copy& copy) {
  auto drop = [&](const Status& why) {
    const uint64_t n = counters_.dropped_chunks.fetch_add(1, std::memory_order_relaxed);
    if (n % kDropLogEvery == 0) {
      options_.logger->warn("read tier: copy of {} not kept ({}); {} dropped so far", copy.key.Name(),
                            why.ToString(), n + 1);
    }
  };
  if (store_ == nullptr) return drop(Status::Unavailable("the tier could not be opened"));
  if (store_->Contains(copy.key)) return;
  if (copy.bytes->size() + kChunkMetaSize > options_.capacity_bytes) {
    return drop(Status::NoSpace("larger than the whole tier"));
  }
  // The node agent's chunks come first: make room on the disk before writing.
  // Free space is looked at every kDiskCheckBytes written, not per copy (a
  // small-file epoch stores thousands a second).
  if (written_since_check_ >= kDiskCheckBytes) {
    written_since_check_ = 0;
    disk_low_ = DiskLow();
  }
  while (disk_low_) {
    if (!EvictOldest()) {
      written_since_check_ = kDiskCheckBytes;  // look again at the next copy
      return drop(Status::NoSpace("the disk is low on free space"));
    }
    disk_low_ = DiskLow();
  }
  for (;;) {
    Status s = store_->Put(copy.key, copy.dataset_uid, *copy.bytes);
    if (s.ok()) break;
    if (s.code() != Code::kNoSpace || !EvictOldest()) {
      UpdateUsage();
      return drop(s);
    }
  }
  order_.push_back(copy.key);
  written_since_check_ += copy.bytes->size();
  counters_.stored_chunks.fetch_add(1, std::memory_order_relaxed);
  counters_.stored_bytes.fetch_add(copy.bytes->size(), std::memory_order_relaxed);
  UpdateUsage();
  if (options_.on_stored) options_.on_stored(copy.key);
}

bool ReadTier::EvictOldest() {
  while (!order_.empty()) {
    const ChunkKey key = order_.front();
    order_.pop_front();
    Result<uint64_t> len = store_->Length(key);
    if (!len.ok()) continue;  // removed with its dataset
    if (Status s = store_->Remove(key); !s.ok()) {
      options_.logger->warn("read tier: evicting {}: {}", key.Name(), s.ToString());
      continue;
    }
    counters_.evicted_bytes.fetch_add(*len, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool ReadTier::DiskLow() const {
  if (options_.min_free_bytes == 0) return false;
  struct statvfs st;
  if (::statvfs(options_.dir.c_str(), &st) != 0) return false;
  return uint64_t(st.f_bavail) * st.f_frsize < options_.min_free_bytes;
}

void ReadTier::UpdateUsage() {
  const ChunkStore::Usage u = store_->usage();
  counters_.used_bytes.store(u.used_bytes, std::memory_order_relaxed);
  counters_.chunks.store(u.chunks, std::memory_order_relaxed);
}

}  // namespace hoard::fuse
