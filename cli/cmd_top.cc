// hoard top [--json] [--interval S] [--once]
//
// A live view of the cluster, refreshed every interval: per node the bytes it
// serves from its disk and fetches from peers and from the origin (rates over
// the interval), its hit ratio and store use; per dataset the warm-up
// progress; the checkpoint backlog. It asks the coordinator for the status
// (as `hoard status` does) and each up node for its counters (NodeStatus, the
// counters it also heartbeats and shows on /metrics). A rate needs two
// samples, so even --once waits one interval. --json prints one sample as one
// JSON document and exits (like --once). Rows fit 80 columns.
//
// The live view outlives the coordinator: when it stops answering (a
// restart, a stopped process, a network cut), top keeps the last screen with
// a line "coordinator unreachable for 23s, showing last data" on top and
// asks again every interval, each call bounded by a few seconds, so the
// screen keeps moving; the first answer brings the view back. Only the first
// sample must succeed: a wrong endpoint or key fails at once (exit 3).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli/commands.h"
#include "cli/json.h"
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

Result<Sample> TakeSample(Context& ctx, std::chrono::milliseconds timeout) {
  Sample s;
  HOARD_ASSIGN_OR_RETURN(s.status, ctx.Call(proto::ClusterStatus{}, timeout));
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
                           {"used_bytes", n.used_bytes},
                           {"used_dataset_bytes", n.used_dataset_bytes},
                           {"used_read_tier_bytes", n.used_read_tier_bytes},
                           {"used_checkpoint_bytes", n.used_checkpoint_bytes},
                           {"capacity_bytes", n.capacity_bytes},
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
                        {"expected_bytes", d.expected_bytes},
                        {"bytes", d.meta.total_bytes},
                        {"cached_files", d.files_cached},
                        {"files", d.meta.file_count},
                        {"fill_rate_bytes_per_s", d.fill_rate},
                        {"eta_seconds", d.eta_seconds}});
  }
  const int64_t now_ms = WallClockMs();
  uint64_t undrained = 0, overdue = 0;
  double age = 0;
  for (const auto& j : cur.status.ckpt_jobs) {
    undrained += j.undrained_bytes;
    overdue += j.overdue_files;
    if (j.oldest_undrained_unix_ms > 0) age = std::max(age, double(now_ms - j.oldest_undrained_unix_ms) / 1000);
  }
  return {{"interval_seconds", secs},
          {"nodes", nodes},
          {"datasets", datasets},
          {"checkpoints",
           {{"undrained_bytes", undrained}, {"oldest_undrained_age_seconds", age}, {"overdue_files", overdue}}}};
}

// `s` in at most `width` columns: a longer name keeps its end (node and
// dataset names tend to differ there: gpu017, gpu018), marked by a '~'.
std::string Fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return "~" + s.substr(s.size() - (width - 1));
}

