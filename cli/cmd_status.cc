// hoard status [DATASET]
#include <algorithm>
#include <ctime>
#include <map>
#include <sstream>

#include "cli/ckpt_health.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "common/units.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard::cli {
namespace {

// A node's share of the placement, as a percentage of all weights.
std::string Share(double weight, double total) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", total > 0 ? 100.0 * weight / total : 0.0);
  return buf;
}

// A build as the tables show it: "0.1.0 1a2b3c4d5e6f"; "-" for a node
// agent from before builds were reported.
std::string BuildText(const proto::Build& b) { return b.version.empty() ? "-" : b.version + " " + b.commit; }

// Who runs one build: the coordinator, up nodes, live mounts.
struct BuildUse {
  bool coordinator = false;
  uint64_t nodes = 0;
  uint64_t mounts = 0;
};

// The builds running, so a rolling upgrade (or one left half done) shows at
// a glance. An up node that reports no build counts as one build of its own:
// it is older than every build that does.
std::map<proto::Build, BuildUse> BuildsRunning(const proto::ClusterStatusReply& st) {
  std::map<proto::Build, BuildUse> builds;
  if (!st.build.version.empty()) builds[st.build].coordinator = true;
  for (const auto& n : st.nodes) {
    if (n.up) ++builds[n.build].nodes;
  }
  for (const auto& m : st.mounts) ++builds[m.build].mounts;
  return builds;
}

std::string BuildLine(const proto::Build& b, const BuildUse& u) {
  std::string who;
  auto add = [&](const std::string& part) { who += (who.empty() ? "" : ", ") + part; };
  if (u.coordinator) add("the coordinator");
  if (u.nodes > 0) add(Thousands(u.nodes) + (u.nodes == 1 ? " node" : " nodes"));
  if (u.mounts > 0) add(Thousands(u.mounts) + (u.mounts == 1 ? " mount" : " mounts"));
  const std::string build =
      b.version.empty() ? "unknown (from before builds were reported)" : b.version + " (commit " + b.commit + ")";
  return build + " on " + who;
}

// Coordinators in high availability: each one of the list (and the leader,
// if the list lacks it) asked with a Ping of its own: the leader answers it,
// a standby says kNotLeader, a dead one nothing. And etcd's members, as the
// leader sees them.
void HaSection(Context& ctx, const proto::HaStatus& ha, nlohmann::json* doc, std::ostringstream* text) {
  std::vector<std::string> endpoints = proto::SplitEndpoints(ctx.CoordinatorEndpoint());
  if (std::find(endpoints.begin(), endpoints.end(), ha.leader) == endpoints.end()) endpoints.push_back(ha.leader);
  nlohmann::json coordinators = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows = {{"COORDINATOR", "ROLE", "NOTE"}};
  for (const std::string& e : endpoints) {
    proto::RpcClient client(ctx.zmq(), e);
    client.set_connect_timeout(std::chrono::milliseconds(1000));
    Result<proto::Pong> pong = client.Call(proto::Ping{}, std::chrono::milliseconds(2000));
    std::string role, note;
    if (pong.ok()) {
      role = e == ha.leader ? "leader" : "serving";  // "serving" but not the leader: a term just changed
      if (e == ha.leader) note = "term " + std::to_string(ha.term);
    } else if (pong.status().code() == Code::kNotLeader) {
      role = "standby";
      note = pong.status().message().empty() ? "knows no leader" : "follows " + pong.status().message();
    } else {
      role = "unreachable";
      note = pong.status().message();
    }
    coordinators.push_back({{"endpoint", e}, {"role", role}, {"note", note}});
    rows.push_back({e, role, note});
  }
  (*doc)["coordinators"] = coordinators;
  (*doc)["term"] = ha.term;
  nlohmann::json etcd = nlohmann::json::array();
  std::vector<std::vector<std::string>> members = {{"ETCD MEMBER", "HEALTH", "RAFT", "DB", "ENDPOINT"}};
  size_t healthy = 0;
  for (const auto& m : ha.etcd) {
    healthy += m.healthy ? 1 : 0;
    etcd.push_back({{"name", m.name},
                    {"endpoint", m.endpoint},
                    {"healthy", m.healthy},
                    {"leader", m.leader},
                    {"db_size_bytes", m.db_size_bytes},
                    {"error", m.error}});
    members.push_back({m.name, m.healthy ? "healthy" : "UNHEALTHY: " + m.error, m.leader ? "leader" : "follower",
                       FormatBytes(double(m.db_size_bytes)), m.endpoint});
  }
  (*doc)["etcd"] = etcd;
  (*doc)["etcd_error"] = ha.etcd_error;
  *text << "\n" << Table(rows);
  if (!ha.etcd_error.empty()) {
    *text << "etcd: the member list could not be read: " << ha.etcd_error << "\n";
  } else {
    // A quorum is a majority: with fewer healthy members, no change can be made.
    const bool quorum = healthy * 2 > ha.etcd.size();
    *text << "etcd: " << healthy << " of " << ha.etcd.size() << " members healthy"
          << (quorum ? "" : " (NO QUORUM: every change waits)") << "\n"
          << Table(members);
  }
}

