#include "consensus/etcd_journal.h"

#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/testing.h"
#include "consensus/faulty_kv.h"
#include "consensus/etcd_kv.h"
#include "consensus/leader_election.h"
#include "consensus/mem_kv.h"
#include "testing/etcd_cluster.h"

namespace hoard {
namespace {

constexpr char kPrefix[] = "/hoard/t/state/";
constexpr char kLeaderKey[] = "/hoard/t/leader";

// A snapshot, as the stores write theirs: it says which record it stands
// for (Journal::SnapshotSeqFn reads it back).
std::string SnapshotBytes(uint64_t seq, size_t size) {
  std::string s = std::to_string(seq) + ":";
  s += testing::PseudoRandomBytes(size, seq);
  return s;
}
Result<uint64_t> SeqOf(std::string_view snapshot) { return std::stoull(std::string(snapshot.substr(0, snapshot.find(':')))); }

class EtcdJournalTest : public ::testing::Test {
 protected:
  // Makes `kv` the leader (a term key with a lease) and returns its fence.
  Fence Elect(Kv* kv) {
    Result<int64_t> lease = store_.LeaseGrant(std::chrono::seconds(30));
    EXPECT_TRUE(lease.ok());
    // (etcd refuses a put and a delete of one key in one transaction.)
    EXPECT_TRUE(kv->Txn({}, {KvOp::Delete(kLeaderKey)}, {}).ok());
    Result<KvTxnResult> r = kv->Txn({KvCompare::Absent(kLeaderKey)}, {KvOp::Put(kLeaderKey, "me", *lease)}, {});
    EXPECT_TRUE(r.ok() && r->succeeded);
    return Fence{kLeaderKey, r->revision};
  }
  std::unique_ptr<EtcdJournal> Journal(Kv* kv) {
    return std::make_unique<EtcdJournal>(kv, EtcdJournal::Options{.prefix = kPrefix,
                                                                  .resolve_timeout = std::chrono::seconds(2),
                                                                  .clock = &clock_});
  }
  // Runs `fn` on another thread while moving the fake clock, which the
  // journal's pauses between resends wait on; returns what `fn` returned.
  template <typename Fn>
  auto Driven(Fn fn) {
    auto f = std::async(std::launch::async, fn);
    while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
      clock_.Advance(std::chrono::milliseconds(100));
    }
    return f.get();
  }
  int64_t KeysUnder(const std::string& prefix) {
    Result<KvRange> r = store_.Range(prefix, PrefixEnd(prefix));
    return r.ok() ? static_cast<int64_t>(r->kvs.size()) : -1;
  }

  FakeClock clock_;
  MemKv store_{MemKv::Options{.clock = &clock_}};
};

TEST_F(EtcdJournalTest, RecordsComeBackInOrderAfterASnapshot) {
  auto j = Journal(&store_);
  j->SetFence(Elect(&store_));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(j->Append("r" + std::to_string(i)).ok());
  // A snapshot of 2.5 parts stands for records 1..5; two more follow it.
  const std::string snap = SnapshotBytes(5, EtcdJournal::kPartBytes * 5 / 2);
  ASSERT_TRUE(j->WriteSnapshot(snap).ok());
  EXPECT_EQ(j->records_since_snapshot(), 0u);
  ASSERT_TRUE(j->Append("r6").ok());
  ASSERT_TRUE(j->Append("r7").ok());
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "log/"), 2) << "the records the snapshot stands for are gone";
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "snap/"), 3);

  auto again = Journal(&store_);
  Result<Journal::Loaded> got = again->Open(SeqOf);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->snapshot, snap);
  EXPECT_EQ(got->snapshot_seq, 5u);
  EXPECT_EQ(got->records, (std::vector<std::string>{"r6", "r7"}));
  EXPECT_EQ(again->seq(), 7u);

  // A second snapshot removes the first one's parts.
  ASSERT_TRUE(j->WriteSnapshot(SnapshotBytes(7, 10)).ok());
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "snap/"), 1);
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "log/"), 0);
}

TEST_F(EtcdJournalTest, AWriterWhoseTermEndedChangesNothing) {
  auto old_leader = Journal(&store_);
  old_leader->SetFence(Elect(&store_));
  ASSERT_TRUE(old_leader->Open(SeqOf).ok());
  ASSERT_TRUE(old_leader->Append("r1").ok());

  auto new_leader = Journal(&store_);
  new_leader->SetFence(Elect(&store_));  // a new term: the old one's key is gone
  ASSERT_TRUE(new_leader->Open(SeqOf).ok());
  EXPECT_EQ(old_leader->Append("r2 from the old leader").code(), Code::kNotLeader);
  EXPECT_EQ(old_leader->WriteSnapshot(SnapshotBytes(1, 10)).code(), Code::kNotLeader);
  ASSERT_TRUE(new_leader->Append("r2").ok());

  Result<Journal::Loaded> got = Journal(&store_)->Open(SeqOf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->records, (std::vector<std::string>{"r1", "r2"}));
  EXPECT_TRUE(got->snapshot.empty());
}

