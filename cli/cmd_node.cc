// hoard node drain NODE [--wait] | hoard node undrain NODE | hoard node remove NODE [--force]
#include <algorithm>
#include <optional>
#include <set>

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

// Sum over warm datasets: what the new placement needs, and the files whole.
struct Moved {
  uint64_t expected = 0, files = 0, files_expected = 0;
  bool complete = true;
};

Moved Progress(const proto::ClusterStatusReply& st) {
  Moved m;
  for (const auto& d : st.datasets) {
    if (!d.meta.warm) continue;  // only warm datasets are held by their owners
    m.expected += d.expected_bytes;
    m.files += d.files_cached;
    m.files_expected += d.meta.file_count;
    m.complete = m.complete && d.complete;
  }
  return m;
}

// The bytes `node` owns of the warm datasets (its share, as last reported):
// what a drain of it moves to other nodes.
uint64_t ShareOf(const proto::ClusterStatusReply& st, const std::string& node) {
  uint64_t bytes = 0;
  for (const auto& d : st.datasets) {
    if (!d.meta.warm) continue;
    for (const auto& sh : d.shares) bytes += sh.node == node && sh.reported ? sh.owned_bytes : 0;
  }
  return bytes;
}

// The bytes the owners of the warm datasets lack (owned, not cached), summed
// over nodes; nullopt while a node that is up has not reported on the
// current placement (right after the drain moved it), as its lack is not
// known yet.
std::optional<uint64_t> Missing(const proto::ClusterStatusReply& st) {
  std::set<std::string> up;
  for (const auto& n : st.nodes) {
    if (n.up) up.insert(n.name);
  }
  uint64_t bytes = 0;
  for (const auto& d : st.datasets) {
    if (!d.meta.warm || d.complete) continue;
    for (const auto& sh : d.shares) {
      if (!sh.reported && up.contains(sh.node)) return std::nullopt;
      bytes += sh.owned_bytes - std::min(sh.cached_bytes, sh.owned_bytes);
    }
  }
  return bytes;
}

int RunDrain(Context& ctx, const NodeArgs& a, bool drain) {
  // What a drain moves: the node's share as reported before it (0 if it was
  // draining already; the wait then learns what is left as it goes).
  uint64_t share = 0;
  if (drain && a.wait) {
    Result<proto::ClusterStatusReply> before = ctx.Call(proto::ClusterStatus{});
    if (!before.ok()) return ctx.Fail(before.status());
    share = ShareOf(*before, a.name);
  }
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
  // the drained node owns nothing: then it holds nothing anyone needs. The
  // bar shows the bytes this drain moves (not the whole datasets): its
  // share, or what the owners lack if that is more, and how much of it they
  // no longer lack.
  ProgressBar bar("drain " + a.name);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  Moved m;
  uint64_t move = share, moved = 0;
  const WaitOutcome w = WaitUntil(ctx, limits, bar, {.poll = std::chrono::milliseconds(500)},
                                  [&]() -> Result<WaitProgress> {
                                    Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{});
                                    if (!st.ok()) return st.status();
                                    m = Progress(*st);
                                    if (const std::optional<uint64_t> left = Missing(*st)) {
                                      move = std::max(move, *left);
                                      moved = move - *left;
                                    }
                                    return WaitProgress{.done_bytes = moved,
                                                        .total_bytes = move,
                                                        .done_files = m.files,
                                                        .total_files = m.files_expected,
                                                        .complete = m.complete};
                                  });
  nlohmann::json j = ToJson(r->node);
  j["drained"] = w.end == WaitOutcome::End::kComplete;
  j["seconds"] = w.seconds;
  j["warm_bytes"] = m.expected;
  j["move_bytes"] = move;
  j["moved_bytes"] = moved;
  if (w.end == WaitOutcome::End::kComplete) {
    return ctx.Done(j, "node " + a.name + " drained in " + Duration(w.seconds) + ": " + FormatBytes(double(move)) +
                           " moved; every warm dataset is whole on the other nodes; it can be stopped");
  }
  return FailWait(ctx, w, "drain " + a.name,
                  " at " + FormatBytes(double(moved)) + " of " + FormatBytes(double(move)) +
                      " moved; the node is still draining (it keeps serving)",
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
      "remove", "Forget a stopped node that owns nothing (drained, or out); a running one is refused (its agent "
                "would register again)");
  remove->add_option("name", args->name, "Node name")->required();
  remove->add_flag("--force", args->force,
                   "Also remove a node down but keeping its placement until --out-after (its chunks move to new "
                   "owners now)");
  remove->callback([action, args] { *action = [args](Context& ctx) { return RunRemove(ctx, *args); }; });
}

}  // namespace hoard::cli
