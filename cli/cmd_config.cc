// hoard config check FILE
//
// Each daemon table of the file is checked by the daemon that reads it
// (`hoard-node --config FILE --check-config`, installed next to `hoard`), so
// the check knows exactly the options of the installed daemons, and no list of
// them is kept here.
#include <iostream>

#include "cli/commands.h"
#include "cli/process.h"
#include "common/config_file.h"
#include "common/file_util.h"

namespace hoard::cli {
namespace {

nlohmann::json ErrorJson(const std::string& table, const ConfigError& e) {
  return {{"table", table}, {"line", e.line}, {"option", e.option}, {"message", e.message}};
}

// "FILE:LINE: [TABLE] OPTION: MESSAGE"
std::string ErrorLine(const std::string& file, const nlohmann::json& e) {
  ConfigError err{.file = file,
                  .line = e["line"].get<int>(),
                  .option = e["option"].get<std::string>(),
                  .message = e["message"].get<std::string>()};
  const std::string table = e["table"].get<std::string>();
  if (!table.empty()) err.option = "[" + table + "]" + (err.option.empty() ? "" : " " + err.option);
  return err.ToString();
}

// Runs the daemon of `table` in its check mode and adds its errors. Returns
// false if it could not check (no such binary, no report).
bool CheckTable(const std::string& file, const DaemonTable& daemon, nlohmann::json* errors) {
  const std::string binary = JoinPath(BinDir(), daemon.binary);
  auto fail = [&](const std::string& why) {
    errors->push_back(ErrorJson(daemon.table, {.file = file, .message = "not checked: " + why}));
    return false;
  };
  Result<Output> run = RunOutput({binary, "--config", file, "--check-config"});
  if (!run.ok()) return fail(run.status().message() + " (the daemons are installed next to hoard)");
  nlohmann::json report = nlohmann::json::parse(run->out, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("errors") || !report["errors"].is_array()) {
    return fail(binary + " --check-config exited " + std::to_string(run->exit_code) + " without a report");
  }
  for (auto& e : report["errors"]) {
    e["table"] = daemon.table;
    errors->push_back(e);
  }
  return true;
}

int RunCheck(Context& ctx, const std::string& file) {
  std::vector<std::string> tables;
  nlohmann::json errors = nlohmann::json::array();
  for (const ConfigError& e : ListDaemonTables(file, &tables)) errors.push_back(ErrorJson("", e));
  if (errors.empty() && tables.empty()) {
    errors.push_back(ErrorJson("", {.file = file, .message = "no [coordinator], [node] or [mount] table"}));
  }
  bool checked = true;
  for (const std::string& table : tables) {
    for (const DaemonTable& daemon : kDaemonTables) {
      if (table == daemon.table) checked = CheckTable(file, daemon, &errors) && checked;
    }
  }

  nlohmann::json doc = {{"file", file}, {"ok", errors.empty()}, {"tables", tables}, {"errors", errors}};
  if (errors.empty()) {
    std::string names;
    for (const std::string& t : tables) names += (names.empty() ? "[" : ", [") + t + "]";
    return ctx.Done(doc, file + ": ok (" + names + ")");
  }
  if (ctx.json()) {
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    for (const auto& e : errors) std::cerr << ErrorLine(file, e) << "\n";
  }
  std::cerr << "hoard: " << file << ": " << errors.size() << " error(s)" << std::endl;
  // 2, bad input, as for any command; 1 when a daemon could not check at all.
  return checked ? 2 : 1;
}

}  // namespace

void AddConfigCommands(CLI::App& app, Action* action) {
  auto* config = app.add_subcommand("config", "Daemon config files (docs/config.md)");
  config->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  auto* check = config->add_subcommand(
      "check", "Check every daemon table of a config file against the installed daemons' options; exit 0 and "
               "\"ok\" when valid, else list every error with its line and option");
  check->add_option("file", *file, "TOML config file")->required();
  check->callback([action, file] { *action = [file](Context& ctx) { return RunCheck(ctx, *file); }; });
}

}  // namespace hoard::cli
