// File: common/config_file.h
//
// A daemon's settings from a TOML file (docs/config.md). One file serves every
// daemon of a host: each reads the table named after it ([coordinator],
// [node], [mount]) and ignores the other tables. A key is the name of one of
// the daemon's CLI11 options: its long name without "--" (`capacity = "800G"`,
// `allow-other = true`) or a positional's name (`mountpoint`). The option list
// is the daemon's own CLI::App, so an option added to a daemon is a key with
// nothing else to change.
//
// A value goes through the same CLI11 conversion and validators as on the
// command line, and an option already given on the command line keeps that
// value: flags win over the file.
//
// Errors are collected, not thrown, so that `hoard config check` shows them
// all at once; each names the file, the line and the option.
//
// Thread-safety: main()-time code; one call at a time per CLI::App.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace hoard {

// The daemon tables and the binary that reads each.
struct DaemonTable {
  const char* table;
  const char* binary;
};
inline constexpr DaemonTable kDaemonTables[] = {
    {"coordinator", "hoard-coordinator"}, {"node", "hoard-node"}, {"mount", "hoard-fuse"}};

struct ConfigError {
  std::string file;
  int line = 0;        // 1-based; 0 when the error is about the file as a whole
  std::string option;  // the key; empty for a syntax error or a missing table
  std::string message;

  // "FILE:LINE: OPTION: MESSAGE", leaving out what is empty or 0.
  std::string ToString() const;
};

// The daemon tables present in the TOML file at `path`, in file order. Also
// reports what no daemon would accept: an unreadable file, a TOML syntax
// error, a key outside every table (it would apply to no daemon), a daemon
// table that is not a table.
std::vector<ConfigError> ListDaemonTables(const std::string& path, std::vector<std::string>* tables);

// Applies table `table` of the TOML file at `path` to `app`, which has parsed
// its command line already: each key not given on the command line is added
// to its option as if given there, and converted and validated. Returns every
// error (none: every key was applied). A file without the table is an error:
// it was given to this daemon, so a table is expected. *read (if given) says
// whether the table was read at all (false: the file is unreadable, has a
// syntax error or no such table, and no key was applied).
std::vector<ConfigError> ApplyConfigFile(CLI::App& app, const std::string& path, const std::string& table,
                                         bool* read = nullptr);

}  // namespace hoard
