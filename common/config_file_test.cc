#include "common/config_file.h"

#include <gtest/gtest.h>

#include "common/daemon_flags.h"
#include "common/testing.h"

namespace hoard {
namespace {

// A daemon's options of every kind a config key can set.
struct Settings {
  std::string listen = "tcp://127.0.0.1:7100";
  std::string data_dir;
  std::string capacity = "0";
  int threads = 16;
  uint32_t heartbeat_ms = 1000;
  double ratio = 0.5;
  bool allow_other = false;
  std::vector<std::string> markers;
  std::string mountpoint;
  std::string level = "R";
  int timeout_ms = 1000;
  std::string etcd;
};

class ConfigFileTest : public ::testing::Test {
 protected:
  // A fresh daemon command line, as main() declares it.
  void Declare() {
    s_ = Settings();
    app_ = std::make_unique<CLI::App>("test daemon");
    app_->add_option("mountpoint", s_.mountpoint, "Where to mount");
    app_->add_option("--listen", s_.listen, "Endpoint");
    app_->add_option("--data-dir", s_.data_dir, "State")->required();
    app_->add_option("--capacity", s_.capacity, "Size")->check(ByteSize());
    app_->add_option("--threads", s_.threads, "Threads")->check(CLI::Range(1, 1024));
    app_->add_option("--heartbeat-ms", s_.heartbeat_ms, "Interval");
    app_->add_option("--ratio", s_.ratio, "A fraction");
    app_->add_flag("--allow-other", s_.allow_other, "Others may read");
    app_->add_option("--markers", s_.markers, "Names")->delimiter(',');
    app_->add_option("--level", s_.level, "R or L")->check(CLI::IsMember({"R", "L"}));
    app_->add_option("--timeout-ms", s_.timeout_ms, "Timeout")->check(Positive());
    // As hoard-coordinator's "High availability" group.
    app_->add_option_group("Group")->add_option("--etcd", s_.etcd, "In a group");
  }

  // Parses `args` (after the program name) on a fresh command line.
  std::vector<ConfigError> Parse(const std::vector<std::string>& args) {
    Declare();
    std::vector<const char*> argv = {"hoard-test"};
    for (const auto& a : args) argv.push_back(a.c_str());
    DaemonFlags flags(*app_, "node");
    return flags.Parse(static_cast<int>(argv.size()), argv.data());
  }

  // Writes `toml` to a file and parses `args` with it as --config.
  std::vector<ConfigError> Run(const std::string& toml, std::vector<std::string> args = {}) {
    path_ = dir_.Sub("hoard.toml");
    EXPECT_TRUE(WriteFileAtomic(path_, toml).ok());
    args.insert(args.begin(), {"--config", path_});
    return Parse(args);
  }

  // The one error of a run, checked for its line and option.
  void ExpectOneError(const std::vector<ConfigError>& errors, int line, const std::string& option,
                      const std::string& message_part) {
    ASSERT_EQ(errors.size(), 1u) << (errors.empty() ? "no error" : errors.back().ToString());
    EXPECT_EQ(errors[0].file, path_);
    EXPECT_EQ(errors[0].line, line) << errors[0].ToString();
    EXPECT_EQ(errors[0].option, option) << errors[0].ToString();
    EXPECT_NE(errors[0].message.find(message_part), std::string::npos) << errors[0].ToString();
  }

  testing::TempDir dir_{"hoard-config"};
  std::string path_;
  std::unique_ptr<CLI::App> app_;
  Settings s_;
};

TEST_F(ConfigFileTest, AppliesEveryKindOfOption) {
  auto errors = Run(R"(# a host's file: the other daemons' tables are ignored
[coordinator]
listen = "tcp://0.0.0.0:9"
bogus = 1

[node]
mountpoint = "/mnt/hoard"
data-dir = "/var/lib/hoard"
capacity = "800G"
threads = 4
heartbeat-ms = 250
ratio = 2
allow-other = true
markers = ["a", "b"]
level = "L"
)");
  ASSERT_TRUE(errors.empty()) << errors[0].ToString();
  EXPECT_EQ(s_.mountpoint, "/mnt/hoard");
  EXPECT_EQ(s_.listen, "tcp://127.0.0.1:7100");  // from [coordinator]: not ours
  EXPECT_EQ(s_.data_dir, "/var/lib/hoard");
  EXPECT_EQ(s_.capacity, "800G");
  EXPECT_EQ(s_.threads, 4);
  EXPECT_EQ(s_.heartbeat_ms, 250u);
  EXPECT_EQ(s_.ratio, 2.0);
  EXPECT_TRUE(s_.allow_other);
  EXPECT_EQ(s_.markers, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s_.level, "L");
}

TEST_F(ConfigFileTest, AnOptionOfAnOptionGroupIsTheDaemonsToo) {
  auto errors = Run("[node]\ndata-dir = \"/d\"\netcd = \"http://e1:2379,http://e2:2379\"\n");
  ASSERT_TRUE(errors.empty()) << errors[0].ToString();
  EXPECT_EQ(s_.etcd, "http://e1:2379,http://e2:2379");
}

TEST_F(ConfigFileTest, ListAsOneDelimitedString) {
  ASSERT_TRUE(Run("[node]\ndata-dir = \"/d\"\nmarkers = \"x,y\"\n").empty());
  EXPECT_EQ(s_.markers, (std::vector<std::string>{"x", "y"}));
}

TEST_F(ConfigFileTest, FlagsOnTheCommandLineWin) {
  auto errors = Run("[node]\ndata-dir = \"/file\"\nthreads = 4\nallow-other = true\n",
                    {"--threads", "8", "--data-dir=/flag"});
  ASSERT_TRUE(errors.empty()) << errors[0].ToString();
  EXPECT_EQ(s_.threads, 8);
  EXPECT_EQ(s_.data_dir, "/flag");
  EXPECT_TRUE(s_.allow_other);  // not on the command line: from the file
}

TEST_F(ConfigFileTest, UnknownKeyNamesItsLine) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\n\nstorage = \"/x\"\n"), 4, "storage", "unknown option");
}

