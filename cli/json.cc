#include "cli/json.h"

#include <chrono>

namespace hoard::cli {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

nlohmann::json ToJson(const proto::NodeInfo& n) {
  return {{"name", n.name},
          {"endpoint", n.endpoint},
          {"up", n.up},
          {"state", proto::MemberState(n)},
          {"down_since_unix", n.down_since_unix},
          {"capacity_bytes", n.capacity_bytes},
          {"used_bytes", n.used_bytes},
          {"used_dataset_bytes", n.used_dataset_bytes},
          {"used_read_tier_bytes", n.used_read_tier_bytes},
          {"used_checkpoint_bytes", n.used_checkpoint_bytes},
          {"chunks", n.chunks},
          {"weight", n.weight},
          {"placement_weight", proto::PlacementWeight(n)},
          {"draining", n.draining},
          {"last_seen_unix", n.last_seen_unix},
          {"scrub_last_pass_unix", n.scrub_last_pass_unix},
          {"corrupt_chunks", n.scrub_corrupt},
          {"build_version", n.build.version},
          {"build_commit", n.build.commit}};
}

nlohmann::json ToJson(const proto::MountInfo& m) {
  return {{"node", m.node},
          {"mountpoint", m.mountpoint},
          {"build_version", m.build.version},
          {"build_commit", m.build.commit},
          {"last_seen_unix", m.last_seen_unix}};
}

nlohmann::json ToJson(const proto::Lease& l, int64_t now_unix) {
  return {{"dataset", l.dataset},
          {"job", l.job},
          {"key_class", l.key_class},
          {"claimed_uid", l.holder.uid},
          {"claimed_host", l.holder.host},
          {"taken_unix", l.taken_unix},
          {"renewed_unix", l.renewed_unix},
          {"expires_unix", l.expires_unix},
          {"expires_in_seconds", double(l.expires_unix - now_unix)}};
}

nlohmann::json ToJson(const proto::DatasetMeta& d) {
  return {{"name", d.name},
          {"uid", Id(d.uid)},
          {"version", d.version},
          {"source", d.source},
          {"chunk_size_bytes", d.chunk_size},
          {"replicas", d.replicas},
          {"warm", d.warm},
          {"files", d.file_count},
          {"bytes", d.total_bytes},
          {"chunks", d.total_chunks},
          {"created_unix", d.created_unix},
          {"priority", proto::PriorityName(d.priority)},
          {"pinned", d.pinned},
          {"ttl_seconds", d.ttl_s},
          {"tenant", d.tenant},
          {"resident", d.resident},
          {"last_read_unix", d.last_read_unix},
          {"evictions", d.evictions}};
}

nlohmann::json ToJson(const proto::TenantQuota& q) {
  return {{"tenant", q.tenant}, {"quota_bytes", q.quota_bytes}, {"used_bytes", q.used_bytes}, {"datasets", q.datasets}};
}

double PercentCached(const proto::DatasetStatus& s) {
  if (s.complete) return 100.0;
  if (s.expected_bytes == 0) return s.meta.file_count == 0 ? 100.0 : 0.0;
  double p = 100.0 * double(s.cached_bytes) / double(s.expected_bytes);
  return p >= 100.0 ? 99.99 : p;  // 100 only when every node confirmed it
}

uint64_t UncachedFiles(const proto::DatasetStatus& s) {
  return s.meta.file_count > s.files_cached ? s.meta.file_count - s.files_cached : 0;
}

nlohmann::json ToJson(const proto::DatasetStatus& s) {
  nlohmann::json j = ToJson(s.meta);
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& f : s.failures) failures.push_back({{"path", f.path}, {"error", f.error}});
  j["cached_bytes"] = s.cached_bytes;
  j["cached_chunks"] = s.cached_chunks;
  j["expected_bytes"] = s.expected_bytes;
  j["cached_files"] = s.files_cached;
  j["uncached_files"] = UncachedFiles(s);
  j["percent_cached"] = PercentCached(s);
  j["complete"] = s.complete;
  j["nodes_reporting"] = s.nodes_reporting;
  j["fill_rate_bytes_per_s"] = s.fill_rate;
  j["eta_seconds"] = s.eta_seconds;
  j["failures"] = failures;
  nlohmann::json shares = nlohmann::json::array();
  for (const auto& share : s.shares) {
    shares.push_back({{"node", share.node}, {"owned_chunks", share.owned_chunks}, {"owned_bytes", share.owned_bytes},
                      {"cached_bytes", share.cached_bytes}, {"reported", share.reported}});
  }
  j["shares"] = shares;
  return j;
}

}  // namespace hoard::cli
