#include "common/config_file.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include <toml++/toml.h>

#include "common/file_util.h"

namespace hoard {
namespace {

int LineOf(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

bool IsDaemonTable(std::string_view name) {
  return std::any_of(std::begin(kDaemonTables), std::end(kDaemonTables),
                     [&](const DaemonTable& d) { return name == d.table; });
}

// Parses the file; on failure returns the error (toml++ reports a syntax
// error by exception, caught here: hoard code does not throw).
std::optional<ConfigError> Parse(const std::string& path, toml::table* root) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return ConfigError{.file = path, .message = text.status().message()};
  try {
    *root = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    return ConfigError{.file = path, .line = static_cast<int>(e.source().begin.line),
                       .message = "TOML syntax error: " + std::string(e.description())};
  }
  return std::nullopt;
}

// How an option's value must be written: the TOML types it accepts.
enum class Kind { kFlag, kBool, kInteger, kNumber, kText, kList };

Kind KindOf(const CLI::Option& opt) {
  if (opt.get_expected_max() == 0) return Kind::kFlag;
  if (opt.get_items_expected_max() > 1) return Kind::kList;
  // The type name carries the validators after a ':' ("INT:INT in [1 - 1024]").
  const std::string type = opt.get_type_name().substr(0, opt.get_type_name().find(':'));
  if (type == "INT" || type == "UINT") return Kind::kInteger;
  if (type == "FLOAT") return Kind::kNumber;
  if (type == "BOOLEAN") return Kind::kBool;
  return Kind::kText;
}

const char* Expected(Kind kind) {
  switch (kind) {
    case Kind::kFlag:
    case Kind::kBool: return "true or false";
    case Kind::kInteger: return "an integer";
    case Kind::kNumber: return "a number";
    case Kind::kText: return "a string";
    case Kind::kList: return "a string or an array of strings";
  }
  return "?";
}

const char* TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

// A scalar as it would be written on the command line; nullopt for an
// array, a table or a date.
std::optional<std::string> ScalarText(const toml::node& n) {
  if (auto s = n.as_string()) return s->get();
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto b = n.as_boolean()) return std::string(b->get() ? "true" : "false");
  if (auto f = n.as_floating_point()) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, f->get());
    return std::string(buf, r.ptr);
  }
  return std::nullopt;
}

bool Accepts(Kind kind, const toml::node& n) {
  switch (kind) {
    case Kind::kFlag:
    case Kind::kBool: return n.is_boolean();
    case Kind::kInteger: return n.is_integer();
    case Kind::kNumber: return n.is_integer() || n.is_floating_point();
    // A number is fine where text is expected: `capacity = 0`.
    case Kind::kText: return n.is_string() || n.is_integer() || n.is_floating_point();
    case Kind::kList:
      if (n.is_string()) return true;
      if (auto a = n.as_array()) {
        return std::all_of(a->begin(), a->end(), [](const toml::node& e) { return e.is_string() || e.is_integer(); });
      }
      return false;
  }
  return false;
}

// The options a file may not set: it cannot name another file, ask for help
// or the version, or turn a start into a check.
bool Reserved(CLI::App& app, const CLI::Option* opt) {
  return opt == app.get_help_ptr() || opt == app.get_help_all_ptr() || opt == app.get_version_ptr() ||
         opt->check_lname("config") || opt->check_lname("check-config");
}

CLI::Option* FindOption(CLI::App& app, const std::string& key) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& lnames = opt->get_lnames();
    if (std::find(lnames.begin(), lnames.end(), key) != lnames.end()) return opt;
    if (opt->get_positional() && opt->get_name(true) == key) return opt;
  }
  // An option group (add_option_group, e.g. hoard-coordinator's "High
  // availability") is a nameless subcommand holding its own options: they
  // are the daemon's options all the same.
  for (CLI::App* group : app.get_subcommands([](CLI::App* sub) { return sub->get_name().empty(); })) {
    if (CLI::Option* opt = FindOption(*group, key); opt != nullptr) return opt;
  }
  return nullptr;
}

// "unknown option", with the likely intended key when the key was written
// with underscores or in capitals.
std::string Unknown(CLI::App& app, const std::string& key) {
  std::string guess = key;
  std::replace(guess.begin(), guess.end(), '_', '-');
  std::transform(guess.begin(), guess.end(), guess.begin(), [](unsigned char c) { return std::tolower(c); });
  if (guess != key && FindOption(app, guess) != nullptr) return "unknown option; did you mean `" + guess + "`?";
  return "unknown option";
}

