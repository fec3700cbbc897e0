#include "prefetch/warmer.h"

#include "node/chunk_file.h"

namespace hoard {

Warmer::Warmer(ChunkFiller* filler, ChunkStore* store, Options options)
    : filler_(filler), store_(store), options_(std::move(options)) {}

Warmer::~Warmer() { Stop(); }

void Warmer::Start() {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

void Warmer::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void Warmer::SetTargets(std::vector<Target> targets) {
  {
    std::lock_guard lock(mu_);
    targets_ = std::move(targets);
    cursor_.assign(targets_.size(), 0);
    blocked_.assign(targets_.size(), false);
    ++generation_;
    // Failures of datasets no longer targeted are stale.
    std::map<uint64_t, std::map<uint64_t, proto::FileFailure>> kept;
    for (const auto& t : targets_) {
      auto it = failures_.find(t.dataset->meta.uid);
      if (it != failures_.end()) kept.insert(*it);
    }
    failures_ = std::move(kept);
    failure_generation_.fetch_add(1);
  }
  cv_.notify_all();
}

std::vector<proto::FileFailure> Warmer::Failures(uint64_t uid) const {
  std::lock_guard lock(mu_);
  std::vector<proto::FileFailure> out;
  auto it = failures_.find(uid);
  if (it == failures_.end()) return out;
  for (const auto& [ordinal, f] : it->second) {
    if (!out.empty() && out.back().path == f.path) continue;  // one line per file
    out.push_back(f);
    if (out.size() == 100) break;
  }
  return out;
}

void Warmer::RecordFailure(const Job& job, const std::string& path, const std::string& error) {
  std::lock_guard lock(mu_);
  auto& f = failures_[job.dataset->meta.uid];
  if (f.size() < kMaxFailures || f.count(job.chunk.ordinal)) {
    f[job.chunk.ordinal] = proto::FileFailure{path, error};
    failure_generation_.fetch_add(1);
  }
}

void Warmer::ClearFailure(const Job& job) {
  std::lock_guard lock(mu_);
  auto it = failures_.find(job.dataset->meta.uid);
  if (it != failures_.end() && it->second.erase(job.chunk.ordinal) > 0) failure_generation_.fetch_add(1);
}

bool Warmer::NextJobLocked(Job* job) {
  for (size_t t = 0; t < targets_.size(); ++t) {
    if (blocked_[t]) continue;
    const auto& owned = *targets_[t].owned;
    const DatasetView& ds = *targets_[t].dataset;
    while (cursor_[t] < owned.size()) {
      const ChunkRef& c = owned[cursor_[t]++];
      if (store_->Contains(ds.manifest.chunk_key(c.entry, c.index))) continue;
      *job = Job{targets_[t].dataset, c, t, generation_};
      return true;
    }
  }
  return false;
}

void Warmer::WorkerLoop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      while (true) {
        if (stopping_) return;
        if (NextJobLocked(&job)) break;
        // Everything scanned: rescan after retry_after (failed chunks, a store
        // that had no room), or sooner when the targets change.
        const uint64_t gen = generation_;
        if (next_rescan_ <= std::chrono::steady_clock::now()) {
          next_rescan_ = std::chrono::steady_clock::now() + options_.retry_after;
        }
        cv_.wait_until(lock, next_rescan_, [&] { return stopping_ || generation_ != gen; });
        if (!stopping_ && generation_ == gen) {
          cursor_.assign(targets_.size(), 0);
          blocked_.assign(targets_.size(), false);
          capacity_logged_.clear();
        }
      }
    }
    const std::string path = job.dataset->manifest.Path(job.chunk.entry);
    const std::string& name = job.dataset->meta.name;
    // Do not read from the origin what the store has no room to keep.
    const ChunkStore::Usage before = store_->usage();
    if (before.capacity_bytes != 0 &&
        before.used_bytes + job.chunk.length + kChunkTrailerSize > before.capacity_bytes) {
      RecordFailure(job, path,
                    "NoSpace: the chunk store is at its capacity (" + std::to_string(before.used_bytes) + " of " +
                        std::to_string(before.capacity_bytes) + " bytes used)");
      std::lock_guard lock(mu_);
      if (capacity_logged_.insert(job.dataset->meta.uid).second) {
        options_.logger->error("warm {}: the chunk store is full ({} of {} bytes); chunks that do not fit are "
                               "skipped and listed as failures",
                               name, before.used_bytes, before.capacity_bytes);
      }
      continue;
    }
    Result<ChunkFiller::FillResult> r = filler_->Fill(*job.dataset, job.chunk, /*cache=*/true);
    if (!r.ok()) {
      options_.logger->warn("warm {}: {}: {}", name, path, r.status().ToString());
      RecordFailure(job, path, r.status().ToString());
      continue;
    }
    if (!r->cache_status.ok()) {
      RecordFailure(job, path, r->cache_status.ToString());
      const ChunkStore::Usage after = store_->usage();
      const bool over_capacity = after.capacity_bytes != 0 &&
                                 after.used_bytes + job.chunk.length + kChunkTrailerSize > after.capacity_bytes;
      if (r->cache_status.code() == Code::kNoSpace && !over_capacity) {
        // The disk itself is full: stop this dataset until the retry.
        std::lock_guard lock(mu_);
        if (job.generation == generation_ && job.target < blocked_.size() && !blocked_[job.target]) {
          blocked_[job.target] = true;
          options_.logger->error("warm {}: stopped: {}", name, r->cache_status.ToString());
        }
      }
      continue;
    }
    fetched_chunks_.fetch_add(1);
    fetched_bytes_.fetch_add(job.chunk.length);
    ClearFailure(job);
  }
}

}  // namespace hoard