// What each node's USED is made of, one line per node: its --capacity bounds
// the three kinds together (store/disk_usage.h).
std::string UsedByKind(const std::vector<proto::NodeInfo>& nodes) {
  std::string out;
  for (const auto& n : nodes) {
    out += n.name + ": " + FormatBytes(double(n.used_bytes)) + " used of " +
           (n.capacity_bytes == 0 ? std::string("unlimited") : FormatBytes(double(n.capacity_bytes))) +
           ": datasets " + FormatBytes(double(n.used_dataset_bytes)) + ", read tier " +
           FormatBytes(double(n.used_read_tier_bytes)) + ", checkpoints " +
           FormatBytes(double(n.used_checkpoint_bytes)) + "\n";
  }
  return out;
}

// A node's STATE: up or draining; down for how long (it keeps its placement
// until --out-after, its chunks read from their other owners or the origin);
// OUT (down past --out-after: its chunks have new owners).
std::string StateText(const proto::NodeInfo& n, int64_t now) {
  if (n.up) return n.draining ? "draining" : "up";
  const std::string since =
      n.down_since_unix == 0 ? "" : " " + Duration(double(std::max<int64_t>(0, now - n.down_since_unix)));
  return (n.held ? "DOWN" : "OUT") + since + (n.draining ? ", draining" : "");
}

