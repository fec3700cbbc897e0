// hoard top [--json] [--interval S] [--once]
//
// A live view of the cluster, refreshed every interval: per node the bytes it
// serves from its disk and fetches from peers and from the origin (rates over
// the interval), its hit ratio and store use; per dataset the warm-up
// progress; the checkpoint backlog. It asks the coordinator for the status
// (as `hoard status` does) and each up node for its counters (NodeStatus, the
// counters it also heartbeats and shows on /metrics). A rate needs two
// samples, so even --once waits one interval. --json prints one sample as one
// JSON document and exits (like --once).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli/commands.h"
#include "cli/progress.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

using Counters = std::map<std::string, uint64_t>;

struct Sample {
  std::chrono::steady_clock::time_point at;
  proto::ClusterStatusReply status;
  std::map<std::string, Counters> counters;  // by node; absent: did not answer
};

Result<Sample> TakeSample(Context& ctx) {
  Sample s;
  HOARD_ASSIGN_OR_RETURN(s.status, ctx.Call(proto::ClusterStatus{}));
  for (const auto& n : s.status.nodes) {
    if (!n.up) continue;
    proto::RpcClient client(ctx.zmq(), n.endpoint);
    client.set_connect_timeout(std::chrono::milliseconds(500));
    Result<proto::NodeStatusReply> r = client.Call(proto::NodeStatus{}, std::chrono::milliseconds(2000));
    if (r.ok()) s.counters[n.name] = std::move(r->counters);
  }
  s.at = std::chrono::steady_clock::now();
  return s;
}

uint64_t Get(const Counters& c, const char* key) {
  auto it = c.find(key);
  return it == c.end() ? 0 : it->second;
}

// What the node agent counts, by source: served from its disk, fetched from
// peers, fetched from the origin (warm-up and read-through).
constexpr std::pair<const char*, const char*> kSources[] = {
    {"disk", "served_from_cache_bytes"}, {"peer", "peer_fill_bytes"}, {"origin", "origin_read_bytes"}};

nlohmann::json View(const Sample& prev, const Sample& cur) {
  const double secs = std::max(1e-3, std::chrono::duration<double>(cur.at - prev.at).count());
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : cur.status.nodes) {
    nlohmann::json node = {{"name", n.name},
                           {"up", n.up},
                           {"draining", n.draining},
                           {"store_used_bytes", n.used_bytes},
                           {"store_capacity_bytes", n.capacity_bytes},
                           {"reachable", cur.counters.count(n.name) > 0}};
    auto now = cur.counters.find(n.name);
    auto before = prev.counters.find(n.name);
    if (now != cur.counters.end()) {
      nlohmann::json rates, totals;
      for (const auto& [source, key] : kSources) {
        const uint64_t b = before == prev.counters.end() ? Get(now->second, key) : Get(before->second, key);
        const uint64_t a = Get(now->second, key);
        totals[source] = a;
        rates[source] = a >= b ? double(a - b) / secs : 0.0;
      }
      node["bytes_per_s"] = rates;
      node["bytes_total"] = totals;
      const uint64_t requests = Get(now->second, "chunk_requests");
      node["hit_ratio"] = requests == 0 ? 0.0 : double(Get(now->second, "chunk_cache_hits")) / double(requests);
    }
    nodes.push_back(node);
  }
  nlohmann::json datasets = nlohmann::json::array();
  for (const auto& d : cur.status.datasets) {
    datasets.push_back({{"name", d.meta.name},
                        {"warm", d.meta.warm},
                        {"cached_bytes", std::min(d.cached_bytes, d.expected_bytes)},
                        {"bytes", d.expected_bytes},
                        {"cached_files", d.files_cached},
                        {"files", d.meta.file_count},
                        {"fill_rate_bytes_per_s", d.fill_rate},
                        {"eta_s", d.eta_seconds}});
  }
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  uint64_t undrained = 0, overdue = 0;
  double age = 0;
  for (const auto& j : cur.status.ckpt_jobs) {
    undrained += j.undrained_bytes;
    overdue += j.overdue_files;
    if (j.oldest_undrained_unix_ms > 0) age = std::max(age, double(now_ms - j.oldest_undrained_unix_ms) / 1000);
  }
  return {{"interval_s", secs},
          {"nodes", nodes},
          {"datasets", datasets},
          {"checkpoints", {{"undrained_bytes", undrained}, {"oldest_undrained_age_s", age}, {"overdue_files", overdue}}}};
}

std::string Rate(double bytes_per_s) { return FormatBytes(bytes_per_s) + "/s"; }

