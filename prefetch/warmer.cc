#include "prefetch/warmer.h"

#include <algorithm>

#include "store/chunk_file.h"

namespace hoard {
namespace {

// True if `ds` (this uid and version) is one of `targets`: a job of another
// version (it ran across a refresh, whose ordinals name other chunks) has
// nothing to say about the current failures.
bool Targeted(const std::vector<Warmer::Target>& targets, const DatasetView& ds) {
  return std::any_of(targets.begin(), targets.end(), [&](const Warmer::Target& t) {
    return t.dataset->meta.uid == ds.meta.uid && t.dataset->meta.version == ds.meta.version;
  });
}

}  // namespace

Warmer::Warmer(ChunkFiller* filler, ChunkStore* store, Options options)
    : filler_(filler), store_(store), options_(std::move(options)) {}

Warmer::~Warmer() { Stop(); }

void Warmer::Start() {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

void Warmer::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void Warmer::SetOnIdle(std::function<void()> on_idle) {
  MutexLock lock(&mu_);
  on_idle_ = std::move(on_idle);
}

bool Warmer::WaitIdle(std::chrono::milliseconds timeout) const {
  MutexLock lock(&mu_);
  const auto deadline = options_.clock->Now() + timeout;
  while (!(idle_notified_ && in_flight_ == 0 && !targets_.empty()) && !stopping_) {
    if (!options_.clock->WaitUntil(&idle_cv_, &mu_, deadline)) break;
  }
  return idle_notified_ && in_flight_ == 0 && !targets_.empty();
}

void Warmer::SetTargets(std::vector<Target> targets) {
  {
    MutexLock lock(&mu_);
    // A backoff outlives a map change: the origin is no more available for it.
    std::map<uint64_t, Backoff> backoffs;
    std::map<uint64_t, uint32_t> versions;  // of the previous targets, by uid
    for (size_t t = 0; t < targets_.size(); ++t) {
      backoffs[targets_[t].dataset->meta.uid] = std::move(backoff_[t]);
      versions[targets_[t].dataset->meta.uid] = targets_[t].dataset->meta.version;
    }
    targets_ = std::move(targets);
    cursor_.assign(targets_.size(), 0);
    blocked_.assign(targets_.size(), false);
    backoff_.assign(targets_.size(), Backoff{});
    for (size_t t = 0; t < targets_.size(); ++t) {
      auto it = backoffs.find(targets_[t].dataset->meta.uid);
      if (it == backoffs.end()) continue;
      backoff_[t].until = it->second.until;
      backoff_[t].interval = it->second.interval;
      // The retry list names chunks of the old owned set; the fresh scan
      // finds them again.
    }
    ++generation_;
    idle_notified_ = false;
    // Failures of datasets no longer targeted are stale, and so are those of
    // a previous version (a refresh): its ordinals name other chunks now.
    std::map<uint64_t, std::map<uint64_t, proto::FileFailure>> kept;
    for (const auto& t : targets_) {
      auto it = failures_.find(t.dataset->meta.uid);
      auto v = versions.find(t.dataset->meta.uid);
      if (it != failures_.end() && v != versions.end() && v->second == t.dataset->meta.version) kept.insert(*it);
    }
    failures_ = std::move(kept);
    failure_generation_.fetch_add(1);
  }
  cv_.NotifyAll();
}

std::vector<proto::FileFailure> Warmer::Failures(uint64_t uid) const {
  MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  if (!Targeted(targets_, *job.dataset)) return;
  auto& f = failures_[job.dataset->meta.uid];
  if (f.size() < kMaxFailures || f.count(job.chunk.ordinal)) {
    f[job.chunk.ordinal] = proto::FileFailure{path, error};
    failure_generation_.fetch_add(1);
  }
}

void Warmer::ClearFailure(const Job& job) {
  MutexLock lock(&mu_);
  if (!Targeted(targets_, *job.dataset)) return;
  auto it = failures_.find(job.dataset->meta.uid);
  if (it != failures_.end() && it->second.erase(job.chunk.ordinal) > 0) failure_generation_.fetch_add(1);
}

std::chrono::milliseconds Warmer::BackOff(const Job& job) {
  MutexLock lock(&mu_);
  if (job.generation != generation_ || job.target >= backoff_.size()) return options_.first_backoff;
  Backoff& b = backoff_[job.target];
  const auto now = options_.clock->Now();
  // Workers that fail together (they were all waiting on the same dead
  // server) extend one interval, not one each.
  if (b.until <= now) {
    b.interval = b.interval.count() == 0 ? options_.first_backoff
                                         : std::min(options_.max_backoff, b.interval * 2);
    b.until = now + b.interval;
  }
  b.retry.push_back(job.chunk);
  return b.interval;
}

void Warmer::EndBackoff(const Job& job) {
  MutexLock lock(&mu_);
  if (job.generation != generation_ || job.target >= backoff_.size()) return;
  Backoff& b = backoff_[job.target];
  if (b.interval.count() == 0) return;
  b.interval = std::chrono::milliseconds(0);
  b.until = {};
  cv_.NotifyAll();  // workers parked on the backoff may go on
}

bool Warmer::NextJobLocked(Job* job, std::chrono::steady_clock::time_point now) {
  for (size_t t = 0; t < targets_.size(); ++t) {
    if (blocked_[t] || backoff_[t].until > now) continue;
    const DatasetView& ds = *targets_[t].dataset;
    std::vector<ChunkRef>& retry = backoff_[t].retry;
    while (!retry.empty()) {
      const ChunkRef c = retry.back();
      retry.pop_back();
      if (store_->Contains(ds.manifest.chunk_key(c.entry, c.index))) continue;
      *job = Job{targets_[t].dataset, c, t, generation_};
      return true;
    }
    const auto& owned = *targets_[t].owned;
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
      MutexLock lock(&mu_);
      while (true) {
        if (stopping_) return;
        const auto now = options_.clock->Now();
        if (NextJobLocked(&job, now)) break;
        // Nothing to fetch now: the targets are done (tell the node once, so
        // it reports at once), or in backoff.
        if (in_flight_ == 0 && !idle_notified_) {
          idle_notified_ = true;
          idle_cv_.NotifyAll();
          if (on_idle_) {
            auto on_idle = on_idle_;
            lock.Unlock();
            on_idle();
            lock.Lock();
            continue;
          }
        }
        // Rescan after retry_after (failed chunks, a store that had no
        // room), at the end of a backoff, or sooner when the targets change.
        const uint64_t gen = generation_;
        if (next_rescan_ <= now) next_rescan_ = now + options_.retry_after;
        auto wake = next_rescan_;
        for (const Backoff& b : backoff_) {
          if (b.until > now) wake = std::min(wake, b.until);
        }
        while (!stopping_ && generation_ == gen) {
          if (!options_.clock->WaitUntil(&cv_, &mu_, wake)) break;
        }
        if (!stopping_ && generation_ == gen && options_.clock->Now() >= next_rescan_) {
          cursor_.assign(targets_.size(), 0);
          blocked_.assign(targets_.size(), false);
          capacity_logged_.clear();
          idle_notified_ = false;
        }
      }
      ++in_flight_;
      idle_notified_ = false;
    }
    RunJob(job);
    {
      MutexLock lock(&mu_);
      --in_flight_;
    }
  }
}

void Warmer::RunJob(const Job& job) {
  const std::string path = job.dataset->manifest.Path(job.chunk.entry);
  const std::string& name = job.dataset->meta.name;
  // Do not read from the origin what the store has no room to keep.
  // The capacity is the node's, shared with checkpoints and the read tier.
  const ChunkStore::Usage before = store_->usage();
  if (!before.Fits(job.chunk.length + kChunkMetaSize)) {
    RecordFailure(job, path,
                  "NoSpace: the node is at its capacity (" + std::to_string(before.used_bytes) +
                      " bytes of datasets and " + std::to_string(before.other_bytes) +
                      " of checkpoints and the read tier, of " + std::to_string(before.capacity_bytes) + ")");
    MutexLock lock(&mu_);
    if (capacity_logged_.insert(job.dataset->meta.uid).second) {
      options_.logger->error("warm {}: the node is full ({} bytes of datasets and {} of checkpoints and the read "
                             "tier, of {}); chunks that do not fit are skipped and listed as failures",
                             name, before.used_bytes, before.other_bytes, before.capacity_bytes);
    }
    return;
  }
  Result<ChunkFiller::FillResult> r = filler_->Fill(*job.dataset, job.chunk, /*cache=*/true,
                                                    OriginGate::Priority::kWarm);
  if (!r.ok()) {
    if (r.status().code() == Code::kUnavailable) {
      const auto wait = BackOff(job);
      options_.logger->warn("warm {}: {}: {}; retrying in {} ms", name, path, r.status().ToString(), wait.count());
      RecordFailure(job, path,
                    r.status().ToString() + " (retrying in " + std::to_string((wait.count() + 999) / 1000) + " s)");
      return;
    }
    options_.logger->warn("warm {}: {}: {}", name, path, r.status().ToString());
    RecordFailure(job, path, r.status().ToString());
    return;
  }
  EndBackoff(job);
  if (!r->cache_status.ok()) {
    RecordFailure(job, path, r->cache_status.ToString());
    const bool over_capacity = !store_->usage().Fits(job.chunk.length + kChunkMetaSize);
    if (r->cache_status.code() == Code::kNoSpace && !over_capacity) {
      // The disk itself is full: stop this dataset until the retry.
      MutexLock lock(&mu_);
      if (job.generation == generation_ && job.target < blocked_.size() && !blocked_[job.target]) {
        blocked_[job.target] = true;
        options_.logger->error("warm {}: stopped: {}", name, r->cache_status.ToString());
      }
    }
    return;
  }
  fetched_chunks_.fetch_add(1);
  fetched_bytes_.fetch_add(job.chunk.length);
  ClearFailure(job);
}

}  // namespace hoard
