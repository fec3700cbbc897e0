#include "common/file_journal.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"

namespace hoard {
namespace {

// The owner's snapshot bytes in these tests: "snap:<seq>:<state>".
std::string Snap(uint64_t seq, const std::string& state = "") { return "snap:" + std::to_string(seq) + ":" + state; }

Result<uint64_t> SeqOf(std::string_view bytes) {
  if (bytes.substr(0, 5) != "snap:") return Status::Corruption("not a test snapshot");
  return std::stoull(std::string(bytes.substr(5)));
}

class FileJournalTest : public ::testing::Test {
 protected:
  // A new journal on the directory's files, opened (the previous one closed
  // first).
  Result<Journal::Loaded> Reopen() {
    journal_ = std::make_unique<FileJournal>(LogPath(), SnapshotPath());
    return journal_->Open(SeqOf);
  }
  void AppendAll(std::initializer_list<const char*> records) {
    for (const char* r : records) ASSERT_TRUE(journal_->Append(r).ok()) << r;
  }

  std::string LogPath() const { return tmp_.Sub("d/journal.log"); }
  std::string SnapshotPath() const { return tmp_.Sub("d/snapshot.msgpack"); }
  uint64_t LogSize() const { return std::filesystem::file_size(LogPath()); }
  static bool Mentions(const std::vector<std::string>& lines, const std::string& word) {
    return std::any_of(lines.begin(), lines.end(), [&](const auto& l) { return l.find(word) != std::string::npos; });
  }

  testing::TempDir tmp_{"hoard-file-journal"};
  std::unique_ptr<FileJournal> journal_;
};

using Records = std::vector<std::string>;

TEST_F(FileJournalTest, OpenOnNothingCreatesAnEmptyLog) {
  bool asked = false;
  journal_ = std::make_unique<FileJournal>(LogPath(), SnapshotPath());
  auto loaded = journal_->Open([&](std::string_view b) {
    asked = true;
    return SeqOf(b);
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_FALSE(asked) << "no snapshot, nothing to read a seq from";
  EXPECT_TRUE(loaded->snapshot.empty());
  EXPECT_EQ(loaded->snapshot_seq, 0u);
  EXPECT_TRUE(loaded->records.empty());
  EXPECT_TRUE(loaded->repaired.empty());
  EXPECT_EQ(journal_->seq(), 0u);
  EXPECT_EQ(LogSize(), StateLog::kHeaderBytes) << "the directory is created, and the log in it";
  EXPECT_FALSE(std::filesystem::exists(SnapshotPath()));
}

TEST_F(FileJournalTest, AppendedRecordsComeBackInOrder) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a", "bb", "ccc"});
  EXPECT_EQ(journal_->seq(), 3u);
  EXPECT_EQ(journal_->records_since_snapshot(), 3u);
  EXPECT_EQ(journal_->bytes_since_snapshot(), LogSize());
  auto loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->records, (Records{"a", "bb", "ccc"}));
  EXPECT_TRUE(loaded->repaired.empty());
  EXPECT_EQ(journal_->seq(), 3u);
  AppendAll({"d"});
  EXPECT_EQ(Reopen()->records, (Records{"a", "bb", "ccc", "d"}));
}

TEST_F(FileJournalTest, ASnapshotStandsForTheRecordsBeforeIt) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a", "b"});
  ASSERT_TRUE(journal_->WriteSnapshot(Snap(2, "ab")).ok());
  EXPECT_EQ(journal_->seq(), 2u);
  EXPECT_EQ(journal_->records_since_snapshot(), 0u);
  EXPECT_EQ(journal_->TEST_log().base_seq(), 2u) << "the log starts again at the snapshot";
  AppendAll({"c"});
  auto loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->snapshot, Snap(2, "ab"));
  EXPECT_EQ(loaded->snapshot_seq, 2u);
  EXPECT_EQ(loaded->records, (Records{"c"}));
  EXPECT_EQ(journal_->seq(), 3u);
  EXPECT_EQ(journal_->records_since_snapshot(), 1u);
}

// A crash after the snapshot's rename, before the log's replacement, leaves
// the old log: records the snapshot covers are skipped, and a log it covers
// whole is replaced at open.
TEST_F(FileJournalTest, RecordsTheSnapshotCoversAreSkipped) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a", "b", "c"});
  ASSERT_TRUE(WriteFileAtomic(SnapshotPath(), Snap(3, "abc")).ok());  // and the crash
  auto loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->records.empty());
  EXPECT_TRUE(Mentions(loaded->repaired, "interrupted snapshot")) << ::testing::PrintToString(loaded->repaired);
  EXPECT_EQ(journal_->TEST_log().base_seq(), 3u);
  EXPECT_EQ(LogSize(), StateLog::kHeaderBytes);
  AppendAll({"d"});
  EXPECT_EQ(journal_->seq(), 4u);
  loaded = Reopen();
  EXPECT_EQ(loaded->records, (Records{"d"}));
  EXPECT_TRUE(loaded->repaired.empty());

  // The log's replacement failed and appending went on in the old log: it
  // is kept, and only what the snapshot does not cover comes back.
  AppendAll({"e", "f"});
  ASSERT_TRUE(WriteFileAtomic(SnapshotPath(), Snap(5, "abcde")).ok());
  loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->records, (Records{"f"}));
  EXPECT_TRUE(loaded->repaired.empty());
  EXPECT_EQ(journal_->seq(), 6u);
}

