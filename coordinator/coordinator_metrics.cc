// Coordinator::RegisterMetrics: what hoard-coordinator shows on /metrics:
// the members, each dataset's warm-up progress and the checkpoint backlog,
// all from GetStatus (what `hoard status` shows), computed once per scrape.
#include <algorithm>
#include <map>
#include <string>

#include "coordinator/coordinator.h"

namespace hoard {
namespace {

// GetStatus once per scrape: the families below are rendered one after the
// other within milliseconds, and each would otherwise compute it again.
class StatusCache {
 public:
  StatusCache(const Coordinator* c, const Clock* clock) : coordinator_(c), clock_(clock) {}
  proto::ClusterStatusReply Get() {
    MutexLock lock(&mu_);
    const auto now = clock_->Now();
    if (now - at_ > std::chrono::milliseconds(100)) {
      Result<proto::ClusterStatusReply> r = coordinator_->GetStatus("");
      last_ = r.ok() ? std::move(*r) : proto::ClusterStatusReply{};
      at_ = now;
    }
    return last_;
  }

 private:
  const Coordinator* coordinator_;
  const Clock* clock_;
  Mutex mu_;
  std::chrono::steady_clock::time_point at_ GUARDED_BY(mu_);
  proto::ClusterStatusReply last_ GUARDED_BY(mu_);
};

using Samples = std::vector<metrics::Sample>;

}  // namespace

void Coordinator::RegisterMetrics(metrics::Registry* registry) const {
  auto cache = std::make_shared<StatusCache>(this, options_.clock);
  using metrics::Type;
  registry->AddCollector("hoard_nodes", "Members by state: up (serving), down (silent past --down-after-ms, "
                         "keeping its placement for --out-after), out (down past --out-after: its chunks have new "
                         "owners), draining (owning nothing; also counted as up, down or out)", Type::kGauge, [cache] {
    const auto st = cache->Get();
    std::map<std::string, double> by_state = {{"up", 0}, {"down", 0}, {"out", 0}};
    double draining = 0;
    for (const auto& n : st.nodes) {
      by_state[proto::MemberState(n)] += 1;
      if (n.draining) draining += 1;
    }
    return Samples{{{{"state", "up"}}, by_state["up"]},
                   {{{"state", "down"}}, by_state["down"]},
                   {{{"state", "out"}}, by_state["out"]},
                   {{{"state", "draining"}}, draining}};
  });
  // Leases from the table itself, not the status cache: a scrape must not
  // show a lease released a moment ago.
  registry->AddCollector("hoard_leases", "Unexpired job leases per dataset (coordinator/leases.h): a dataset with one "
                         "is never evicted", Type::kGauge, [this] {
    std::map<std::string, double> per;
    for (const auto& l : ListLeases().leases) per[l.dataset] += 1;
    Samples out;
    for (const auto& [name, n] : per) out.push_back({{{"dataset", name}}, n});
    return out;
  });
  // Per dataset: one family per figure, labelled by dataset name.
  struct DatasetFigure {
    const char* name;
    const char* help;
    double (*value)(const proto::DatasetStatus&);
    Type type = Type::kGauge;
  };
  static const DatasetFigure kFigures[] = {
      {"hoard_dataset_bytes", "Bytes a fully cached dataset takes in the node caches (its size times replicas)",
       [](const proto::DatasetStatus& d) { return double(d.expected_bytes); }},
      {"hoard_dataset_cached_bytes", "Bytes of the dataset cached on its owners (warm-up progress)",
       [](const proto::DatasetStatus& d) { return double(std::min(d.cached_bytes, d.expected_bytes)); }},
      {"hoard_dataset_files", "Files in the dataset",
       [](const proto::DatasetStatus& d) { return double(d.meta.file_count); }},
      {"hoard_dataset_cached_files", "Files of the dataset with every chunk on all its owners",
       [](const proto::DatasetStatus& d) { return double(d.files_cached); }},
      {"hoard_dataset_warm", "1 if the dataset is being warmed (every owner fetches its chunks), else 0",
       [](const proto::DatasetStatus& d) { return d.meta.warm ? 1.0 : 0.0; }},
      {"hoard_dataset_fill_rate_bytes", "Bytes per second landing in the caches over the last 10 s",
       [](const proto::DatasetStatus& d) { return d.fill_rate; }},
      {"hoard_dataset_resident", "1 if the dataset may hold chunks in the caches, 0 once evicted (until warmed again)",
       [](const proto::DatasetStatus& d) { return d.meta.resident ? 1.0 : 0.0; }},
      {"hoard_dataset_evictions_total", "Times the dataset was evicted from the caches (for room, a quota or its TTL)",
       [](const proto::DatasetStatus& d) { return double(d.meta.evictions); }, Type::kCounter},
  };
  for (const DatasetFigure& f : kFigures) {
    registry->AddCollector(f.name, f.help, f.type, [cache, value = f.value] {
      Samples out;
      for (const auto& d : cache->Get().datasets) out.push_back({{{"dataset", d.meta.name}}, value(d)});
      return out;
    });
  }
  registry->AddCollector("hoard_ckpt_undrained_bytes",
                         "Committed checkpoint bytes not yet on the checkpoint origin (NFS), all jobs", Type::kGauge,
                         [cache] {
                           double bytes = 0;
                           for (const auto& j : cache->Get().ckpt_jobs) bytes += double(j.undrained_bytes);
                           return Samples{{{}, bytes}};
                         });
  registry->AddCollector(
      "hoard_ckpt_oldest_undrained_age_seconds",
      "Age of the oldest committed checkpoint byte not yet on the checkpoint origin; 0 when all are drained",
      Type::kGauge, [cache] {
        const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
        double age = 0;
        for (const auto& j : cache->Get().ckpt_jobs) {
          if (j.oldest_undrained_unix_ms > 0) age = std::max(age, double(now_ms - j.oldest_undrained_unix_ms) / 1000);
        }
        return Samples{{{}, age}};
      });
  registry->AddCollector("hoard_ckpt_overdue_files",
                         "Checkpoint files not on the origin past --ckpt-drain-deadline-s", Type::kGauge, [cache] {
                           double n = 0;
                           for (const auto& j : cache->Get().ckpt_jobs) n += double(j.overdue_files);
                           return Samples{{{}, n}};
                         });
  const CkptTable* table = ckpt_table_.get();
  registry->AddCounter("hoard_ckpt_rereplicated_chunks_total",
                       "Checkpoint chunks given a new holder because one of theirs was lost (--ckpt-lost-after-s)", {},
                       [table] { return double(table->rereplicated_chunks()); });
  // One field of the table's drain health (checkpoint/drain_health.h).
  auto drain = [table](auto field) { return [table, field] { return double(table->drain_stats().*field); }; };
  registry->AddGauge("hoard_ckpt_origin_failing",
                     "1 while the checkpoint origin does not take the drain (a node's or the publisher's last call "
                     "to it failed, or uploads are lost), else 0",
                     {}, drain(&CkptTable::DrainStats::origin_failing));
  registry->AddGauge("hoard_ckpt_origin_failing_seconds",
                     "How long the checkpoint origin has been failing (0 while it works)", {},
                     drain(&CkptTable::DrainStats::origin_failing_s));
  registry->AddGauge("hoard_ckpt_failing_files", "Checkpoint files whose last drain attempt failed", {},
                     drain(&CkptTable::DrainStats::failing_files));
  registry->AddCounter("hoard_ckpt_drain_failures_total",
                       "Failed attempts to get a checkpoint file to the origin (node uploads and publishes)", {},
                       drain(&CkptTable::DrainStats::failures));
  registry->AddCounter("hoard_ckpt_lost_uploads_total",
                       "Checkpoint uploads reported done that the publisher did not find on the origin", {},
                       drain(&CkptTable::DrainStats::lost_uploads));
  registry->AddGauge("hoard_ckpt_upload_loops",
                     "Checkpoint files uploaded more than 3 times without being published (a drain loop)", {},
                     drain(&CkptTable::DrainStats::looping_files));
  registry->AddGauge("hoard_ckpt_old_generations",
                     "Checkpoint generations kept after a rewrite or removal because a mount may still read them", {},
                     [table] { return double(table->old_generations()); });
  registry->AddGauge("hoard_ckpt_pending_drops",
                     "Copies of retired checkpoint generations that nodes have yet to delete", {},
                     [table] { return double(table->pending_drops()); });
  const CkptSessions* sessions = ckpt_sessions_.get();
  registry->AddGauge("hoard_ckpt_sessions", "Mounts with checkpoint files open or locks held", {},
                     [sessions] { return double(sessions->sessions()); });
  registry->AddGauge("hoard_ckpt_reading_sessions", "Mounts with checkpoint files open for reading", {},
                     [sessions] { return double(sessions->reading()); });
  registry->AddGauge("hoard_ckpt_locks", "Checkpoint file locks held (flock and fcntl ranges), all mounts", {},
                     [sessions] { return double(sessions->locks()); });
}

}  // namespace hoard
