// hoard local up|down|restart|upgrade
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/process.h"
#include "common/file_util.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

// Mount points and pid files must not depend on the caller's cwd.
std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return path;
  return JoinPath(cwd, path);
}

struct UpArgs {
  int nodes = 3;
  int coordinators = 1;
  std::string capacity = "0";
  bool no_mount = false;
  int down_after_ms = 5000;
  std::string out_after = "5m";
  std::string log_level = "info";
  bool insecure = false;
  std::set<std::string> given;  // the options given on the command line
};

int RunUp(Context& ctx, const UpArgs& a) {
  Result<uint64_t> cap = ParseBytes(a.capacity);
  if (!cap.ok()) return ctx.Fail(cap.status().Annotate("--capacity"));
  if (Result<uint64_t> out = ParseDurationSeconds(a.out_after); !out.ok()) {
    return ctx.Fail(out.status().Annotate("--out-after"));
  }
  const std::string dir = Absolute(ctx.LocalDir());
  Result<nlohmann::json> r = LocalUp({.dir = dir,
                                      .nodes = a.nodes,
                                      .coordinators = a.coordinators,
                                      .capacity_bytes = *cap,
                                      .mount = !a.no_mount,
                                      .down_after_ms = a.down_after_ms,
                                      .out_after = a.out_after,
                                      .log_level = a.log_level,
                                      .bin_dir = BinDir(),
                                      .insecure = a.insecure,
                                      .given = a.given});
  if (!r.ok()) return ctx.Fail(r.status().Annotate("local up"));
  const nlohmann::json& j = *r;
  std::ostringstream t;
  auto names = [](const nlohmann::json& list) {
    std::string out;
    for (const auto& n : list) out += (out.empty() ? "" : ", ") + n.get<std::string>();
    return out;
  };
  if (j.value("resumed", false)) {
    // Say exactly what this `up` did to a cluster that was partly running.
    t << "hoard local cluster in " << dir << " resumed:";
    if (!j["kept"].empty()) t << " kept " << names(j["kept"]) << " running;";
    if (j["restarted"].empty()) t << " restarted nothing";
    else t << " restarted " << names(j["restarted"]) << " (on the recorded ports and directories)";
    for (const auto& l : j["left_out"]) {
      t << "; left out " << l["name"].get<std::string>() << ": " << l["reason"].get<std::string>();
    }
    t << "\n";
  } else {
    t << "hoard local cluster up in " << dir << "\n";
  }
  if (j.contains("coordinators") && j["coordinators"].is_array()) {
    // High availability: the coordinators and etcd's members, one a line.
    for (const auto& c : j["coordinators"]) {
      t << "  " << c["name"].get<std::string>() << " " << c["endpoint"].get<std::string>() << "  (log "
        << c["log"].get<std::string>() << ")\n";
    }
    for (const auto& m : j.value("etcd", nlohmann::json::array())) {
      t << "  " << m["name"].get<std::string>() << "        " << m["endpoint"].get<std::string>() << "  (log "
        << m["log"].get<std::string>() << ")\n";
    }
  } else {
    t << "  coordinator  " << j["coordinator"].get<std::string>() << "  (log "
      << j["coordinator_log"].get<std::string>() << ")\n";
  }
  for (const auto& n : j["nodes"]) {
    if (n.value("removed", false)) {
      t << "  " << n["name"].get<std::string>() << "        removed (hoard node remove): not started\n";
      continue;
    }
    t << "  " << n["name"].get<std::string>() << "        " << n["endpoint"].get<std::string>() << "  store "
      << n["store"].get<std::string>() << "\n";
  }
  if (j["mount"].is_object()) {
    t << "  mount        " << j["mount"]["path"].get<std::string>() << "  (node1's view: datasets appear under "
      << j["mount"]["path"].get<std::string>() << "/datasets)\n";
  }
  if (j["keys"].is_string()) {
    t << "  keys         " << j["keys"].get<std::string>() << "  (admin.key included: this CLI may change the "
      << "cluster)\n";
  }
  if (dir != kDefaultLocalDir) t << "point the CLI at it with: export HOARD_LOCAL_DIR=" << ShellWord(dir) << "\n";
  t << "stop it with: hoard local down" << (dir != kDefaultLocalDir ? " --dir " + ShellWord(dir) : "");
  return ctx.Done(j, t.str());
}

