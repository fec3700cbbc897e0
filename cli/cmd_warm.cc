// hoard warm NAME [--wait]
#include <cstdio>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "cli/wait.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct WarmArgs {
  std::string name;
  bool wait = false;
  double timeout_s = 0;        // 0 = no limit
  double stall_timeout_s = 60;  // no progress for this long ends the wait
};

nlohmann::json Summary(const proto::DatasetStatus& d, double seconds, double rate) {
  nlohmann::json j = ToJson(d);
  j["seconds"] = seconds;
  j["rate_bytes_per_s"] = rate;
  return j;
}

// "; 2 node(s) down; 1,273 of 2,000 file(s) not cached, first: PATH: ERROR"
// (empty if neither).
std::string WaitDetail(const DatasetWait& w) {
  std::string detail;
  if (w.nodes_down > 0) detail += "; " + std::to_string(w.nodes_down) + " node(s) down";
  if (!w.last.meta.name.empty()) detail += NotCachedDetail(w.last, /*first=*/true);
  return detail;
}

int RunWarm(Context& ctx, const WarmArgs& a) {
  // Admission (coordinator/eviction.h): a warm-up that cannot fit fails
  // here at once (NoSpace: what is missing where, what holds the space).
  Result<proto::WarmReply> w = ctx.Call(proto::Warm{.name = a.name});
  if (!w.ok()) return ctx.Fail(w.status());
  std::string evicted;
  for (const std::string& e : w->evicted) evicted += (evicted.empty() ? "" : ", ") + e;
  if (!evicted.empty()) evicted = "evicted to make room: " + evicted + "\n";
  if (!a.wait) {
    nlohmann::json doc = ToJson(w->meta);
    doc["evicted"] = w->evicted;
    return ctx.Done(doc, evicted + "warming " + a.name + " on every owner; follow it with: hoard status " + a.name +
                             "  (or hoard warm " + a.name + " --wait)");
  }
  if (!evicted.empty() && !ctx.json()) std::fputs(evicted.c_str(), stderr);
  ProgressBar bar("warm " + a.name);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  DatasetWait seen;
  const WaitOutcome done = WaitDataset(ctx, a.name, limits, bar, {}, /*stop_on_permanent_failure=*/false, &seen);
  const proto::DatasetStatus& d = seen.last;
  if (done.end == WaitOutcome::End::kComplete) {
    std::string text = "warm " + a.name + ": complete, " + FormatBytes(double(d.cached_bytes)) + " in " +
                       Thousands(d.meta.file_count) + " files cached on " + std::to_string(d.nodes_reporting) +
                       " node(s) in " + Duration(done.seconds);
    nlohmann::json doc = Summary(d, done.seconds, done.rate_bytes_per_s);
    doc["evicted"] = w->evicted;
    return ctx.Done(doc, text);
  }
  char at[32];
  std::snprintf(at, sizeof at, " at %.1f%%", PercentCached(d));
  return FailWait(ctx, done, "warm " + a.name, (done.end == WaitOutcome::End::kError ? "" : at) + WaitDetail(seen),
                  d.meta.name.empty() ? nlohmann::json::object() : Summary(d, done.seconds, done.rate_bytes_per_s));
}

}  // namespace

void AddWarmCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<WarmArgs>();
  auto* cmd = app.add_subcommand("warm", "Make every owner fetch its chunks of a dataset from the origin");
  cmd->add_option("name", args->name, "Dataset name")->required();
  cmd->add_flag("--wait", args->wait,
                "Show progress and exit 0 only when every chunk is cached on all its owners");
  cmd->add_option("--timeout", args->timeout_s, "With --wait: give up after this many seconds (0 = never)")
      ->capture_default_str();
  cmd->add_option("--stall-timeout", args->stall_timeout_s,
                  "With --wait: give up after this many seconds without progress")
      ->capture_default_str();
  cmd->callback([action, args] { *action = [args](Context& ctx) { return RunWarm(ctx, *args); }; });
}

}  // namespace hoard::cli
