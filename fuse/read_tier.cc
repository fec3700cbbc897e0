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
// How far past what it holds the tier reserves at a time, and how much its
// reservation may grow in a second: a sixteenth of its budget (see the top of
// read_tier.h). Copies within the reservation are written without reading
// the budget's files and the disk's free space for each.
constexpr uint64_t kStepDivisor = 16;
constexpr std::chrono::seconds kStepWindow{1};

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

ReadTier::ReadTier(Options options)
    : options_(std::move(options)),
      budget_(ReadTierBudget::Options{.dir = options_.dir,
                                      .node_usage_path = options_.node_usage_path,
                                      .size_bytes = options_.capacity_bytes,
                                      .min_free_bytes = options_.min_free_bytes,
                                      .disk_free = options_.disk_free}),
      usage_path_(ReadTierUsagePath(options_.dir)) {}

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

void ReadTier::Trim() { (void)writer_->Push(TrimTask{}); }

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
    // The node's capacity may have shrunk while the mount was away.
    TrimTo(Allowed());
    Publish(store_->usage().used_bytes);
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
  } else if (std::holds_alternative<TrimTask>(task)) {
    const uint64_t allowed = Allowed();
    TrimTo(allowed);
    // Never more than the budget: room the tier no longer may take is
    // given back to the agent's admission.
    Publish(std::max(store_->usage().used_bytes, std::min(reserved_, allowed)));
    UpdateUsage();
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
  const uint64_t need = copy.bytes->size() + kChunkMetaSize;  // at most: the trailer, where there is one
  if (need > options_.capacity_bytes) return drop(Status::NoSpace("larger than the whole tier"));
  // The node agent's chunks and checkpoints come first: past the last
  // reservation, ask the budget, make room and reserve before writing.
  if (store_->usage().used_bytes + need > reserved_) {
    const uint64_t allowed = Allowed();
    if (need > allowed) {
      TrimTo(allowed);
      Publish(store_->usage().used_bytes);
      UpdateUsage();
      return drop(Status::NoSpace("no room for the read tier (the node's capacity is held by its datasets and "
                                  "checkpoints, or its disk is low on free space)"));
    }
    TrimTo(allowed - need);
    const uint64_t used = store_->usage().used_bytes;
    const uint64_t step = std::max<uint64_t>(allowed / kStepDivisor, need);
    uint64_t reservation = std::min(allowed, used + need + step);
    if (SharesCapacity()) {
      const auto now = options_.clock->Now();
      if (now - window_start_ >= kStepWindow) {
        window_start_ = now;
        window_base_ = reserved_;
      }
      // No further than a step past the reservation of a second ago: the
      // node agent may not have seen the last one yet.
      reservation = std::min(reservation, window_base_ + step);
      if (used + need > reservation) {
        return drop(Status::NoSpace("the read tier grows by at most a sixteenth of its budget a second"));
      }
    }
    Publish(reservation);
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

uint64_t ReadTier::Allowed() {
  const uint64_t allowed = budget_.Allowed(store_->usage().used_bytes);
  counters_.allowed_bytes.store(allowed, std::memory_order_relaxed);
  return allowed;
}

bool ReadTier::SharesCapacity() const {
  if (options_.node_usage_path.empty()) return false;
  Result<NodeUsageRecord> node = ReadNodeUsage(options_.node_usage_path);
  return node.ok() && node->capacity_bytes != 0;
}

void ReadTier::TrimTo(uint64_t allowed) {
  while (store_->usage().used_bytes > allowed && EvictOldest()) {
  }
}

void ReadTier::Publish(uint64_t reserved) {
  reserved_ = reserved;
  Status s = WriteReadTierUsage(usage_path_, {.used_bytes = store_->usage().used_bytes, .reserved_bytes = reserved});
  if (!s.ok() && !publish_failed_) {
    options_.logger->warn("read tier: cannot tell the node agent what the tier holds: {}", s.ToString());
  }
  publish_failed_ = !s.ok();
}

void ReadTier::UpdateUsage() {
  const ChunkStore::Usage u = store_->usage();
  counters_.used_bytes.store(u.used_bytes, std::memory_order_relaxed);
  counters_.chunks.store(u.chunks, std::memory_order_relaxed);
}

}  // namespace hoard::fuse