int RunDown(Context& ctx, bool purge) {
  const std::string dir = Absolute(ctx.LocalDir());
  Result<nlohmann::json> r = LocalDown(dir, purge);
  if (!r.ok()) return ctx.Fail(r.status().Annotate("local down"));
  nlohmann::json doc = *r;
  if (!doc["not_stopped"].empty()) {
    // The JSON error keeps what was stopped and what was not.
    std::string stuck;
    for (const auto& p : doc["not_stopped"]) {
      stuck += (stuck.empty() ? "" : ", ") + p["name"].get<std::string>() + " (pid " +
               std::to_string(p["pid"].get<int>()) + ": " + p["reason"].get<std::string>() + ")";
    }
    const std::string reason = "local down: would not stop: " + stuck + "; " + doc["dir"].get<std::string>() +
                               "/cluster.json is kept: run hoard local down --dir " + ShellWord(dir) +
                               " again once they are gone";
    return ctx.FailWith(Status::Unavailable(reason), doc, /*reached=*/true);
  }
  std::string text = "hoard local cluster in " + dir + " stopped";
  if (!doc["found"].get<bool>()) text = "no hoard local cluster in " + dir + ": nothing to stop";
  else if (purge) text += " and its directory removed";
  else text += " (cached chunks kept; --purge removes them)";
  return ctx.Done(doc, text);
}

// One line per daemon restarted, as it happens: on stdout as the text, on
// stderr beside --json (whose stdout is the one document).
std::string StepLine(const nlohmann::json& step) {
  std::ostringstream t;
  t.setf(std::ios::fixed);
  t.precision(1);
  const std::string name = step["name"].get<std::string>();
  t << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ');
  if (step["how"] == "in_place") {
    t << " restarted in place (SIGHUP; pid " << step["pid"].get<int>() << " kept, mount kept), generation "
      << step["previous_generation"].get<int64_t>() << " -> " << step["generation"].get<int64_t>();
  } else if (step["how"] == "started") {
    t << " started (was not running; pid " << step["pid"].get<int>() << ")";
  } else {
    t << " restarted (pid " << step["previous_pid"].get<int>() << " -> " << step["pid"].get<int>() << ")";
  }
  t << " in " << step["seconds"].get<double>() << " s";
  return t.str();
}

int RunRestart(Context& ctx, LocalRestartOptions o) {
  o.dir = Absolute(ctx.LocalDir());
  const bool json = ctx.json();
  if (!json) {
    std::cout << (o.upgrade_from.empty() ? "restarting" : "upgrading") << " the hoard local cluster in " << o.dir
              << ", one daemon at a time:" << std::endl;
  }
  o.on_step = [json](const nlohmann::json& step) { (json ? std::cerr : std::cout) << StepLine(step) << std::endl; };
  LocalRestartResult r = LocalRestart(o);
  if (!r.status.ok()) {
    return ctx.FailWith(r.status.Annotate(o.upgrade_from.empty() ? "local restart" : "local upgrade"), r.doc,
                        /*reached=*/true);
  }
  std::string names;
  for (const auto& n : r.doc["restarted"]) names += (names.empty() ? "" : ", ") + n.get<std::string>();
  std::string text = "restarted " + std::to_string(r.doc["restarted"].size()) + " daemon(s): " + names;
  if (!o.upgrade_from.empty()) {
    text = "upgraded: " + r.doc["bin_dir"].get<std::string>() + " now holds the binaries of " + o.upgrade_from +
           "; " + text;
  }
  return ctx.Done(r.doc, text);
}

}  // namespace

void AddLocalCommands(CLI::App& app, Action* action) {
  auto* local = app.add_subcommand("local", "Run a whole cluster on this machine (demo, tests, development)");
  local->require_subcommand(1);

  auto up_args = std::make_shared<UpArgs>();
  auto* up = local->add_subcommand(
      "up",
      "Start a coordinator, N node agents and a mount under --dir (default /tmp/hoard), on loopback; on a cluster "
      "there of which some daemons died, restart only those (removed nodes stay out)");
  up->add_option("--nodes", up_args->nodes, "Number of node agents")->capture_default_str();
  up->add_option("--coordinators", up_args->coordinators,
                 "Coordinators; more than 1: that many in high availability, with as many etcd members (the "
                 "leader elected and the state kept in etcd)")
      ->check(CLI::Range(1, 7))
      ->capture_default_str();
  up->add_option("--capacity", up_args->capacity, "What hoard may keep on each node's disk (datasets, checkpoints and the read tier together), e.g. 10G; 0 = the size of the store's disk (no limit but the disk)")
      ->capture_default_str();
  up->add_flag("--no-mount", up_args->no_mount, "Do not start the FUSE mount");
  up->add_option("--down-after-ms", up_args->down_after_ms, "Mark a silent node down after this long")
      ->capture_default_str();
  up->add_option("--out-after", up_args->out_after,
                 "A node down this long is out: its chunks get new owners, e.g. 5m or 2s; 0: at once")
      ->capture_default_str();
  up->add_option("--log-level", up_args->log_level, "Daemon log level")->capture_default_str();
  up->add_flag("--insecure", up_args->insecure,
               "Run the daemons without keys (no authentication, no encryption); default: DIR/keys, made once");
  up->callback([action, up_args, up] {
    // Which options were given: a resume refuses those that differ from the
    // record, and ignores the defaults.
    for (const char* flag :
         {"--nodes", "--coordinators", "--capacity", "--no-mount", "--down-after-ms", "--out-after", "--log-level",
          "--insecure"}) {
      if (up->count(flag) > 0) up_args->given.insert(flag);
    }
    *action = [up_args](Context& ctx) { return RunUp(ctx, *up_args); };
  });

  auto restart_args = std::make_shared<LocalRestartOptions>();
  auto timeout_s = std::make_shared<int>(60);
  auto* restart = local->add_subcommand(
      "restart",
      "Restart the running daemons in place, one at a time, each waited for: the coordinator, then node by node the "
      "agent and its mount (the mount keeps its FUSE connection: readers see a pause, never an error; open files stay "
      "open). With --node or --coordinator, only those");
  restart->add_option("--node", restart_args->nodes, "Restart this node's agent and its mount (repeatable)");
  restart->add_flag("--coordinator", restart_args->coordinator, "Restart the coordinator");
  restart->add_option("--timeout", *timeout_s, "Seconds each daemon has to come back")->capture_default_str();
  restart->callback([action, restart_args, timeout_s] {
    restart_args->timeout = std::chrono::seconds(*timeout_s);
    *action = [restart_args](Context& ctx) { return RunRestart(ctx, *restart_args); };
  });

  auto upgrade_args = std::make_shared<LocalRestartOptions>();
  auto* upgrade = local->add_subcommand(
      "upgrade",
      "Copy hoard, hoard-coordinator, hoard-node and hoard-fuse from --bin-dir into the cluster's DIR/bin (each "
      "renamed into place), then restart every daemon on them as `local restart` does; the first daemon that does "
      "not come back stops it, the others are left running");
  upgrade->add_option("--bin-dir", upgrade_args->upgrade_from, "Directory with the new binaries (a build's bin/)")
      ->required();
  upgrade->add_option("--timeout", *timeout_s, "Seconds each daemon has to come back")->capture_default_str();
  upgrade->callback([action, upgrade_args, timeout_s] {
    upgrade_args->timeout = std::chrono::seconds(*timeout_s);
    upgrade_args->upgrade_from = Absolute(upgrade_args->upgrade_from);
    *action = [upgrade_args](Context& ctx) { return RunRestart(ctx, *upgrade_args); };
  });

  auto purge = std::make_shared<bool>(false);
  auto* down = local->add_subcommand("down", "Unmount and stop the local cluster started with `hoard local up`");
  down->add_flag("--purge", *purge, "Also delete its directory, cached chunks included");
  down->callback([action, purge] { *action = [purge](Context& ctx) { return RunDown(ctx, *purge); }; });
}

}  // namespace hoard::cli
