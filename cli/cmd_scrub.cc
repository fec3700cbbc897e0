// hoard scrub [NODE] [--wait] [--timeout S] [--stall-timeout S]
//
// Starts a scrub pass now (node/scrubber.h: every chunk file read back from
// the disk and checked; what rotted is quarantined and fetched again) on
// NODE, or on every up node. With --wait it shows the passes' progress and
// ends when they are done, with what they found.
#include <chrono>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/wait.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct ScrubArgs {
  std::string node;  // "" = every up node
  bool wait = false;
  double timeout_s = 0;
  double stall_timeout_s = 300;
};

struct Target {
  proto::NodeInfo node;
  uint64_t pass = 0;
  uint64_t corrupt_before = 0;
  proto::ScrubStatus status;
  bool done = false;
};

Result<proto::NodeStatusReply> AskNode(Context& ctx, const proto::NodeInfo& n) {
  proto::RpcClient client(ctx.zmq(), n.endpoint);
  client.set_connect_timeout(std::chrono::milliseconds(1000));
  Result<proto::NodeStatusReply> r = client.Call(proto::NodeStatus{}, std::chrono::milliseconds(ctx.options().timeout_ms));
  if (!r.ok()) return r.status().Annotate("node " + n.name);
  return r;
}

nlohmann::json Json(const Target& t) {
  return {{"name", t.node.name},
          {"pass", t.pass},
          {"done", t.done},
          {"files", t.status.files},
          {"files_done", t.status.files_done},
          {"bytes", t.status.bytes},
          {"bytes_done", t.status.bytes_done},
          {"corrupt_found", t.status.corrupt - std::min(t.status.corrupt, t.corrupt_before)},
          {"corrupt_chunks", t.status.corrupt},
          {"scrub_last_pass_unix", t.status.last_pass_unix}};
}

int RunScrub(Context& ctx, const ScrubArgs& a) {
  Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{});
  if (!st.ok()) return ctx.Fail(st.status());
  std::vector<Target> targets;
  for (const proto::NodeInfo& n : st->nodes) {
    if (!a.node.empty() && n.name != a.node) continue;
    if (!n.up) {
      if (!a.node.empty()) return ctx.Fail(Status::Unavailable("node " + n.name + " is down"));
      continue;
    }
    targets.push_back(Target{.node = n});
  }
  if (targets.empty()) {
    return ctx.Fail(a.node.empty() ? Status::Unavailable("no node is up")
                                   : Status::InvalidArgument("no node named " + a.node + " (see hoard status)"));
  }
  for (Target& t : targets) {
    Result<proto::NodeStatusReply> before = AskNode(ctx, t.node);
    if (!before.ok()) return ctx.Fail(before.status());
    t.corrupt_before = before->scrub.corrupt;
    proto::RpcClient client(ctx.zmq(), t.node.endpoint);
    client.set_connect_timeout(std::chrono::milliseconds(1000));
    Result<proto::ScrubReply> r = client.Call(proto::Scrub{}, std::chrono::milliseconds(ctx.options().timeout_ms));
    if (!r.ok()) return ctx.Fail(r.status().Annotate("scrub on node " + t.node.name));
    t.pass = r->pass;
    t.status = before->scrub;
  }
  if (!a.wait) {
    nlohmann::json nodes = nlohmann::json::array();
    std::string text;
    for (const Target& t : targets) {
      nodes.push_back({{"name", t.node.name}, {"pass", t.pass}});
      text += (text.empty() ? "" : "\n") + std::string("scrub pass ") + std::to_string(t.pass) + " started on " +
              t.node.name;
    }
    return ctx.Done({{"nodes", nodes}}, text + "\nfollow it with: hoard scrub " + a.node +
                                            (a.node.empty() ? "" : " ") + "--wait");
  }
  ProgressBar bar(a.node.empty() ? "scrub" : "scrub " + a.node);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  const WaitOutcome w = WaitUntil(ctx, limits, bar, {.poll = std::chrono::milliseconds(500)},
                                  [&]() -> Result<WaitProgress> {
    WaitProgress p{.complete = true};
    for (Target& t : targets) {
      if (!t.done) {
        Result<proto::NodeStatusReply> r = AskNode(ctx, t.node);
        if (!r.ok()) return r.status();
        t.status = r->scrub;
        t.done = t.status.pass > t.pass || (t.status.pass == t.pass && !t.status.running);
      }
      p.complete = p.complete && t.done;
      p.total_bytes += t.status.bytes;
      p.done_bytes += t.done ? t.status.bytes : t.status.bytes_done;
      p.total_files += t.status.files;
      p.done_files += t.done ? t.status.files : t.status.files_done;
    }
    return p;
  });
  nlohmann::json nodes = nlohmann::json::array();
  uint64_t found = 0, bytes = 0;
  for (const Target& t : targets) {
    nodes.push_back(Json(t));
    found += t.status.corrupt - std::min(t.status.corrupt, t.corrupt_before);
    bytes += t.status.bytes;
  }
  nlohmann::json doc = {{"nodes", nodes}, {"seconds", w.seconds}, {"corrupt_found", found}};
  if (w.end != WaitOutcome::End::kComplete) return FailWait(ctx, w, "scrub", "", doc);
  std::string text = "scrub: " + std::to_string(targets.size()) + " node(s), " + FormatBytes(double(bytes)) +
                     " checked in " + Duration(w.seconds) + "; " +
                     (found == 0 ? std::string("nothing corrupt")
                                 : Thousands(found) + " corrupt chunk file(s) quarantined and fetched again");
  return ctx.Done(doc, text);
}

}  // namespace

void AddScrubCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<ScrubArgs>();
  auto* cmd = app.add_subcommand(
      "scrub", "Read every chunk file a node keeps back from its disk now and check it (default: every up node)");
  cmd->add_option("node", args->node, "Only this node");
  cmd->add_flag("--wait", args->wait, "Show progress and end when the passes are done");
  cmd->add_option("--timeout", args->timeout_s, "With --wait: give up after this many seconds (0 = never)")
      ->capture_default_str();
  cmd->add_option("--stall-timeout", args->stall_timeout_s,
                  "With --wait: give up after this many seconds without progress")
      ->capture_default_str();
  cmd->callback([action, args] { *action = [args](Context& ctx) { return RunScrub(ctx, *args); }; });
}

}  // namespace hoard::cli
