// hoard node drain NODE [--wait] | hoard node undrain NODE | hoard node remove NODE [--force]
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "cli/wait.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct NodeArgs {
  std::string name;
  bool wait = false;
  bool force = false;
  double timeout_s = 0;        // 0 = no limit
  double stall_timeout_s = 60;  // no progress for this long ends the wait
};

// Sum over warm datasets: what the new placement needs, and what is cached.
struct Moved {
  uint64_t bytes = 0, expected = 0, files = 0, files_expected = 0;
  bool complete = true;
};

Moved Progress(const proto::ClusterStatusReply& st) {
  Moved m;
  for (const auto& d : st.datasets) {
    if (!d.meta.warm) continue;  // only warm datasets are held by their owners
    m.bytes += std::min(d.cached_bytes, d.expected_bytes);
    m.expected += d.expected_bytes;
    m.files += d.files_cached;
    m.files_expected += d.meta.file_count;
    m.complete = m.complete && d.complete;
  }
  return m;
}

int RunDrain(Context& ctx, const NodeArgs& a, bool drain) {
  Result<proto::NodeDrainReply> r = ctx.Call(proto::NodeDrain{.name = a.name, .drain = drain});
  if (!r.ok()) return ctx.Fail(r.status());
  if (!drain) {
    return ctx.Done(ToJson(r->node), "node " + a.name + " taken back: it owns its share of every dataset again");
  }
  if (!a.wait) {
    return ctx.Done(ToJson(r->node), "node " + a.name + " is draining: its chunks move to their new owners; follow "
                                     "it with: hoard node drain " + a.name + " --wait");
  }
  // Done when every warm dataset is complete on the new placement, in which
  // the drained node owns nothing: then it holds nothing anyone needs.
  ProgressBar bar("drain " + a.name);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  Moved m;
  const WaitOutcome w = WaitUntil(ctx, limits, bar, {.poll = std::chrono::milliseconds(500)},
                                  [&]() -> Result<WaitProgress> {
                                    Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{});
                                    if (!st.ok()) return st.status();
                                    m = Progress(*st);
                                    return WaitProgress{.done_bytes = m.bytes,
                                                        .total_bytes = m.expected,
                                                        .done_files = m.files,
                                                        .total_files = m.files_expected,
                                                        .complete = m.complete};
                                  });
  nlohmann::json j = ToJson(r->node);
  j["drained"] = w.end == WaitOutcome::End::kComplete;
  j["seconds"] = w.seconds;
  j["warm_bytes"] = m.expected;
  if (w.end == WaitOutcome::End::kComplete) {
    return ctx.Done(j, "node " + a.name + " drained in " + Duration(w.seconds) + ": every warm dataset is whole on " +
                           "the other nodes; it can be stopped");
  }
  return FailWait(ctx, w, "drain " + a.name,
                  " at " + FormatBytes(double(m.bytes)) + " of " + FormatBytes(double(m.expected)) +
                      "; the node is still draining (it keeps serving)",
                  j);
}

int RunRemove(Context& ctx, const NodeArgs& a) {
  Result<proto::NodeRemoveReply> r = ctx.Call(proto::NodeRemove{.name = a.name, .force = a.force});
  if (!r.ok()) return ctx.Fail(r.status());
  return ctx.Done({{"name", a.name}, {"removed", true}, {"epoch", r->epoch}},
                  "node " + a.name + " removed from the cluster" +
                      (a.force ? " (forced: its chunks get new owners, refilled from replicas or the origin)" : ""));
}

}  // namespace

void AddNodeCommands(CLI::App& app, Action* action) {
  auto* node = app.add_subcommand("node", "Drain a node before taking it out, take it back, or remove it");
  node->require_subcommand(1);
  auto args = std::make_shared<NodeArgs>();
  auto* drain = node->add_subcommand(
      "drain", "Move a node's chunks to their new owners (copied from it, not from the origin), then let it go");
  drain->add_option("name", args->name, "Node name")->required();
  drain->add_flag("--wait", args->wait, "Show progress and exit 0 only when the node holds nothing needed");
  drain->add_option("--timeout", args->timeout_s, "With --wait: give up after this many seconds (0 = never)")
      ->capture_default_str();
  drain->add_option("--stall-timeout", args->stall_timeout_s,
                    "With --wait: give up after this many seconds without progress")
      ->capture_default_str();
  drain->callback([action, args] { *action = [args](Context& ctx) { return RunDrain(ctx, *args, true); }; });
  auto* undrain = node->add_subcommand("undrain", "Take a drained node back: it owns its share again");
  undrain->add_option("name", args->name, "Node name")->required();
  undrain->callback([action, args] { *action = [args](Context& ctx) { return RunDrain(ctx, *args, false); }; });
  auto* remove = node->add_subcommand(
      "remove", "Forget a node that owns nothing (drained, or down); a running agent would join again");
  remove->add_option("name", args->name, "Node name")->required();
  remove->add_flag("--force", args->force, "Also remove a node that still owns chunks (they move to new owners)");
  remove->callback([action, args] { *action = [args](Context& ctx) { return RunRemove(ctx, *args); }; });
}

}  // namespace hoard::cli
