// hoard warm NAME [--wait]
#include <thread>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
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

int RunWarm(Context& ctx, const WarmArgs& a) {
  Result<proto::WarmReply> w = ctx.Call(proto::Warm{.name = a.name});
  if (!w.ok()) return ctx.Fail(w.status());
  if (!a.wait) {
    return ctx.Done(ToJson(w->meta), "warming " + a.name + " on every owner; follow it with: hoard status " +
                                         a.name + "  (or hoard warm " + a.name + " --wait)");
  }
  ProgressBar bar("warm " + a.name);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  while (true) {
    Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{.dataset = a.name});
    if (!st.ok()) return ctx.Fail(st.status().Annotate("warm " + a.name));
    const proto::DatasetStatus& d = st->datasets.at(0);
    bar.Update(std::min(d.cached_bytes, d.expected_bytes), d.expected_bytes, d.files_cached, d.meta.file_count);
    const double elapsed = limits.elapsed();
    if (d.complete) {
      bar.Finish();
      std::string text = "warm " + a.name + ": complete, " + FormatBytes(double(d.cached_bytes)) + " in " +
                         Thousands(d.meta.file_count) + " files cached on " + std::to_string(d.nodes_reporting) +
                         " node(s) in " + Duration(elapsed);
      return ctx.Done(Summary(d, elapsed, bar.rate_bytes_per_s()), text);
    }
    if (const std::string why = limits.Check(d.cached_bytes); !why.empty()) {
      bar.Finish();
      std::string detail;
      size_t down = 0;
      for (const auto& n : st->nodes) down += n.up ? 0 : 1;
      if (down > 0) detail += "; " + std::to_string(down) + " node(s) down";
      if (!d.failures.empty()) {
        detail += "; " + std::to_string(d.failures.size()) + " file(s) failed, first: " + d.failures[0].path +
                  ": " + d.failures[0].error;
      }
      if (ctx.json()) {
        nlohmann::json j = Summary(d, elapsed, bar.rate_bytes_per_s());
        j["error"] = "warm " + a.name + ": " + why + detail;
        ctx.Done(j, "");
      }
      std::fprintf(stderr, "hoard: warm %s: %s at %.1f%%%s\n", a.name.c_str(), why.c_str(), PercentCached(d),
                   detail.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
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
