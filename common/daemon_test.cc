#include "common/daemon.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"

namespace hoard {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A log file never grows past its size: it rotates into node.1.log ..
// node.N.log, the oldest dropped, and the newest line is in node.log.
TEST(MakeLoggerTest, FileRotatesBySizeAndKeepsN) {
  testing::TempDir dir("hoard-daemon-test");
  const std::string file = dir.Sub("logs/node.log");  // the directory is made
  Result<std::shared_ptr<spdlog::logger>> log =
      MakeLogger("rotate-test", {.level = "info", .file = file, .max_bytes = 2000, .keep = 2});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  for (int i = 0; i < 500; ++i) (*log)->info("line {} of a log that would grow without bound", i);
  (*log)->debug("below the level: not written");
  (*log)->flush();
  spdlog::drop("rotate-test");
  for (const char* name : {"logs/node.log", "logs/node.1.log", "logs/node.2.log"}) {
    Result<std::string> text = ReadFile(dir.Sub(name));
    ASSERT_TRUE(text.ok()) << name;
    EXPECT_LE(text->size(), 2000u) << name;
    EXPECT_GT(text->size(), 0u) << name;
  }
  EXPECT_FALSE(Exists(dir.Sub("logs/node.3.log")));
  Result<std::string> current = ReadFile(file);
  ASSERT_TRUE(current.ok());
  EXPECT_NE(current->find("line 499 of"), std::string::npos);
  EXPECT_EQ(current->find("below the level"), std::string::npos);
}

TEST(MakeLoggerTest, BadLevelOrFileIsAnError) {
  Result<std::shared_ptr<spdlog::logger>> log = MakeLogger("bad-level", {.level = "verbose"});
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), Code::kInvalidArgument);
  EXPECT_NE(log.status().message().find("verbose"), std::string::npos);

  testing::TempDir dir("hoard-daemon-test");
  ASSERT_TRUE(WriteFileAtomic(dir.Sub("file"), "x").ok());
  log = MakeLogger("bad-file", {.file = dir.Sub("file/under-a-file.log")});
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("cannot log to"), std::string::npos) << log.status().ToString();
}

}  // namespace
}  // namespace hoard
