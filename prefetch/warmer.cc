#include "prefetch/warmer.h"

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
    std::map<uint64_t, std::map<std::string, std::string>> kept;
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
  for (const auto& [path, error] : it->second) out.push_back({path, error});
  return out;
}

void Warmer::RecordFailure(uint64_t uid, const std::string& path, const std::string& error) {
  std::lock_guard lock(mu_);
  auto& f = failures_[uid];
  if (f.size() < 100 || f.count(path)) {
    f[path] = error;
    failure_generation_.fetch_add(1);
  }
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
        }
      }
    }
    const std::string path = job.dataset->manifest.Path(job.chunk.entry);
    Result<ChunkFiller::FillResult> r = filler_->Fill(*job.dataset, job.chunk, /*cache=*/true);
    const uint64_t uid = job.dataset->meta.uid;
    if (!r.ok()) {
      options_.logger->warn("warm {}: {}: {}", job.dataset->meta.name, path, r.status().ToString());
      RecordFailure(uid, path, r.status().ToString());
      continue;
    }
    if (!r->cache_status.ok()) {
      RecordFailure(uid, path, r->cache_status.ToString());
      if (r->cache_status.code() == Code::kNoSpace) {
        std::lock_guard lock(mu_);
        if (job.generation == generation_ && job.target < blocked_.size() && !blocked_[job.target]) {
          blocked_[job.target] = true;
          options_.logger->error("warm {}: stopped: {}", job.dataset->meta.name, r->cache_status.ToString());
        }
      }
      continue;
    }
    fetched_chunks_.fetch_add(1);
    fetched_bytes_.fetch_add(job.chunk.length);
    std::lock_guard lock(mu_);
    auto it = failures_.find(uid);
    if (it != failures_.end() && it->second.erase(path) > 0) failure_generation_.fetch_add(1);
  }
}

}  // namespace hoard