TEST_F(ConfigFileTest, UnderscoreKeySuggestsTheOption) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nHeartbeat_MS = 5\n"), 3, "Heartbeat_MS",
                 "did you mean `heartbeat-ms`?");
}

TEST_F(ConfigFileTest, WrongTypeNamesItsLine) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nthreads = \"many\"\n"), 3, "threads",
                 "expects an integer, got a string");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nallow-other = \"yes\"\n"), 3, "allow-other",
                 "expects true or false");
  ExpectOneError(Run("[node]\ndata-dir = true\n"), 2, "data-dir", "expects a string, got a boolean");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nthreads = 1.5\n"), 3, "threads", "expects an integer, got a float");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nmarkers = [[\"a\"]]\n"), 3, "markers", "got an array");
}

TEST_F(ConfigFileTest, TableValueIsWrongType) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\n[node.listen]\nx = 1\n"), 3, "listen", "got a table");
}

TEST_F(ConfigFileTest, ValidatorRejectionNamesItsLine) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\ncapacity = \"lots\"\n"), 3, "capacity", "not a byte count");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nthreads = 2000\n"), 3, "threads", "not in range");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nlevel = \"X\"\n"), 3, "level", "X not in {R,L}");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\ntimeout-ms = 0\n"), 3, "timeout-ms", "must be positive, got 0");
  ASSERT_TRUE(Run("[node]\ndata-dir = \"/d\"\ntimeout-ms = 7\n").empty());
  EXPECT_EQ(s_.timeout_ms, 7);
}

TEST_F(ConfigFileTest, ConversionFailureNamesItsLine) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nheartbeat-ms = -5\n"), 3, "heartbeat-ms", "cannot convert `-5`");
}

TEST_F(ConfigFileTest, SyntaxErrorNamesItsLine) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\ncapacity = 800G\n"), 3, "", "TOML syntax error");
}

TEST_F(ConfigFileTest, MissingTableIsAnError) {
  ExpectOneError(Run("[coordinator]\nlisten = \"tcp://x:1\"\n"), 0, "", "no [node] table");
}

TEST_F(ConfigFileTest, KeyOutsideEveryTableIsAnError) {
  ExpectOneError(Run("threads = 4\n[node]\ndata-dir = \"/d\"\n"), 1, "threads", "outside every table");
}

TEST_F(ConfigFileTest, MissingFileIsAnError) {
  auto errors = Parse({"--config", "/nonexistent/hoard.toml", "--data-dir", "/d"});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].file, "/nonexistent/hoard.toml");
  EXPECT_EQ(errors[0].line, 0);
}

TEST_F(ConfigFileTest, RequiredOptionFromNeitherPlace) {
  ExpectOneError(Run("[node]\nthreads = 4\n"), 0, "data-dir", "required");
  auto errors = Parse({});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ToString(), "data-dir: required: give --data-dir, or `data-dir` in the [node] table of a "
                                  "--config file");
}

TEST_F(ConfigFileTest, ConfigCannotNameReservedOptions) {
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nconfig = \"/other.toml\"\n"), 3, "config", "not allowed");
  ExpectOneError(Run("[node]\ndata-dir = \"/d\"\nhelp = true\n"), 3, "help", "not allowed");
}

TEST_F(ConfigFileTest, ReportsEveryErrorInFileOrder) {
  auto errors = Run("[node]\nzzz = 1\ndata-dir = \"/d\"\nthreads = 0\naaa = 2\ncapacity = \"lots\"\n");
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_EQ(errors[1].line, 4);
  EXPECT_EQ(errors[2].line, 5);
  EXPECT_EQ(errors[3].line, 6);
  EXPECT_EQ(errors[3].ToString(), path_ + ":6: capacity: not a byte count: 'lots' (e.g. 800G, 512M, 0)");
}

TEST_F(ConfigFileTest, ListDaemonTablesInFileOrder) {
  path_ = dir_.Sub("host.toml");
  ASSERT_TRUE(WriteFileAtomic(path_, "[mount]\nx = 1\n[ansible]\ny = 2\n[coordinator]\n[node]\n").ok());
  std::vector<std::string> tables;
  EXPECT_TRUE(ListDaemonTables(path_, &tables).empty());
  EXPECT_EQ(tables, (std::vector<std::string>{"mount", "coordinator", "node"}));
}

TEST_F(ConfigFileTest, DaemonTableThatIsNotATable) {
  path_ = dir_.Sub("host.toml");
  ASSERT_TRUE(WriteFileAtomic(path_, "\nnode = \"n1\"\n").ok());
  std::vector<std::string> tables;
  auto errors = ListDaemonTables(path_, &tables);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_EQ(errors[0].option, "node");
  EXPECT_TRUE(tables.empty());
}

}  // namespace
}  // namespace hoard