std::string Text(const nlohmann::json& v) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %-5s %13s %13s %13s %6s  %s\n", "NODE", "STATE", "DISK", "PEER", "ORIGIN",
                "HIT", "STORE");
  out += line;
  for (const auto& n : v["nodes"]) {
    const std::string state = !n["up"].get<bool>() ? "down" : n["draining"].get<bool>() ? "drain" : "up";
    const uint64_t cap = n["store_capacity_bytes"];
    const std::string store = FormatBytes(double(n["store_used_bytes"].get<uint64_t>())) + " / " +
                              (cap == 0 ? std::string("unlimited") : FormatBytes(double(cap)));
    if (n.contains("bytes_per_s")) {
      const auto& r = n["bytes_per_s"];
      char hit[16];
      std::snprintf(hit, sizeof hit, "%.0f%%", 100 * n["hit_ratio"].get<double>());
      std::snprintf(line, sizeof line, "%-16s %-5s %13s %13s %13s %6s  %s\n", n["name"].get<std::string>().c_str(),
                    state.c_str(), Rate(r["disk"]).c_str(), Rate(r["peer"]).c_str(), Rate(r["origin"]).c_str(), hit,
                    store.c_str());
    } else {
      std::snprintf(line, sizeof line, "%-16s %-5s %13s %13s %13s %6s  %s\n", n["name"].get<std::string>().c_str(),
                    state.c_str(), "-", "-", "-", "-", store.c_str());
    }
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof line, "%-24s %-30s %-16s %s\n", "DATASET", "CACHED", "FILES", "FILL");
  out += line;
  for (const auto& d : v["datasets"]) {
    const uint64_t bytes = d["bytes"], cached = d["cached_bytes"];
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", bytes == 0 ? 100.0 : 100.0 * double(cached) / double(bytes));
    const std::string cached_s = FormatBytes(double(cached)) + " / " + FormatBytes(double(bytes)) + " " + pct;
    const std::string files = std::to_string(d["cached_files"].get<uint64_t>()) + " / " +
                              std::to_string(d["files"].get<uint64_t>());
    const int64_t eta = d["eta_s"];
    const std::string fill = !d["warm"].get<bool>() ? "(not warmed)"
                             : cached >= bytes        ? "complete"
                                                      : Rate(d["fill_rate_bytes_per_s"]) +
                                                     (eta >= 0 ? ", " + Duration(double(eta)) + " left" : "");
    std::snprintf(line, sizeof line, "%-24s %-30s %-16s %s\n", d["name"].get<std::string>().c_str(), cached_s.c_str(),
                  files.c_str(), fill.c_str());
    out += line;
  }
  const auto& c = v["checkpoints"];
  out += "\ncheckpoints: " + FormatBytes(double(c["undrained_bytes"].get<uint64_t>())) + " not yet on the origin";
  if (c["oldest_undrained_age_s"].get<double>() > 0) {
    out += ", oldest " + Duration(c["oldest_undrained_age_s"].get<double>());
  }
  if (c["overdue_files"].get<uint64_t>() > 0) out += ", " + std::to_string(c["overdue_files"].get<uint64_t>()) + " overdue";
  return out + "\n";
}

int RunTop(Context& ctx, double interval_s, bool once) {
  once = once || ctx.json();
  const auto interval = std::chrono::milliseconds(int64_t(interval_s * 1000));
  Result<Sample> prev = TakeSample(ctx);
  if (!prev.ok()) return ctx.Fail(prev.status().Annotate("top"));
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  while (true) {
    std::this_thread::sleep_for(interval);
    Result<Sample> cur = TakeSample(ctx);
    if (!cur.ok()) return ctx.Fail(cur.status().Annotate("top"));
    const nlohmann::json view = View(*prev, *cur);
    if (once) return ctx.Done(view, Text(view));
    // Redraw in place on a terminal; a pipe gets one screen after another.
    std::string screen = tty ? "\033[H\033[2J" : "";
    screen += Text(view);
    std::fwrite(screen.data(), 1, screen.size(), stdout);
    std::fflush(stdout);
    prev = std::move(cur);
  }
}

}  // namespace

void AddTopCommand(CLI::App& app, Action* action) {
  struct Args {
    double interval_s = 2;
    bool once = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* top = app.add_subcommand(
      "top", "Live view: per node read rates by source, hit ratio and store use; warm-up; checkpoint backlog");
  top->add_option("--interval", args->interval_s, "Seconds between refreshes (rates are over one interval)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  top->add_flag("--once", args->once, "Print one sample (after one interval) and exit");
  top->callback([args, action] { *action = [args](Context& ctx) { return RunTop(ctx, args->interval_s, args->once); }; });
}

}  // namespace hoard::cli