int RunStatus(Context& ctx, const std::string& dataset) {
  Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{.dataset = dataset});
  if (!st.ok()) return ctx.Fail(st.status());

  nlohmann::json doc = {{"coordinator", ctx.CoordinatorEndpoint()}, {"epoch", st->epoch}};
  doc["origin_limits"] = {{"max_connections", st->origin_limits.max_connections},
                          {"max_bytes_per_s", st->origin_limits.max_bytes_per_s}};
  doc["nodes"] = nlohmann::json::array();
  doc["datasets"] = nlohmann::json::array();
  size_t up = 0, out = 0;
  std::vector<std::vector<std::string>> nodes = {
      {"NODE", "STATE", "USED", "CAPACITY", "WEIGHT", "CHUNKS", "SCRUBBED", "CORRUPT", "BUILD", "ENDPOINT"}};
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  double total_weight = 0;
  for (const auto& n : st->nodes) total_weight += proto::PlacementWeight(n);
  for (const auto& n : st->nodes) {
    doc["nodes"].push_back(ToJson(n));
    up += n.up ? 1 : 0;
    out += proto::MemberState(n) == std::string_view("out") ? 1 : 0;
    // When the node's last full scrub pass ended (node/scrubber.h), and the
    // corrupt chunk files it quarantined (and fetched again) so far.
    const std::string scrubbed =
        n.scrub_last_pass_unix == 0 ? "never" : Duration(double(std::max<int64_t>(0, now - n.scrub_last_pass_unix))) + " ago";
    nodes.push_back({n.name, StateText(n, now), FormatBytes(double(n.used_bytes)),
                     n.capacity_bytes == 0 ? "unlimited" : FormatBytes(double(n.capacity_bytes)),
                     Share(proto::PlacementWeight(n), total_weight), Thousands(n.chunks), scrubbed,
                     Thousands(n.scrub_corrupt), BuildText(n.build), n.endpoint});
  }
  // The mounts heard from in the last minute (they poll every second).
  doc["mounts"] = nlohmann::json::array();
  std::vector<std::vector<std::string>> mounts = {{"MOUNT", "NODE", "BUILD", "LAST SEEN"}};
  for (const auto& m : st->mounts) {
    doc["mounts"].push_back(ToJson(m));
    mounts.push_back({m.mountpoint, m.node, BuildText(m.build),
                      Duration(double(std::max<int64_t>(0, now - m.last_seen_unix))) + " ago"});
  }
  // Job leases (coordinator/leases.h): the datasets eviction must leave alone.
  doc["leases"] = nlohmann::json::array();
  for (const auto& l : st->leases) doc["leases"].push_back(ToJson(l, now));
  const std::map<proto::Build, BuildUse> builds = BuildsRunning(*st);
  doc["builds"] = nlohmann::json::array();
  for (const auto& [b, use] : builds) {
    doc["builds"].push_back({{"build_version", b.version},
                             {"build_commit", b.commit},
                             {"coordinator", use.coordinator},
                             {"nodes", use.nodes},
                             {"mounts", use.mounts}});
  }
  std::vector<std::vector<std::string>> datasets = {
      {"DATASET", "FILES", "SIZE", "REPLICAS", "CACHED", "FILES CACHED", "RATE", "ETA", "WARM", "PRIORITY", "KEEP",
       "TENANT", "LAST READ", "SOURCE"}};
  std::string failures;
  for (const auto& d : st->datasets) {
    doc["datasets"].push_back(ToJson(d));
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", PercentCached(d));
    datasets.push_back({d.meta.name, Thousands(d.meta.file_count), FormatBytes(double(d.meta.total_bytes)),
                        std::to_string(d.meta.replicas), pct, Thousands(d.files_cached),
                        d.fill_rate > 0 ? FormatBytes(d.fill_rate) + "/s" : "-",
                        d.complete ? "done" : d.eta_seconds >= 0 ? Duration(double(d.eta_seconds)) : "-",
                        !d.meta.resident ? "evicted" : d.meta.warm ? "yes" : "no", proto::PriorityName(d.meta.priority),
                        d.meta.pinned ? "pinned" : d.meta.ttl_s > 0 ? "ttl " + Duration(double(d.meta.ttl_s)) : "-",
                        d.meta.tenant,
                        d.meta.last_read_unix == 0
                            ? "never"
                            : Duration(double(std::max<int64_t>(0, now - d.meta.last_read_unix))) + " ago",
                        d.meta.source});
    for (const auto& f : d.failures) failures += "  " + d.meta.name + "/" + f.path + ": " + f.error + "\n";
  }
  std::ostringstream text;
  text << "cluster: " << st->nodes.size() << " nodes (" << up << " up"
       << (st->nodes.size() > up ? ", " + std::to_string(st->nodes.size() - up - out) + " down" : "")
       << (out > 0 ? ", " + std::to_string(out) + " out" : "") << "), " << st->datasets.size()
       << " dataset(s), epoch " << st->epoch << ", coordinator " << ctx.CoordinatorEndpoint() << "\n";
  const proto::OriginLimits& lim = st->origin_limits;
  text << "origin limits (all nodes together): "
       << (lim.max_bytes_per_s > 0 ? FormatBytes(double(lim.max_bytes_per_s)) + "/s" : std::string("no rate limit"))
       << ", " << (lim.max_connections > 0 ? std::to_string(lim.max_connections) + " reads in flight"
                                           : std::string("each node's --origin-connections"))
       << "\n";
  // Mixed builds stand out: a rolling upgrade in progress, or one left half done.
  if (builds.size() == 1) {
    text << "build: " << BuildLine(builds.begin()->first, builds.begin()->second) << "\n";
  } else if (builds.size() > 1) {
    text << "note: " << builds.size() << " builds running:\n";
    for (const auto& [b, use] : builds) text << "  " << BuildLine(b, use) << "\n";
  }
  if (!st->ha.leader.empty()) HaSection(ctx, st->ha, &doc, &text);
  text << "\n";
  if (st->nodes.empty()) text << "no nodes registered\n";
  else text << Table(nodes) << UsedByKind(st->nodes);
  if (!st->mounts.empty()) text << "\n" << Table(mounts);
  if (!st->leases.empty()) text << "\njob leases (never evicted while held):\n" << LeaseLines(st->leases, now);
  text << "\n";
  if (st->datasets.empty()) text << "no datasets (add one with: hoard dataset add NAME SOURCE)\n";
  else text << Table(datasets);
  // One dataset asked for: show its stripe assignment, node by node.
  if (!dataset.empty() && st->datasets.size() == 1) {
    std::vector<std::vector<std::string>> shares = {{"NODE", "OWNS CHUNKS", "OWNS", "CACHED"}};
    for (const auto& sh : st->datasets[0].shares) {
      if (!sh.reported) {
        shares.push_back({sh.node, "-", "-", "(no report on the current placement yet)"});
        continue;
      }
      shares.push_back({sh.node, Thousands(sh.owned_chunks), FormatBytes(double(sh.owned_bytes)),
                        FormatBytes(double(sh.cached_bytes))});
    }
    text << "\n" << Table(shares);
  }
  if (!failures.empty()) text << "\nfailures:\n" << failures;
  // Tenants' quotas (coordinator/eviction.h); the table only when one is set.
  doc["quota_policy"] = st->quota_policy;
  doc["quotas"] = nlohmann::json::array();
  std::vector<std::vector<std::string>> quotas = {{"TENANT", "QUOTA", "USED", "DATASETS"}};
  bool any_quota = false;
  for (const proto::TenantQuota& q : st->quotas) {
    doc["quotas"].push_back(ToJson(q));
    any_quota = any_quota || q.quota_bytes > 0;
    quotas.push_back({q.tenant, q.quota_bytes == 0 ? "-" : FormatBytes(double(q.quota_bytes)),
                      FormatBytes(double(q.used_bytes)), std::to_string(q.datasets)});
  }
  if (any_quota) text << "\nquotas (at a quota, --quota-policy " << st->quota_policy << "):\n" << Table(quotas);
  // Checkpoints: what is not on the checkpoint origin yet, how old, and why.
  doc["checkpoints"] = nlohmann::json::array();
  const int64_t now_ms = WallClockMs();
  if (!st->ckpt_jobs.empty()) {
    std::vector<std::vector<std::string>> jobs = {{"CHECKPOINT JOB", "FILES", "SIZE", "L", "R", "P", "UNDRAINED",
                                                   "OLDEST UNDRAINED", "DRAIN ERROR"}};
    for (const auto& j : st->ckpt_jobs) {
      auto n = [&](size_t l) { return std::to_string(l < j.files_by_level.size() ? j.files_by_level[l] : 0); };
      const double age = j.oldest_undrained_unix_ms > 0 ? double(now_ms - j.oldest_undrained_unix_ms) / 1000 : 0;
      doc["checkpoints"].push_back(ToJson(j, now_ms));
      std::string error = ShortDrainError(j.drain_error, now_ms);
      if (j.failing_files > 1) error += " (" + std::to_string(j.failing_files) + " files)";
      jobs.push_back({j.job, Thousands(j.files), FormatBytes(double(j.bytes)), n(1), n(2), n(3),
                      FormatBytes(double(j.undrained_bytes)), age > 0 ? Duration(age) : "-", error});
    }
    text << "\n" << Table(jobs);
  }
  // A checkpoint origin in trouble is flagged whether or not jobs exist.
  doc["checkpoint_origin"] = ToJson(st->ckpt_origin, now_ms);
  if (st->ckpt_origin.failing || !st->ckpt_jobs.empty()) text << "\n" << OriginLine(st->ckpt_origin, now_ms) << "\n";
  return ctx.Done(doc, text.str());
}

}  // namespace

void AddStatusCommand(CLI::App& app, Action* action) {
  auto* cmd = app.add_subcommand("status", "Show nodes (health, disk use) and datasets (size, percent cached)");
  auto dataset = std::make_shared<std::string>();
  cmd->add_option("dataset", *dataset, "Only this dataset");
  cmd->callback([action, dataset] { *action = [dataset](Context& ctx) { return RunStatus(ctx, *dataset); }; });
}

}  // namespace hoard::cli
