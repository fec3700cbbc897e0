#include "common/build_info.h"

#include <regex>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "common/daemon_flags.h"
#include "common/metrics.h"
#include "common/metrics_server.h"

namespace hoard {
namespace {

TEST(BuildInfoTest, VersionLineNamesProgramVersionAndCommit) {
  EXPECT_EQ(VersionLine("hoard-node", {.version = "0.1.0", .commit = "1a2b3c4d5e6f"}),
            "hoard-node 0.1.0 (commit 1a2b3c4d5e6f)");
  EXPECT_EQ(VersionLine("hoard", {.version = "0.2.0", .commit = "1a2b3c4d5e6f", .dirty = true}),
            "hoard 0.2.0 (commit 1a2b3c4d5e6f, dirty)");
  // Built from a source tarball: no git, no commit.
  EXPECT_EQ(VersionLine("hoard-fuse", {.version = "0.1.0", .commit = "unknown"}), "hoard-fuse 0.1.0 (commit unknown)");
}

TEST(BuildInfoTest, CommitLabelMarksADirtyTree) {
  EXPECT_EQ((BuildInfo{.version = "0.1.0", .commit = "1a2b3c4d5e6f"}.CommitLabel()), "1a2b3c4d5e6f");
  EXPECT_EQ((BuildInfo{.version = "0.1.0", .commit = "1a2b3c4d5e6f", .dirty = true}.CommitLabel()),
            "1a2b3c4d5e6f-dirty");
}

TEST(BuildInfoTest, ThisBuildComesFromTheGeneratedFile) {
  const BuildInfo& b = ThisBuild();
  EXPECT_TRUE(std::regex_match(std::string(b.version), std::regex(R"(\d+\.\d+\.\d+)"))) << b.version;
  EXPECT_TRUE(std::regex_match(std::string(b.commit), std::regex("[0-9a-f]{12}|unknown"))) << b.commit;
  if (b.commit == "unknown") {
    EXPECT_FALSE(b.dirty);
  }
}

TEST(BuildInfoTest, ProgramNameIsArgv0sLastComponent) {
  EXPECT_EQ(ProgramName("/usr/local/bin/hoard-node"), "hoard-node");
  EXPECT_EQ(ProgramName("hoard"), "hoard");
  EXPECT_EQ(ProgramName(nullptr), "");
}

// Every daemon's --version: one line on stdout, exit 0, before a missing
// required option could stop it.
TEST(BuildInfoTest, DaemonVersionFlagPrintsTheLineAndExitsZero) {
  CLI::App app{"test daemon"};
  std::string store;
  app.add_option("--store", store, "required")->required();
  const char* argv[] = {"/opt/bin/hoard-node", "--version"};
  ::testing::internal::CaptureStdout();
  std::optional<int> exit_code = ParseDaemonFlags(app, "node", 2, const_cast<char**>(argv));
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(exit_code.has_value());
  EXPECT_EQ(*exit_code, 0);
  EXPECT_EQ(out, VersionLine("hoard-node") + "\n");
}

TEST(BuildInfoTest, GaugeNamesVersionAndCommit) {
  metrics::Registry registry;
  metrics::AddBuildInfo(&registry);
  const BuildInfo& b = ThisBuild();
  const std::string sample = "hoard_build_info{version=\"" + std::string(b.version) + "\",commit=\"" +
                             b.CommitLabel() + "\"} 1\n";
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE hoard_build_info gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find(sample), std::string::npos) << text;
}

}  // namespace
}  // namespace hoard