TEST_F(EtcdJournalTest, ALostAnswerIsSentAgainAndAppliedOnce) {
  FaultyKv kv(&store_);
  auto j = Journal(&kv);
  j->SetFence(Elect(&kv));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  kv.LoseAnswers(1);  // r1 is applied, its answer lost
  ASSERT_TRUE(Driven([&] { return j->Append("r1"); }).ok());
  ASSERT_TRUE(j->Append("r2").ok());
  Result<Journal::Loaded> got = Journal(&store_)->Open(SeqOf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->records, (std::vector<std::string>{"r1", "r2"}));
}

TEST_F(EtcdJournalTest, EtcdAwayForLongerThanTheResolveTimeoutBreaksTheJournal) {
  FaultyKv kv(&store_);
  auto j = Journal(&kv);
  j->SetFence(Elect(&kv));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  kv.set_cut(true);
  // kNotLeader: the writer's clients go to the next leader, which knows.
  EXPECT_EQ(Driven([&] { return j->Append("r1"); }).code(), Code::kNotLeader);
  kv.set_cut(false);
  // Whether r1 went in is unknown to the writer: it must reload, not go on.
  EXPECT_EQ(j->Append("r2").code(), Code::kNotLeader);
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "log/"), 0);
}

TEST_F(EtcdJournalTest, ARecordWhoseAnswerWasLostCountsThoughTheTermEndedBeforeTheResend) {
  FaultyKv kv(&store_);
  auto j = Journal(&kv);
  j->SetFence(Elect(&kv));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  kv.LoseAnswers(1);  // r1 is applied, its answer lost
  int txns = 0;
  store_.SetBeforeCallHook([&](std::string_view call) {
    // Another coordinator's term begins between the send and the resend.
    if (call == "Txn" && ++txns == 2) (void)store_.Txn({}, {KvOp::Delete(kLeaderKey)}, {});
  });
  EXPECT_TRUE(Driven([&] { return j->Append("r1"); }).ok()) << "r1 was written inside the term";
  store_.SetBeforeCallHook(nullptr);
  EXPECT_EQ(j->Append("r2").code(), Code::kNotLeader);
  Result<Journal::Loaded> got = Journal(&store_)->Open(SeqOf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->records, (std::vector<std::string>{"r1"}));
}

TEST_F(EtcdJournalTest, AFollowerKeepsUpAndTakesOverWithTheWholeHistory) {
  auto leader = Journal(&store_);
  leader->SetFence(Elect(&store_));
  ASSERT_TRUE(leader->Open(SeqOf).ok());
  ASSERT_TRUE(leader->Append("r1").ok());

  auto follower = Journal(&store_);
  Result<Journal::Loaded> first = follower->Follow(std::chrono::milliseconds(0));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->records, (std::vector<std::string>{"r1"}));

  ASSERT_TRUE(leader->Append("r2").ok());
  Result<Journal::Loaded> next = follower->Follow(std::chrono::seconds(1));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->records, (std::vector<std::string>{"r2"}));
  EXPECT_EQ(follower->seq(), 2u);

  // The leader snapshots and writes on; the follower starts over from the
  // snapshot when it sees it.
  const std::string snap = SnapshotBytes(2, 100);
  ASSERT_TRUE(leader->WriteSnapshot(snap).ok());
  ASSERT_TRUE(leader->Append("r3").ok());
  Result<Journal::Loaded> after = follower->Follow(std::chrono::seconds(1));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->snapshot, snap);
  EXPECT_EQ(after->records, (std::vector<std::string>{"r3"}));

  // Records written after the follower's last look are read at takeover.
  ASSERT_TRUE(leader->Append("r4").ok());
  follower->SetFence(Elect(&store_));
  Result<Journal::Loaded> took = follower->Open(SeqOf);
  ASSERT_TRUE(took.ok()) << took.status().ToString();
  EXPECT_EQ(took->snapshot, snap);
  EXPECT_EQ(took->records, (std::vector<std::string>{"r3", "r4"}));
  ASSERT_TRUE(follower->Append("r5").ok());
  EXPECT_EQ(leader->Append("r5 from the old leader").code(), Code::kNotLeader);
}

