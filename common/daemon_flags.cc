#include "common/daemon_flags.h"

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/build_info.h"
#include "common/units.h"

namespace hoard {
namespace {

// The option's key in a config file: its long name, or a positional's name.
std::string KeyOf(const CLI::Option& opt) {
  return opt.get_lnames().empty() ? opt.get_name(true) : opt.get_lnames().front();
}

bool Names(const std::vector<ConfigError>& errors, const std::string& key) {
  for (const ConfigError& e : errors) {
    if (e.option == key) return true;
  }
  return false;
}

}  // namespace

DaemonFlags::DaemonFlags(CLI::App& app, std::string table) : app_(app), table_(std::move(table)) {
  app_.add_option("--config", config_path_,
                  "TOML file whose [" + table_ + "] table sets any option below by its long name "
                  "(docs/config.md); flags given here win");
  app_.add_flag("--check-config", check_only_,
                "Parse the flags and the --config file, print the result as JSON and exit (0 when valid)");
}

std::vector<ConfigError> DaemonFlags::Parse(int argc, const char* const* argv) {
  std::vector<CLI::Option*> required = app_.get_options([](CLI::Option* opt) { return opt->get_required(); });
  for (CLI::Option* opt : required) opt->required(false);
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    // --help lists them as REQUIRED again.
    for (CLI::Option* opt : required) opt->required(true);
    throw;
  }
  for (CLI::Option* opt : required) opt->required(true);

  std::vector<ConfigError> errors;
  bool read = true;
  if (!config_path_.empty()) errors = ApplyConfigFile(app_, config_path_, table_, &read);
  // What a file that could not be read would have set is unknown.
  if (!read) return errors;
  for (CLI::Option* opt : required) {
    const std::string key = KeyOf(*opt);
    // An option whose key was in the file but wrong has its error already.
    if (opt->count() > 0 || Names(errors, key)) continue;
    const std::string flag = opt->get_positional() ? key : "--" + key;
    if (config_path_.empty()) {
      errors.push_back({.option = key,
                        .message = "required: give " + flag + ", or `" + key + "` in the [" + table_ +
                                   "] table of a --config file"});
    } else {
      errors.push_back({.file = config_path_,
                        .option = key,
                        .message = "required: set `" + key + "` in [" + table_ + "] or give " + flag});
    }
  }
  return errors;
}

std::optional<int> ParseDaemonFlags(CLI::App& app, const std::string& table, int argc, char** argv) {
  // --version prints the build (common/build_info.h) and exits 0, whatever
  // else is given: CLI11 throws CallForVersion before it checks anything.
  app.set_version_flag("--version", VersionLine(ProgramName(argv[0])),
                       "Print the program's name, version and commit, and exit");
  DaemonFlags flags(app, table);
  std::vector<ConfigError> errors;
  try {
    errors = flags.Parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (flags.check_only()) {
    nlohmann::json j = {{"table", table}, {"file", flags.config_path()}, {"ok", errors.empty()}};
    j["errors"] = nlohmann::json::array();
    for (const ConfigError& e : errors) {
      j["errors"].push_back({{"line", e.line}, {"option", e.option}, {"message", e.message}});
    }
    std::printf("%s\n", j.dump().c_str());
    return errors.empty() ? 0 : 2;
  }
  if (errors.empty()) return std::nullopt;
  std::string program = argv[0];
  program = program.substr(program.rfind('/') + 1);
  for (const ConfigError& e : errors) std::fprintf(stderr, "%s: %s\n", program.c_str(), e.ToString().c_str());
  return 2;
}

CLI::Validator ByteSize() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Result<uint64_t> bytes = ParseBytes(text);
        return bytes.ok() ? "" : bytes.status().message() + " (e.g. 800G, 512M, 0)";
      },
      "BYTES");
}

CLI::Validator Duration() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Result<uint64_t> secs = ParseDurationSeconds(text);
        return secs.ok() ? "" : secs.status().message();
      },
      "DURATION");
}

CLI::Validator Positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') return "not a number: '" + text + "'";
        return value > 0 ? "" : "must be positive, got " + text;
      },
      "POSITIVE");
}

namespace {
// How a default is shown: in the largest unit that divides it, so --help
// prints what a user would type ("64M", "7d").
std::string BytesText(uint64_t bytes) {
  static constexpr std::pair<int, const char*> kUnits[] = {{40, "T"}, {30, "G"}, {20, "M"}, {10, "k"}};
  for (const auto& [shift, suffix] : kUnits) {
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + suffix;
  }
  return std::to_string(bytes);
}

std::string SecondsText(uint64_t s) {
  static constexpr std::pair<uint64_t, const char*> kUnits[] = {{7 * 86400, "w"}, {86400, "d"}, {3600, "h"}, {60, "m"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (s != 0 && s % unit == 0) return std::to_string(s / unit) + suffix;
  }
  return std::to_string(s);
}
}  // namespace

CLI::Option* AddBytesOption(CLI::App& app, const std::string& name, uint64_t* bytes, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name, [bytes](const std::string& text) { *bytes = *ParseBytes(text); }, help)
      ->check(ByteSize())
      ->default_str(BytesText(*bytes));
}

void AddLogFlags(CLI::App& app, LogOptions* o) {
  app.add_option("--log-level", o->level, "debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-file", o->file,
                 "Log to this file instead of stderr, rotated by size (without systemd: its journal rotates stderr)");
  AddBytesOption(app, "--log-max-size", &o->max_bytes, "With --log-file: a file rotates at this size, e.g. 64M")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            Result<uint64_t> n = ParseBytes(text);
            return n.ok() && *n == 0 ? "must be more than 0" : "";
          },
          ""));
  app.add_option("--log-files", o->keep,
                 "With --log-file: rotated files kept (FILE.1 .. FILE.N before its extension), the oldest dropped")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
}

CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, std::chrono::seconds* duration,
                               const std::string& help) {
  return app
      .add_option_function<std::string>(
          name, [duration](const std::string& text) { *duration = std::chrono::seconds(*ParseDurationSeconds(text)); },
          help)
      ->check(Duration())
      ->default_str(SecondsText(static_cast<uint64_t>(duration->count())));
}

}  // namespace hoard