TEST_F(FileJournalTest, ATornTailIsCutAndReported) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a", "b"});
  const uint64_t good = LogSize();
  journal_.reset();
  ASSERT_TRUE(WriteFileAtomic(LogPath(), ReadFile(LogPath()).value() + std::string("\x10\x00\x00\x00\x01\x02", 6)).ok());
  auto loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->records, (Records{"a", "b"}));
  EXPECT_TRUE(Mentions(loaded->repaired, "torn")) << ::testing::PrintToString(loaded->repaired);
  EXPECT_EQ(LogSize(), good);
  AppendAll({"c"});
  EXPECT_EQ(Reopen()->records, (Records{"a", "b", "c"}));
}

TEST_F(FileJournalTest, ALogThatStartsAfterTheSnapshotIsCorruption) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a"});
  ASSERT_TRUE(journal_->WriteSnapshot(Snap(1)).ok());
  AppendAll({"b", "c"});
  ASSERT_TRUE(journal_->WriteSnapshot(Snap(3)).ok());
  AppendAll({"d"});
  ASSERT_TRUE(WriteFileAtomic(SnapshotPath(), Snap(1)).ok());  // an older snapshot restored
  const std::string log = ReadFile(LogPath()).value();
  auto loaded = Reopen();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kCorruption);
  EXPECT_NE(loaded.status().message().find("missing"), std::string::npos) << loaded.status().ToString();
  EXPECT_EQ(ReadFile(LogPath()).value(), log) << "nothing is changed";
}

TEST_F(FileJournalTest, ADamagedRecordFollowedByValidOnesIsCorruption) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"first record", "second record", "third record"});
  journal_.reset();
  std::string log = ReadFile(LogPath()).value();
  log[StateLog::kHeaderBytes + StateLog::kRecordHeaderBytes + 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(LogPath(), log).ok());
  auto loaded = Reopen();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kCorruption);
  EXPECT_NE(loaded.status().message().find("offset " + std::to_string(StateLog::kHeaderBytes)), std::string::npos)
      << loaded.status().ToString();
  EXPECT_EQ(ReadFile(LogPath()).value(), log) << "nothing is cut from a corrupt log";
}

TEST_F(FileJournalTest, AFailedAppendLeavesNothing) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a"});
  const uint64_t good = LogSize();
  journal_->TEST_log().TEST_FailNextAppend(ENOSPC, 5);
  EXPECT_EQ(journal_->Append("lost").code(), Code::kNoSpace);
  EXPECT_EQ(journal_->seq(), 1u);
  EXPECT_EQ(LogSize(), good) << "what the failed write left is cut before Append returns";
  AppendAll({"b"});
  auto loaded = Reopen();
  EXPECT_EQ(loaded->records, (Records{"a", "b"}));
  EXPECT_TRUE(loaded->repaired.empty());

  // A log that cannot be cut back is latched broken until the next Open,
  // which cuts the partial record as a torn tail.
  journal_->TEST_log().TEST_FailNextAppend(EIO, 5, /*fail_repair=*/true);
  EXPECT_EQ(journal_->Append("lost").code(), Code::kIoError);
  Status again = journal_->Append("also lost");
  EXPECT_EQ(again.code(), Code::kIoError);
  EXPECT_NE(again.message().find("restart"), std::string::npos) << again.ToString();
  loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->records, (Records{"a", "b"}));
  EXPECT_TRUE(Mentions(loaded->repaired, "torn"));
}

TEST_F(FileJournalTest, AMissingLogStartsFromTheSnapshotAndSaysSo) {
  ASSERT_TRUE(Reopen().ok());
  AppendAll({"a", "b"});
  ASSERT_TRUE(journal_->WriteSnapshot(Snap(2)).ok());
  AppendAll({"c"});
  journal_.reset();
  ASSERT_EQ(::unlink(LogPath().c_str()), 0);
  auto loaded = Reopen();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->records.empty());
  EXPECT_TRUE(Mentions(loaded->repaired, "no log"));
  EXPECT_EQ(journal_->seq(), 2u);
}

TEST_F(FileJournalTest, TheOwnersSnapshotErrorIsReturnedAsItIs) {
  ASSERT_TRUE(MakeDirs(tmp_.Sub("d")).ok());
  ASSERT_TRUE(WriteFileAtomic(SnapshotPath(), "not the owner's format").ok());
  auto loaded = Reopen();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status(), Status::Corruption("not a test snapshot"));
}

TEST_F(FileJournalTest, LeftoversOfAReplacementAreRemovedAndNobodyFollows) {
  ASSERT_TRUE(MakeDirs(tmp_.Sub("d")).ok());
  ASSERT_TRUE(WriteFileAtomic(LogPath() + ".tmp", "half a log").ok());
  ASSERT_TRUE(WriteFileAtomic(SnapshotPath() + ".tmp", "half a snapshot").ok());
  ASSERT_TRUE(Reopen().ok());
  EXPECT_FALSE(std::filesystem::exists(LogPath() + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(SnapshotPath() + ".tmp"));
  EXPECT_EQ(journal_->Follow(std::chrono::milliseconds(1)).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoard
