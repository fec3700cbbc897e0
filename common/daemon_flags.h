// File: common/daemon_flags.h
//
// A daemon's command line: its CLI11 options, plus `--config FILE` (the
// daemon's table of a TOML file, common/config_file.h), `--check-config`
// (parse both, report, exit: what `hoard config check` runs) and `--version`. main() declares
// its options on a CLI::App and calls ParseDaemonFlags where it would call
// CLI11_PARSE.
//
// A required option may come from either place, so CLI11 parses the command
// line with every option optional and DaemonFlags checks the required ones
// after the file. CLI11's needs/excludes between options see the command line
// only (no daemon declares any).
//
// Thread-safety: main()-time code, single-threaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config_file.h"
#include "common/daemon.h"

namespace hoard {

class DaemonFlags {
 public:
  // Adds --config and --check-config to `app`; `table` is the daemon's table
  // in the file ("coordinator", "node", "mount").
  DaemonFlags(CLI::App& app, std::string table);

  // Parses argv, throwing CLI::ParseError as CLI::App::parse does (help, a bad
  // flag), then applies the file, then checks the required options. Returns
  // the errors of the last two steps; none means every option is set.
  std::vector<ConfigError> Parse(int argc, const char* const* argv);

  bool check_only() const { return check_only_; }
  const std::string& config_path() const { return config_path_; }

 private:
  CLI::App& app_;
  std::string table_;
  std::string config_path_;
  bool check_only_ = false;
};

// What main() calls in place of CLI11_PARSE: returns the exit status when
// main() should return now (--help, --version, an error, --check-config) and
// nullopt to start the daemon. --version prints one line on stdout, "NAME
// VERSION (commit SHA[, dirty])" (common/build_info.h), and exits 0. Errors go to stderr, one per line. --check-config prints
// {"table", "file", "ok", "errors": [{"line", "option", "message"}]} on stdout
// and exits 0 when ok, 2 otherwise.
std::optional<int> ParseDaemonFlags(CLI::App& app, const std::string& table, int argc, char** argv);

// Options bound straight to a field of a daemon's Options struct, so that the
// field's initializer is the one default, shown by --help and kept when the
// flag is absent. For plain numbers and strings bind with app.add_option(name,
// options.field) and ->capture_default_str().
//
// A byte count written "800G", "512MiB" or "0" (common/units.h).
CLI::Option* AddBytesOption(CLI::App& app, const std::string& name, uint64_t* bytes, const std::string& help);
// A duration written "7d", "12h", "30m", "45" (seconds) or "0", kept in whole
// seconds.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, std::chrono::seconds* duration,
                               const std::string& help);
// A duration written as an integer count of `Unit`, which the flag's name
// says ("--heartbeat-ms 1000", "--ckpt-lost-after-s 120"), into a field of any
// std::chrono duration type.
template <class Unit, class Field>
CLI::Option* AddCountOption(CLI::App& app, const std::string& name, Field* field, const std::string& help) {
  return app
      .add_option_function<int64_t>(
          name, [field](int64_t n) { *field = std::chrono::duration_cast<Field>(Unit(n)); }, help)
      ->check(CLI::NonNegativeNumber)
      ->default_str(std::to_string(std::chrono::duration_cast<Unit>(*field).count()));
}

// --log-level, --log-file, --log-max-size and --log-files, into `o`: every
// daemon's logging (docs/config.md, "Every daemon").
void AddLogFlags(CLI::App& app, LogOptions* o);

// A CLI11 validator for byte counts: "800G", "512MiB", "0" (common/units.h).
CLI::Validator ByteSize();
// A CLI11 validator for durations: "7d", "12h", "30m", "0" (common/units.h).
CLI::Validator Duration();
// A CLI11 validator for numbers > 0. CLI::PositiveNumber says the same with
// the limits of a double spelled out in 300 digits.
CLI::Validator Positive();

}  // namespace hoard