// A count in at most 6 columns: "8012", "123.4k", "12.3M".
std::string Count(uint64_t n) {
  char buf[32];
  if (n < 100000) std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  else if (n < 1000000) std::snprintf(buf, sizeof buf, "%.1fk", double(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  return buf;
}

// The rows below are laid out to fit 80 columns: a node row is at most
// 12+1+5+3*11+5+1+21 = 78, a dataset row 14+1+6+1+21+1+13+1+18 = 76
// (FormatBytes is at most 10 columns: "1023.9 MiB").
constexpr const char* kNodeRow = "%-12s %-5s %10s %10s %10s %4s %s\n";
constexpr const char* kDatasetRow = "%-14s %6s %21s %13s %s\n";

std::string Text(const nlohmann::json& v) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, kNodeRow, "NODE", "STATE", "DISK/s", "PEER/s", "ORIGIN/s", "HIT",
                "DISK USED/SIZE");
  out += line;
  for (const auto& n : v["nodes"]) {
    const std::string state = !n["up"].get<bool>() ? "down" : n["draining"].get<bool>() ? "drain" : "up";
    const uint64_t cap = n["capacity_bytes"];
    const std::string store = FormatBytes(double(n["used_bytes"].get<uint64_t>())) + "/" +
                              (cap == 0 ? std::string("unlimited") : FormatBytes(double(cap)));
    const std::string name = Fit(n["name"].get<std::string>(), 12);
    if (n.contains("bytes_per_s")) {
      const auto& r = n["bytes_per_s"];
      char hit[16];
      std::snprintf(hit, sizeof hit, "%.0f%%", 100 * n["hit_ratio"].get<double>());
      std::snprintf(line, sizeof line, kNodeRow, name.c_str(), state.c_str(), FormatBytes(r["disk"]).c_str(),
                    FormatBytes(r["peer"]).c_str(), FormatBytes(r["origin"]).c_str(), hit, store.c_str());
    } else {
      std::snprintf(line, sizeof line, kNodeRow, name.c_str(), state.c_str(), "-", "-", "-", "-", store.c_str());
    }
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof line, kDatasetRow, "DATASET", "CACHED", "BYTES", "FILES", "FILL");
  out += line;
  for (const auto& d : v["datasets"]) {
    const uint64_t bytes = d["expected_bytes"], cached = d["cached_bytes"];
    char pct[16];
    // 100.0% only when all is there, as the progress bar shows it.
    const double frac = bytes == 0 ? 1.0 : double(cached) / double(bytes);
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * (cached < bytes ? std::min(frac, 0.999) : frac));
    const std::string cached_s = FormatBytes(double(cached)) + "/" + FormatBytes(double(bytes));
    const std::string files = Count(d["cached_files"].get<uint64_t>()) + "/" + Count(d["files"].get<uint64_t>());
    const int64_t eta = d["eta_seconds"];
    const std::string fill = !d["warm"].get<bool>() ? "(not warmed)"
                             : cached >= bytes        ? "complete"
                                                      : FormatBytes(d["fill_rate_bytes_per_s"]) + "/s" +
                                                     (eta >= 0 ? " " + Duration(double(eta)) : "");
    std::snprintf(line, sizeof line, kDatasetRow, Fit(d["name"].get<std::string>(), 14).c_str(), pct,
                  cached_s.c_str(), files.c_str(), fill.c_str());
    out += line;
  }
  const auto& c = v["checkpoints"];
  out += "\ncheckpoints: " + FormatBytes(double(c["undrained_bytes"].get<uint64_t>())) + " not yet on the origin";
  if (c["oldest_undrained_age_seconds"].get<double>() > 0) {
    out += ", oldest " + Duration(c["oldest_undrained_age_seconds"].get<double>());
  }
  if (c["overdue_files"].get<uint64_t>() > 0) out += ", " + std::to_string(c["overdue_files"].get<uint64_t>()) + " overdue";
  return out + "\n";
}

// The line on top of the last screen while the coordinator is away, cut to
// 80 columns (an error message can be long).
std::string OutageLine(const Context& ctx, const Status& s, double seconds) {
  std::string line = ctx.unreachable() ? "coordinator unreachable for " + Duration(seconds) + ", showing last data"
                                       : "coordinator failing for " + Duration(seconds) + " (" + s.message() +
                                             "), showing last data";
  if (line.size() > 80) line = line.substr(0, 77) + "...";
  return line + "\n";
}

int RunTop(Context& ctx, double interval_s, bool once) {
  using Clock = std::chrono::steady_clock;
  once = once || ctx.json();
  const auto interval = std::chrono::milliseconds(int64_t(interval_s * 1000));
  // A stopped coordinator holds a call for its whole timeout: bound each one
  // by a few seconds (or the interval, if longer), so that the outage line
  // keeps counting; --timeout-ms may shorten it further.
  const auto call_timeout = std::min(std::chrono::milliseconds(ctx.options().timeout_ms),
                                     std::max(interval, std::chrono::milliseconds(3000)));
  Result<Sample> prev = TakeSample(ctx, call_timeout);
  if (!prev.ok()) return ctx.Fail(prev.status().Annotate("top"));
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  // The last view drawn, kept through an outage (before a second sample:
  // the first, without rates).
  std::string last_screen = Text(View(*prev, *prev));
  Clock::time_point last_answer = Clock::now();
  while (true) {
    std::this_thread::sleep_for(interval);
    Result<Sample> cur = TakeSample(ctx, call_timeout);
    if (!cur.ok() && once) return ctx.Fail(cur.status().Annotate("top"));
    std::string screen = tty ? "\033[H\033[2J" : "";
    if (cur.ok()) {
      last_answer = Clock::now();
      // After an outage the rates are over the whole gap: what moved in it.
      const nlohmann::json view = View(*prev, *cur);
      if (once) return ctx.Done(view, Text(view));
      last_screen = Text(view);
      prev = std::move(cur);
      screen += last_screen;
    } else {
      const double away = std::chrono::duration<double>(Clock::now() - last_answer).count();
      screen += OutageLine(ctx, cur.status(), away) + last_screen;
    }
    // Redraw in place on a terminal; a pipe gets one screen after another.
    std::fwrite(screen.data(), 1, screen.size(), stdout);
    std::fflush(stdout);
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