// CLI11 prefixes its messages with the option's name ("--threads: ..."); the
// error names the option already.
std::string StripName(const std::string& what, const CLI::Option& opt) {
  const std::string prefix = opt.get_name() + ": ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

// Applies one key. Returns the error message, empty when applied.
std::string ApplyKey(CLI::App& app, const std::string& key, const toml::node& value) {
  CLI::Option* opt = FindOption(app, key);
  if (opt == nullptr) return Unknown(app, key);
  if (Reserved(app, opt)) return "not allowed in a config file";
  const Kind kind = KindOf(*opt);
  if (!Accepts(kind, value)) return std::string("expects ") + Expected(kind) + ", got " + TypeName(value);
  // The command line wins: the option keeps what it was given there.
  if (opt->count() > 0) return "";
  std::vector<std::string> values;
  if (auto a = value.as_array()) {
    for (const toml::node& e : *a) values.push_back(*ScalarText(e));
  } else {
    values.push_back(*ScalarText(value));
  }
  try {
    // As CLI11 does for a command-line value: add, then validate and convert
    // into the bound variable.
    opt->add_result(values);
    opt->run_callback();
  } catch (const CLI::ValidationError& e) {
    return StripName(e.what(), *opt);
  } catch (const CLI::ConversionError&) {
    const std::string what = value.is_array() ? "these values" : "`" + values[0] + "`";
    return "cannot convert " + what + " to " + Expected(kind);
  } catch (const CLI::Error& e) {
    return StripName(e.what(), *opt);
  }
  return "";
}

// The daemon tables of `root`, and what no daemon would accept (see
// ListDaemonTables).
std::vector<ConfigError> CheckRoot(const std::string& path, const toml::table& root, std::vector<std::string>* tables) {
  tables->clear();
  std::vector<ConfigError> errors;
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (value.is_table()) {
      if (IsDaemonTable(name)) tables->push_back(name);
      continue;
    }
    if (IsDaemonTable(name)) {
      errors.push_back({path, LineOf(value), name, "must be a table ([" + name + "]), got " + TypeName(value)});
    } else if (!value.is_array_of_tables()) {
      errors.push_back({path, LineOf(value), name,
                        "outside every table: a key belongs to [coordinator], [node] or [mount]"});
    }
  }
  // toml++ iterates in key order; the file's order reads better.
  std::stable_sort(tables->begin(), tables->end(), [&](const std::string& a, const std::string& b) {
    return LineOf(*root.get(a)) < LineOf(*root.get(b));
  });
  return errors;
}

}  // namespace

std::string ConfigError::ToString() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line);
  if (!option.empty()) s += (s.empty() ? "" : ": ") + option;
  return s + (s.empty() ? "" : ": ") + message;
}

std::vector<ConfigError> ListDaemonTables(const std::string& path, std::vector<std::string>* tables) {
  tables->clear();
  toml::table root;
  if (auto e = Parse(path, &root)) return {*e};
  return CheckRoot(path, root, tables);
}

std::vector<ConfigError> ApplyConfigFile(CLI::App& app, const std::string& path, const std::string& table,
                                         bool* read) {
  if (read != nullptr) *read = false;
  toml::table root;
  if (auto e = Parse(path, &root)) return {*e};
  std::vector<std::string> tables;
  std::vector<ConfigError> errors = CheckRoot(path, root, &tables);
  if (!errors.empty()) return errors;
  if (std::find(tables.begin(), tables.end(), table) == tables.end()) {
    return {{.file = path, .message = "no [" + table + "] table"}};
  }
  if (read != nullptr) *read = true;
  const toml::table& settings = *root[table].as_table();
  std::vector<std::pair<std::string, const toml::node*>> keys;
  for (const auto& [key, value] : settings) keys.emplace_back(std::string(key.str()), &value);
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return LineOf(*a.second) < LineOf(*b.second); });
  for (const auto& [key, value] : keys) {
    std::string why = ApplyKey(app, key, *value);
    if (!why.empty()) errors.push_back({path, LineOf(*value), key, std::move(why)});
  }
  return errors;
}

}  // namespace hoard