TEST_F(EtcdJournalTest, ASnapshotThatIsNotWhatEtcdSaysIsCorruption) {
  auto j = Journal(&store_);
  j->SetFence(Elect(&store_));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  ASSERT_TRUE(j->Append("r1").ok());
  ASSERT_TRUE(j->WriteSnapshot(SnapshotBytes(1, 2000)).ok());
  // One part's bytes change under the checksum.
  const std::string part = j->PartKey(1, 0);
  ASSERT_TRUE(store_.Txn({}, {KvOp::Put(part, SnapshotBytes(1, 1999) + "x")}, {}).ok());
  EXPECT_EQ(Journal(&store_)->Open(SeqOf).status().code(), Code::kCorruption);
  // A snapshot that claims another record than etcd's note of it.
  ASSERT_TRUE(j->WriteSnapshot(SnapshotBytes(7, 10)).ok());
  EXPECT_EQ(Journal(&store_)->Open(SeqOf).status().code(), Code::kCorruption);
}

TEST_F(EtcdJournalTest, ARecordTooLargeForEtcdIsRefused) {
  auto j = Journal(&store_);
  j->SetFence(Elect(&store_));
  ASSERT_TRUE(j->Open(SeqOf).ok());
  EXPECT_EQ(j->Append(std::string(EtcdJournal::kPartBytes + 1, 'x')).code(), Code::kInvalidArgument);
  EXPECT_EQ(j->seq(), 0u);
}

// The same election and journal on a real etcd: a leader writes, a standby
// follows; the leader is killed (its lease runs out at etcd, nobody resigns),
// the standby wins, finds every record, and the old term's writes fail.
TEST(EtcdJournalOnEtcdTest, ATakeoverOnRealEtcdFindsEveryRecordAndFencesTheOldTerm) {
  if (std::string why = EtcdCluster::SkipReason(); !why.empty()) GTEST_SKIP() << why;
  Result<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start({});
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  Result<std::unique_ptr<EtcdKv>> kv = EtcdKv::Open({.endpoints = (*etcd)->endpoints()});
  ASSERT_TRUE(kv.ok());
  FaultyKv a_kv(kv->get());  // the leader's link, cut to "kill" it
  auto log = std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::null_sink_mt>());
  auto elect = [&](Kv* k, const char* who) {
    return std::make_unique<LeaderElection>(
        k, LeaderElection::Options{.key = "/t/leader", .value = who, .ttl = std::chrono::seconds(1), .logger = log});
  };
  auto journal = [&](Kv* k) { return std::make_unique<EtcdJournal>(k, EtcdJournal::Options{.prefix = "/t/state/"}); };

  auto a = elect(&a_kv, "a");
  Result<Fence> fa = a->Campaign();
  ASSERT_TRUE(fa.ok());
  auto a_journal = journal(&a_kv);
  a_journal->SetFence(*fa);
  ASSERT_TRUE(a_journal->Open(SeqOf).ok());
  ASSERT_TRUE(a_journal->Append("r1").ok());
  ASSERT_TRUE(a_journal->WriteSnapshot(SnapshotBytes(1, 3000)).ok());
  ASSERT_TRUE(a_journal->Append("r2").ok());

  auto b = elect(kv->get(), "b");
  auto b_journal = journal(kv->get());
  ASSERT_TRUE(b_journal->Follow(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(b_journal->seq(), 2u);
  auto fb = std::async(std::launch::async, [&] { return b->Campaign(); });
  ASSERT_TRUE(a_journal->Append("r3").ok());  // written while B follows
  const auto cut = std::chrono::steady_clock::now();
  a_kv.set_cut(true);
  Result<Fence> got = fb.get();
  ASSERT_TRUE(got.ok());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  EXPECT_LT(took, 5.0) << "a 1 s lease";
  EXPECT_FALSE(a->Leading());
  b_journal->SetFence(*got);
  Result<Journal::Loaded> loaded = b_journal->Open(SeqOf);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->snapshot, SnapshotBytes(1, 3000));
  EXPECT_EQ(loaded->records, (std::vector<std::string>{"r2", "r3"}));
  ASSERT_TRUE(b_journal->Append("r4").ok());

  a_kv.set_cut(false);  // A comes back and writes as if it still led
  EXPECT_EQ(a_journal->Append("r4 from a").code(), Code::kNotLeader);
  Result<Journal::Loaded> final = journal(kv->get())->Open(SeqOf);
  ASSERT_TRUE(final.ok());
  EXPECT_EQ(final->records, (std::vector<std::string>{"r2", "r3", "r4"}));
}

}  // namespace
}  // namespace hoard
