// hoard: the cluster operations CLI.
#include <algorithm>
#include <climits>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/build_info.h"

namespace {

// Scripts branch on these; cli/context.cc (Context::Fail) decides them.
// `hoard hook` has its own (cli/cmd_hook.cc), in its commands' footers.
constexpr const char* kExitStatus =
    "Exit status: 0 ok; 1 the operation failed (including an error the coordinator reported,\n"
    "  e.g. an origin that is down); 2 bad usage or bad input; 3 the coordinator could not be\n"
    "  reached (no answer at all: also what a coordinator that refuses the keys looks like);\n"
    "  4 the request needs the admin key (admin.key in --keys DIR).";

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"hoard: a distributed cache of training datasets on the GPU nodes' local disks.\n"
               "Every command takes --json for machine-readable output."};
  app.require_subcommand(1);
  // Global options (--json, --dir, ...) may come after the subcommand too.
  app.fallthrough();
  hoard::cli::GlobalOptions global;
  app.add_option("--coordinator", global.coordinator,
                 "Coordinator endpoint, or the coordinators of an HA cluster separated by commas "
                 "(default: $HOARD_COORDINATOR, else the local cluster, else tcp://127.0.0.1:7100)");
  app.add_option("--dir", global.local_dir, "Directory of the local cluster (default: $HOARD_LOCAL_DIR or /tmp/hoard)");
  app.add_flag("--json", global.json, "Print one JSON document on stdout");
  app.add_option("--keys", global.keys,
                 "Directory with the cluster's keys (cluster.key or cluster.pub, and admin.key for changes; "
                 "default: $HOARD_KEYS, else the local cluster's)");
  app.add_option("--key-class", global.key_class,
                 "Connect with no stronger key than this: admin, member or client (default: $HOARD_KEY_CLASS, "
                 "else the strongest key in --keys this user can read)");
  app.set_version_flag("--version", hoard::VersionLine(hoard::ProgramName(argv[0])),
                       "Print the program's name, version and commit, and exit");
  app.add_option("--timeout-ms", global.timeout_ms, "Per-request timeout")
      ->capture_default_str()
      ->check(CLI::Range(1, INT_MAX));  // a negative one would wait forever, 0 fail every call

  hoard::cli::Action action;
  hoard::cli::AddStatusCommand(app, &action);
  hoard::cli::AddDatasetCommands(app, &action);
  hoard::cli::AddWarmCommand(app, &action);
  hoard::cli::AddNodeCommands(app, &action);
  hoard::cli::AddLocalCommands(app, &action);
  hoard::cli::AddHookCommands(app, &action);
  hoard::cli::AddCheckpointCommands(app, &action);
  hoard::cli::AddKeysCommands(app, &action);
  hoard::cli::AddConfigCommands(app, &action);
  hoard::cli::AddTopCommand(app, &action);
  hoard::cli::AddScrubCommand(app, &action);
  hoard::cli::AddQuotaCommands(app, &action);
  hoard::cli::AddLeaseCommands(app, &action);

  // `hoard help [COMMAND...]`: what `hoard [COMMAND...] --help` prints (the
  // command list without a command), exit 0.
  std::vector<std::string> topic;
  auto* help = app.add_subcommand("help", "Show the commands, or a command's help: hoard help COMMAND [SUB]");
  help->add_option("command", topic, "The command (and subcommand) to describe");
  help->callback([&] {
    action = [&](hoard::cli::Context&) {
      std::vector<std::string> args = {"--help"};
      CLI::App* cmd = &app;
      for (const std::string& word : topic) {
        CLI::App* sub = nullptr;
        for (CLI::App* s : cmd->get_subcommands({})) {
          if (s->check_name(word) && s->get_name() != "help") sub = s;
        }
        if (sub == nullptr) {
          std::cerr << "hoard: help: no command '" << word << "'"
                    << (cmd == &app ? "" : " under " + cmd->get_name()) << " (see hoard help)" << std::endl;
          return 2;
        }
        cmd = sub;
        args.insert(args.end() - 1, word);
      }
      // Parsed again as `hoard COMMAND... --help`, so the text is exactly that.
      app.clear();
      std::reverse(args.begin(), args.end());  // CLI11 takes them last first
      try {
        app.parse(args);
      } catch (const CLI::ParseError& e) {
        return app.exit(e);
      }
      return 0;
    };
  });

  app.footer(kExitStatus);
  // Subcommand help lists the global options too: they work after any command.
  // A command that set its own footer keeps it in place of kExitStatus.
  std::function<void(CLI::App*)> footer = [&](CLI::App* cmd) {
    for (CLI::App* sub : cmd->get_subcommands({})) {
      const std::string own = sub->get_footer();
      sub->footer(
          "Global options (before or after the command):\n"
          "  --json             print one JSON document on stdout (errors too)\n"
          "  --coordinator EP   coordinator endpoint, or several separated by commas (default:\n"
          "                     $HOARD_COORDINATOR, the local cluster, tcp://127.0.0.1:7100)\n"
          "  --dir DIR          local cluster directory (default: $HOARD_LOCAL_DIR or /tmp/hoard)\n"
          "  --keys DIR         the cluster's keys (default: $HOARD_KEYS, the local cluster's)\n"
          "  --key-class C      connect with no stronger key than C: admin, member, client\n"
          "  --timeout-ms MS    per-request timeout\n" + (own.empty() ? std::string(kExitStatus) : own));
      footer(sub);
    }
  };
  footer(&app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // "hoard 0.1.0 (commit 1a2b3c4d5e6f)" on stdout, exit 0
  } catch (const CLI::ParseError& e) {
    // No command at all (`hoard`, `hoard --dir X`): the command list, on
    // stderr, as the usage error it is (exit 2). A word that is no command
    // (`hoard frobnicate`) gets CLI11's one line naming it instead.
    if (app.get_subcommands().empty() && app.remaining_size() == 0 &&
        dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !global.json) {
      std::cerr << app.help() << "\nhoard: a command is required (hoard help COMMAND describes one)" << std::endl;
      return 2;
    }
    if (app.get_subcommands().empty() && app.remaining_size() > 0) {
      hoard::cli::Context ctx(global);
      return ctx.Fail(hoard::Status::InvalidArgument("unknown command '" + app.remaining().front() +
                                                     "' (hoard help lists the commands)"));
    }
    return hoard::cli::ParseErrorExit(app, global, e);
  }
  hoard::cli::Context ctx(global);
  return action ? action(ctx) : 2;
}
