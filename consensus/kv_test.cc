// The Kv conformance suite: one set of tests run against MemKv and against a
// real etcd (EtcdKv on a member the fixture starts), so that MemKv's
// semantics are etcd's and EtcdKv speaks the gateway correctly. Then what only
// one of them has: MemKv's faults and exact clock, EtcdKv's failover.
//
// Each test keeps to keys under its own prefix (its name), so the tests of
// one process can share one etcd.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "consensus/etcd_kv.h"
#include "consensus/kv.h"
#include "consensus/mem_kv.h"
#include "consensus/timed_kv.h"
#include "testing/etcd_cluster.h"

namespace hoard {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Op = KvCompare::Op;

// ---- environments: how each implementation is set up and how time passes ----

class MemEnv {
 public:
  static std::string SkipReason() { return ""; }
  static void SetUpSuite() {}
  static void TearDownSuite() {}

  MemEnv() : kv_({.clock = &clock_}) {}
  Status Init() { return Status::Ok(); }
  Kv* kv() { return &kv_; }
  // Lets `d` of lease time pass: a step of the fake clock.
  void Elapse(seconds d) { clock_.Advance(d); }
  Status Compact(int64_t revision) { return kv_.Compact(revision); }
  // A wait that must time out: the clock moves past its deadline once the
  // waiter sleeps on it.
  Result<KvEvents> WaitToTimeout(const std::string& key, const std::string& end, int64_t after,
                                 milliseconds timeout) {
    Result<KvEvents> r = Status::Internal("not run");
    std::thread waiter([&] { r = kv_.WaitEvents(key, end, after, timeout); });
    while (clock_.waiters() == 0) std::this_thread::yield();
    clock_.Advance(timeout);
    waiter.join();
    return r;
  }

 private:
  FakeClock clock_;
  MemKv kv_;
};

// One etcd member for the whole suite of a process (ctest runs each test in
// a process of its own, so that is one member per test there).
class EtcdEnv {
 public:
  static std::string SkipReason() { return EtcdCluster::SkipReason(); }
  static void SetUpSuite() {
    if (!SkipReason().empty()) return;
    auto cluster = EtcdCluster::Start({.members = 1});
    if (cluster.ok()) {
      cluster_ = std::move(*cluster).release();
    } else {
      start_error_ = new std::string(cluster.status().ToString());
    }
  }
  static void TearDownSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  Status Init() {
    if (cluster_ == nullptr) return Status::Unavailable("etcd did not start: " + (start_error_ ? *start_error_ : ""));
    HOARD_ASSIGN_OR_RETURN(kv_, EtcdKv::Open({.endpoints = cluster_->endpoints()}));
    return Status::Ok();
  }
  Kv* kv() { return kv_.get(); }
  // Real time passes while the test waits for the effect, with a deadline.
  void Elapse(seconds) {}
  Status Compact(int64_t revision) { return kv_->Compact(revision); }
  Result<KvEvents> WaitToTimeout(const std::string& key, const std::string& end, int64_t after,
                                 milliseconds timeout) {
    return kv_->WaitEvents(key, end, after, timeout);
  }

 private:
  static inline EtcdCluster* cluster_ = nullptr;
  static inline std::string* start_error_ = nullptr;
  std::unique_ptr<EtcdKv> kv_;
};

struct EnvNames {
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, MemEnv>) return "MemKv";
    return "Etcd";
  }
};

template <typename Env>
class KvConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { Env::SetUpSuite(); }
  static void TearDownTestSuite() { Env::TearDownSuite(); }

  void SetUp() override {
    if (std::string why = Env::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    env_ = std::make_unique<Env>();
    Status s = env_->Init();
    ASSERT_TRUE(s.ok()) << s.ToString();
    kv_ = env_->kv();
    prefix_ = std::string("/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  std::string K(const std::string& name) const { return prefix_ + name; }

  // Puts through a Txn without compares; the revision it made.
  int64_t Put(const std::string& key, const std::string& value, int64_t lease = 0) {
    auto r = kv_->Txn({}, {KvOp::Put(key, value, lease)});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->revision : -1;
  }
  // The key's pair; an empty key when it is absent.
  KvPair Get(const std::string& key) {
    auto r = kv_->Range(key);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || r->kvs.empty()) return {};
    return r->kvs[0];
  }
  int64_t Revision() {
    auto r = kv_->Range(K("no-such-key"));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->revision : -1;
  }

  std::unique_ptr<Env> env_;
  Kv* kv_ = nullptr;
  std::string prefix_;
};

using Envs = ::testing::Types<MemEnv, EtcdEnv>;
TYPED_TEST_SUITE(KvConformance, Envs, EnvNames);

TYPED_TEST(KvConformance, PutThenGetCarriesRevisionsAndVersion) {
  const int64_t r1 = this->Put(this->K("a"), "one");
  EXPECT_GT(r1, 1);
  KvPair p = this->Get(this->K("a"));
  EXPECT_EQ(p.key, this->K("a"));
  EXPECT_EQ(p.value, "one");
  EXPECT_EQ(p.create_revision, r1);
  EXPECT_EQ(p.mod_revision, r1);
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.lease, 0);

  const int64_t r2 = this->Put(this->K("a"), "two");
  EXPECT_EQ(r2, r1 + 1);  // one revision per change, for the whole store
  p = this->Get(this->K("a"));
  EXPECT_EQ(p.value, "two");
  EXPECT_EQ(p.create_revision, r1);
  EXPECT_EQ(p.mod_revision, r2);
  EXPECT_EQ(p.version, 2);

  auto missing = this->kv_->Range(this->K("missing"));
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_TRUE(missing->kvs.empty());
  EXPECT_EQ(missing->revision, r2);
}

TYPED_TEST(KvConformance, BinaryKeysAndValuesRoundTrip) {
  const std::string key = this->K(std::string("bin\0\xff\x01", 6));
  const std::string value = std::string("\0\x80\xfe\n\"{}", 7);
  this->Put(key, value);
  const KvPair p = this->Get(key);
  EXPECT_EQ(p.key, key);
  EXPECT_EQ(p.value, value);
  this->Put(this->K("empty"), "");
  const KvPair e = this->Get(this->K("empty"));
  EXPECT_EQ(e.key, this->K("empty"));
  EXPECT_EQ(e.value, "");
  EXPECT_EQ(e.version, 1);
}

TYPED_TEST(KvConformance, RangeByPrefixWithLimit) {
  for (const char* k : {"p/c", "p/a", "p/b", "q/a"}) this->Put(this->K(k), k);
  const std::string prefix = this->K("p/");
  auto all = this->kv_->Range(prefix, PrefixEnd(prefix));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->kvs.size(), 3u);
  EXPECT_EQ(all->kvs[0].key, this->K("p/a"));  // in key order
  EXPECT_EQ(all->kvs[1].key, this->K("p/b"));
  EXPECT_EQ(all->kvs[2].key, this->K("p/c"));
  EXPECT_FALSE(all->more);

  auto two = this->kv_->Range(prefix, PrefixEnd(prefix), 2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_EQ(two->kvs.size(), 2u);
  EXPECT_EQ(two->kvs[1].key, this->K("p/b"));
  EXPECT_TRUE(two->more);

  // range_end "\0": every key from `key` on (this test's q/a is the last).
  auto rest = this->kv_->Range(this->K("p/c"), std::string(1, '\0'));
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_GE(rest->kvs.size(), 2u);
  EXPECT_EQ(rest->kvs[0].key, this->K("p/c"));
  EXPECT_EQ(rest->kvs[1].key, this->K("q/a"));
}

TYPED_TEST(KvConformance, TxnAppliesAllOfOneBranchAtOneRevision) {
  auto r = this->kv_->Txn({}, {KvOp::Put(this->K("x"), "1"), KvOp::Put(this->K("y"), "2"), KvOp::Get(this->K("x"))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->succeeded);
  EXPECT_EQ(this->Get(this->K("x")).mod_revision, r->revision);
  EXPECT_EQ(this->Get(this->K("y")).mod_revision, r->revision);
  ASSERT_EQ(r->ranges.size(), 1u);  // the range after the put sees it
  ASSERT_EQ(r->ranges[0].size(), 1u);
  EXPECT_EQ(r->ranges[0][0].value, "1");

  // A branch that changes nothing (a read, a delete of no key) makes no revision.
  auto read = this->kv_->Txn({}, {KvOp::Get(this->K("y")), KvOp::Delete(this->K("none"))});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->revision, r->revision);
  ASSERT_EQ(read->ranges.size(), 1u);
  ASSERT_EQ(read->ranges[0].size(), 1u);
  EXPECT_EQ(read->ranges[0][0].value, "2");
}

TYPED_TEST(KvConformance, TxnComparesEveryTarget) {
  const int64_t created = this->Put(this->K("k"), "v1");
  const int64_t modified = this->Put(this->K("k"), "v2");  // version 2
  struct Case {
    KvCompare compare;
    bool holds;
  };
  const std::string k = this->K("k");
  const std::vector<Case> cases = {
      {KvCompare::CreateRevision(k, Op::kEqual, created), true},
      {KvCompare::CreateRevision(k, Op::kNotEqual, created), false},
      {KvCompare::CreateRevision(k, Op::kLess, created + 1), true},
      {KvCompare::CreateRevision(k, Op::kGreater, created), false},
      {KvCompare::ModRevision(k, Op::kEqual, modified), true},
      {KvCompare::ModRevision(k, Op::kEqual, created), false},
      {KvCompare::ModRevision(k, Op::kGreater, created), true},
      {KvCompare::ModRevision(k, Op::kLess, modified), false},
      {KvCompare::Version(k, Op::kEqual, 2), true},
      {KvCompare::Version(k, Op::kNotEqual, 2), false},
      {KvCompare::Version(k, Op::kGreater, 1), true},
      {KvCompare::Version(k, Op::kLess, 2), false},
      {KvCompare::Value(k, Op::kEqual, "v2"), true},
      {KvCompare::Value(k, Op::kEqual, "v1"), false},
      {KvCompare::Value(k, Op::kNotEqual, "v1"), true},
      {KvCompare::Value(k, Op::kLess, "v3"), true},
      {KvCompare::Value(k, Op::kGreater, "v3"), false},
      {KvCompare::Absent(k), false},
      {KvCompare::Absent(this->K("missing")), true},
      // etcd: a value compare on a missing key is false, whatever the op.
      {KvCompare::Value(this->K("missing"), Op::kNotEqual, "x"), false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    auto r = this->kv_->Txn({cases[i].compare}, {KvOp::Get(this->K("k"))},
                            {KvOp::Get(this->K("k")), KvOp::Get(this->K("k"))});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->succeeded, cases[i].holds);
    EXPECT_EQ(r->ranges.size(), cases[i].holds ? 1u : 2u);  // the branch that ran
    EXPECT_EQ(r->revision, modified);                       // reads only
  }
  // All compares must hold; the failure branch's writes apply.
  auto r = this->kv_->Txn({KvCompare::Version(k, Op::kEqual, 2), KvCompare::Value(k, Op::kEqual, "no")},
                          {KvOp::Put(this->K("ok"), "1")}, {KvOp::Put(this->K("failed"), "1")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->succeeded);
  EXPECT_EQ(r->revision, modified + 1);
  EXPECT_EQ(this->Get(this->K("ok")).version, 0);
  EXPECT_EQ(this->Get(this->K("failed")).version, 1);
}

// The fence of a leader: create a key only if absent, then write only while
// that very key (its create_revision) is still there.
TYPED_TEST(KvConformance, CreateRevisionFence) {
  const std::string leader = this->K("leader");
  auto first = this->kv_->Txn({KvCompare::Absent(leader)}, {KvOp::Put(leader, "me")}, {KvOp::Get(leader)});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->succeeded);
  const int64_t mine = first->revision;

  auto second = this->kv_->Txn({KvCompare::Absent(leader)}, {KvOp::Put(leader, "other")}, {KvOp::Get(leader)});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 1u);
  ASSERT_EQ(second->ranges[0].size(), 1u);
  EXPECT_EQ(second->ranges[0][0].value, "me");
  EXPECT_EQ(second->ranges[0][0].create_revision, mine);

  const auto fenced = [&](const std::string& value) {
    return this->kv_->Txn({KvCompare::CreateRevision(leader, Op::kEqual, mine)}, {KvOp::Put(this->K("state"), value)});
  };
  auto w1 = fenced("1");
  ASSERT_TRUE(w1.ok()) << w1.status().ToString();
  EXPECT_TRUE(w1->succeeded);

  // The key goes and comes back (someone else's leadership): same value,
  // new create_revision, and the old holder's writes fail.
  ASSERT_TRUE(this->kv_->Txn({}, {KvOp::Delete(leader)}).ok());
  this->Put(leader, "me");
  auto w2 = fenced("2");
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_FALSE(w2->succeeded);
  EXPECT_EQ(this->Get(this->K("state")).value, "1");
}

TYPED_TEST(KvConformance, DeleteRangeAndPrefix) {
  for (const char* k : {"d/1", "d/2", "d/3", "e"}) this->Put(this->K(k), "x");
  auto one = this->kv_->Txn({}, {KvOp::Delete(this->K("d/1"))});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(this->Get(this->K("d/1")).version, 0);
  EXPECT_EQ(this->Get(this->K("d/2")).version, 1);

  const std::string prefix = this->K("d/");
  auto rest = this->kv_->Txn({}, {KvOp::Delete(prefix, PrefixEnd(prefix))});
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(rest->revision, one->revision + 1);  // two keys, one revision
  auto left = this->kv_->Range(this->prefix_, PrefixEnd(this->prefix_));
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key, this->K("e"));

  // A key created again starts over: version 1, a new create_revision.
  const int64_t again = this->Put(this->K("d/1"), "y");
  EXPECT_EQ(this->Get(this->K("d/1")).version, 1);
  EXPECT_EQ(this->Get(this->K("d/1")).create_revision, again);
}

TYPED_TEST(KvConformance, TxnRefusesPuttingOneKeyTwice) {
  auto r = this->kv_->Txn({}, {KvOp::Put(this->K("a"), "1"), KvOp::Put(this->K("a"), "2")});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  auto del = this->kv_->Txn({}, {KvOp::Put(this->K("a"), "1"), KvOp::Delete(this->K("a"))});
  EXPECT_EQ(del.status().code(), Code::kInvalidArgument) << del.status().ToString();
  EXPECT_EQ(this->Get(this->K("a")).version, 0);
}

TYPED_TEST(KvConformance, TooLargeRequestIsInvalidArgument) {
  // Over etcd's default 1.5 MiB, under gRPC's limit (1.5 MiB + 512 KiB), so
  // etcd itself refuses it ("request is too large").
  const std::string big(1700 * 1024, 'x');
  auto r = this->kv_->Txn({}, {KvOp::Put(this->K("big"), big)});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(this->Get(this->K("big")).version, 0);
  // kMaxRequestBytes is what hoard keeps under: that passes.
  const std::string ok(kMaxRequestBytes - 1024, 'y');
  this->Put(this->K("ok"), ok);
  EXPECT_EQ(this->Get(this->K("ok")).value.size(), ok.size());
}

TYPED_TEST(KvConformance, TxnOfMoreThan128OpsIsInvalidArgument) {
  std::vector<KvOp> ops;
  for (int i = 0; i < 128; ++i) ops.push_back(KvOp::Put(this->K(std::to_string(i)), "x"));
  auto ok = this->kv_->Txn({}, ops);  // etcd's default --max-txn-ops
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ops.push_back(KvOp::Put(this->K("one-too-many"), "x"));
  auto r = this->kv_->Txn({}, ops);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(this->Get(this->K("one-too-many")).version, 0);
}

TYPED_TEST(KvConformance, LeaseExpiryDeletesItsKeys) {
  auto lease = this->kv_->LeaseGrant(seconds(1));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int64_t put = this->Put(this->K("held"), "x", *lease);
  EXPECT_EQ(this->Get(this->K("held")).lease, *lease);
  this->Put(this->K("kept"), "y");

  this->env_->Elapse(seconds(2));
  // etcd revokes expired leases on its own schedule (every 500 ms): wait for
  // the delete with a deadline rather than for a fixed time.
  auto events = this->kv_->WaitEvents(this->K("held"), "", put, seconds(10));
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->events.size(), 1u);
  EXPECT_EQ(events->events[0].type, KvEvent::Type::kDelete);
  EXPECT_EQ(this->Get(this->K("held")).version, 0);
  EXPECT_EQ(this->Get(this->K("kept")).value, "y");
  auto gone = this->kv_->LeaseKeepAlive(*lease);
  EXPECT_EQ(gone.status().code(), Code::kNotFound) << gone.status().ToString();
}

TYPED_TEST(KvConformance, LeaseKeepAliveAndRevoke) {
  auto lease = this->kv_->LeaseGrant(seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto ttl = this->kv_->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_EQ(ttl->count(), 30);
  this->Put(this->K("a"), "1", *lease);
  this->Put(this->K("b"), "2", *lease);

  const int64_t before = this->Revision();
  ASSERT_TRUE(this->kv_->LeaseRevoke(*lease).ok());
  EXPECT_EQ(this->Get(this->K("a")).version, 0);
  EXPECT_EQ(this->Get(this->K("b")).version, 0);
  EXPECT_EQ(this->Revision(), before + 1);  // both keys in one revision

  EXPECT_TRUE(this->kv_->LeaseRevoke(*lease).ok()) << "revoking a revoked lease is OK";
  EXPECT_EQ(this->kv_->LeaseKeepAlive(*lease).status().code(), Code::kNotFound);
  auto put = this->kv_->Txn({}, {KvOp::Put(this->K("c"), "3", *lease)});
  EXPECT_EQ(put.status().code(), Code::kNotFound) << put.status().ToString();
  EXPECT_EQ(this->Get(this->K("c")).version, 0);
}

TYPED_TEST(KvConformance, WaitEventsReturnsChangesAfterARevision) {
  const std::string prefix = this->K("w/");
  const int64_t start = this->Put(this->K("w/a"), "1");
  const int64_t put = this->Put(this->K("w/b"), "2");
  this->Put(this->K("outside"), "3");
  auto del = this->kv_->Txn({}, {KvOp::Delete(this->K("w/a"))});
  ASSERT_TRUE(del.ok());

  auto r = this->kv_->WaitEvents(prefix, PrefixEnd(prefix), start, seconds(5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[0].type, KvEvent::Type::kPut);
  EXPECT_EQ(r->events[0].kv.key, this->K("w/b"));
  EXPECT_EQ(r->events[0].kv.value, "2");
  EXPECT_EQ(r->events[0].kv.mod_revision, put);
  EXPECT_EQ(r->events[0].kv.create_revision, put);
  EXPECT_EQ(r->events[0].kv.version, 1);
  EXPECT_EQ(r->events[1].type, KvEvent::Type::kDelete);
  EXPECT_EQ(r->events[1].kv.key, this->K("w/a"));
  EXPECT_EQ(r->events[1].kv.mod_revision, del->revision);
  EXPECT_EQ(r->revision, del->revision);
}

TYPED_TEST(KvConformance, WaitEventsBlocksUntilAChange) {
  const int64_t start = this->Revision();
  Result<KvEvents> r = Status::Internal("not run");
  std::thread waiter([&] { r = this->kv_->WaitEvents(this->K("x"), "", start, seconds(20)); });
  // Whether the waiter is already waiting or not, the change is after `start`.
  const int64_t put = this->Put(this->K("x"), "1");
  waiter.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_EQ(r->events[0].kv.mod_revision, put);
  EXPECT_EQ(r->revision, put);
}

TYPED_TEST(KvConformance, WaitEventsTimesOutEmpty) {
  const int64_t start = this->Put(this->K("x"), "1");
  this->Put(this->K("elsewhere"), "2");
  auto r = this->env_->WaitToTimeout(this->K("x"), "", start, milliseconds(300));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->events.empty());
  // At least where the caller was; at most the store's revision.
  EXPECT_GE(r->revision, start);
  EXPECT_LE(r->revision, start + 1);
}

TYPED_TEST(KvConformance, WaitEventsAfterCompactionIsStale) {
  const int64_t first = this->Put(this->K("x"), "1");
  this->Put(this->K("x"), "2");
  const int64_t last = this->Put(this->K("x"), "3");
  ASSERT_TRUE(this->env_->Compact(last).ok());
  auto stale = this->kv_->WaitEvents(this->K("x"), "", first, seconds(5));
  EXPECT_EQ(stale.status().code(), Code::kStale) << stale.status().ToString();
  // The state itself is still there, and waiting from it works.
  EXPECT_EQ(this->Get(this->K("x")).value, "3");
  const int64_t next = this->Put(this->K("x"), "4");
  auto r = this->kv_->WaitEvents(this->K("x"), "", last, seconds(5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_EQ(r->events[0].kv.mod_revision, next);
}

// Calls from several threads at once (EtcdKv: one pooled connection each):
// compare-and-set increments, each applied exactly once.
TYPED_TEST(KvConformance, ConcurrentCompareAndSetIncrements) {
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  const std::string key = this->K("counter");
  std::vector<std::thread> threads;
  std::vector<Status> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int done = 0; done < kEach;) {
        auto cur = this->kv_->Range(key);
        if (!cur.ok()) return void(errors[t] = cur.status());
        const int64_t mod = cur->kvs.empty() ? 0 : cur->kvs[0].mod_revision;
        const int n = cur->kvs.empty() ? 0 : std::stoi(cur->kvs[0].value);
        auto r = this->kv_->Txn({KvCompare::ModRevision(key, Op::kEqual, mod)}, {KvOp::Put(key, std::to_string(n + 1))});
        if (!r.ok()) return void(errors[t] = r.status());
        done += r->succeeded;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_TRUE(e.ok()) << e.ToString();
  const KvPair p = this->Get(key);
  EXPECT_EQ(p.value, std::to_string(kThreads * kEach));
  EXPECT_EQ(p.version, kThreads * kEach);
}

TYPED_TEST(KvConformance, MembersAreHealthyWithOneLeader) {
  auto members = this->kv_->Members();
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  ASSERT_EQ(members->size(), 1u);
  EXPECT_TRUE((*members)[0].healthy) << (*members)[0].error;
  EXPECT_TRUE((*members)[0].leader);
  EXPECT_FALSE((*members)[0].name.empty());
  EXPECT_FALSE((*members)[0].endpoint.empty());
}

// ---- PrefixEnd ----

TEST(PrefixEndTest, IncrementsTheLastByteBelow0xff) {
  EXPECT_EQ(PrefixEnd("abc"), "abd");
  EXPECT_EQ(PrefixEnd("a/"), "a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

// ---- MemKv only: its faults and its exact clock ----

class MemKvTest : public ::testing::Test {
 protected:
  int64_t Put(const std::string& key, const std::string& value, int64_t lease = 0) {
    auto r = kv_.Txn({}, {KvOp::Put(key, value, lease)});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->revision : -1;
  }
  int64_t Version(const std::string& key) {
    auto r = kv_.Range(key);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && !r->kvs.empty() ? r->kvs[0].version : 0;
  }

  FakeClock clock_;
  MemKv kv_{{.clock = &clock_, .keep_revisions = 100}};
};

TEST_F(MemKvTest, StartsAtRevisionOneLikeAFreshEtcd) {
  EXPECT_EQ(kv_.revision(), 1);
  auto r = kv_.Range("k");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->revision, 1);
}

TEST_F(MemKvTest, FailNextFailsWithoutApplying) {
  kv_.FailNext(2, Status::Unavailable("injected"));
  auto t = kv_.Txn({}, {KvOp::Put("k", "v")});
  EXPECT_EQ(t.status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.LeaseGrant(seconds(5)).status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.revision(), 1);
  Put("k", "v");  // the third call is served
  EXPECT_EQ(Version("k"), 1);
}

TEST_F(MemKvTest, UnavailableRefusesEveryCallUntilHealed) {
  kv_.SetUnavailable(true);
  EXPECT_EQ(kv_.Range("k").status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.Txn({}, {KvOp::Put("k", "v")}).status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.LeaseGrant(seconds(5)).status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.LeaseKeepAlive(1).status().code(), Code::kUnavailable);
  EXPECT_EQ(kv_.LeaseRevoke(1).code(), Code::kUnavailable);
  EXPECT_EQ(kv_.WaitEvents("k", "", 1, seconds(0)).status().code(), Code::kUnavailable);
  auto members = kv_.Members();
  ASSERT_TRUE(members.ok());
  EXPECT_FALSE((*members)[0].healthy);
  kv_.SetUnavailable(false);
  Put("k", "v");
  EXPECT_EQ(Version("k"), 1);
}

TEST_F(MemKvTest, PartitionEndsAWaitInProgress) {
  Result<KvEvents> r = Status::Internal("not run");
  std::thread waiter([&] { r = kv_.WaitEvents("k", "", 1, seconds(60)); });
  while (clock_.waiters() == 0) std::this_thread::yield();
  kv_.SetUnavailable(true);
  waiter.join();
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
}

// The reply of a transaction is lost: the caller sees kUnavailable, the
// change is there, and a retry guarded by a compare does not apply twice.
TEST_F(MemKvTest, LostReplyAppliesTheTxn) {
  kv_.LoseNextTxnReplies(1);
  const auto create = [&] { return kv_.Txn({KvCompare::Absent("k")}, {KvOp::Put("k", "v")}, {KvOp::Get("k")}); };
  auto lost = create();
  EXPECT_EQ(lost.status().code(), Code::kUnavailable);
  EXPECT_EQ(Version("k"), 1);
  auto retry = create();
  ASSERT_TRUE(retry.ok());
  EXPECT_FALSE(retry->succeeded);  // the caller finds its own write in the failure branch
  ASSERT_EQ(retry->ranges[0].size(), 1u);
  EXPECT_EQ(retry->ranges[0][0].value, "v");
  EXPECT_EQ(Version("k"), 1);
}

TEST_F(MemKvTest, BeforeCallHookRunsWithoutTheLock) {
  std::vector<std::string> calls;
  kv_.SetBeforeCallHook([&](std::string_view call) {
    calls.emplace_back(call);
    if (call == "Txn") clock_.Advance(seconds(10));  // the caller stalls here past its lease
  });
  auto lease = kv_.LeaseGrant(seconds(5));
  ASSERT_TRUE(lease.ok());
  // The lease ends while the writer stalls before its write: the write with
  // that lease is refused.
  auto r = kv_.Txn({}, {KvOp::Put("k", "v", *lease)});
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(calls, (std::vector<std::string>{"LeaseGrant", "Txn"}));
  kv_.SetBeforeCallHook(nullptr);
}

TEST_F(MemKvTest, LeaseEndsExactlyAtItsTtlUnlessKeptAlive) {
  auto lease = kv_.LeaseGrant(seconds(10));
  ASSERT_TRUE(lease.ok());
  Put("k", "v", *lease);
  clock_.Advance(seconds(9));
  EXPECT_EQ(Version("k"), 1);
  ASSERT_TRUE(kv_.LeaseKeepAlive(*lease).ok());  // 10 s from now
  clock_.Advance(milliseconds(9999));
  EXPECT_EQ(Version("k"), 1);
  clock_.Advance(milliseconds(1));
  EXPECT_EQ(Version("k"), 0);
  EXPECT_EQ(kv_.LeaseKeepAlive(*lease).status().code(), Code::kNotFound);
}

TEST_F(MemKvTest, WaitWakesForALeaseExpiry) {
  auto lease = kv_.LeaseGrant(seconds(5));
  ASSERT_TRUE(lease.ok());
  const int64_t put = Put("k", "v", *lease);
  Result<KvEvents> r = Status::Internal("not run");
  std::thread waiter([&] { r = kv_.WaitEvents("k", "", put, seconds(60)); });
  while (clock_.waiters() == 0) std::this_thread::yield();
  clock_.Advance(seconds(5));
  waiter.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_EQ(r->events[0].type, KvEvent::Type::kDelete);
}

TEST_F(MemKvTest, KeepWindowCompactsOldHistory) {
  const int64_t first = Put("k", "0");
  for (int i = 1; i <= 150; ++i) Put("k", std::to_string(i));
  EXPECT_EQ(kv_.WaitEvents("k", "", first, seconds(0)).status().code(), Code::kStale);
  auto recent = kv_.WaitEvents("k", "", kv_.revision() - 50, seconds(0));
  ASSERT_TRUE(recent.ok()) << recent.status().ToString();
  EXPECT_EQ(recent->events.size(), 50u);
  EXPECT_EQ(kv_.Compact(first).code(), Code::kStale);  // already compacted
  EXPECT_EQ(kv_.Compact(kv_.revision() + 1).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoard

namespace hoard {
namespace {

// ---- EtcdKv only: endpoints, failover ----

TEST(EtcdKvTest, OpenRefusesWhatItCannotSpeak) {
  EXPECT_EQ(EtcdKv::Open({}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EtcdKv::Open({.endpoints = {"https://127.0.0.1:2379"}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EtcdKv::Open({.endpoints = {"http://127.0.0.1"}}).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(EtcdKv::Open({.endpoints = {"127.0.0.1:2379", "http://[::1]:2379/"}}).ok());
  EXPECT_EQ(EtcdKv::SplitEndpoints(" http://a:1, http://b:2,,"),
            (std::vector<std::string>{"http://a:1", "http://b:2"}));
}

// Nobody listens: every call is kUnavailable at once (a refused connection
// costs no timeout), and Members says why.
TEST(EtcdKvTest, NoMemberIsUnavailable) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);  // a port nobody listens on: bound, never listening
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto kv = EtcdKv::Open({.endpoints = {url, url}});
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)->Range("k").status().code(), Code::kUnavailable);
  auto txn = (*kv)->Txn({}, {KvOp::Put("k", "v")});
  EXPECT_EQ(txn.status().code(), Code::kUnavailable);
  EXPECT_EQ(txn.status().message().find("may have been applied"), std::string::npos)  // never sent
      << txn.status().ToString();
  EXPECT_EQ((*kv)->WaitEvents("k", "", 1, seconds(1)).status().code(), Code::kUnavailable);
  auto members = (*kv)->Members();
  ASSERT_TRUE(members.ok());
  ASSERT_EQ(members->size(), 2u);
  EXPECT_FALSE((*members)[0].healthy);
  EXPECT_FALSE((*members)[0].error.empty());
  ::close(fd);
}

// Three members; the client's first one hangs (SIGSTOP), then dies
// (SIGKILL): every call is still served by the other two.
TEST(EtcdKvTest, ThreeMembersServeEveryCallWithOneStoppedOrKilled) {
  if (std::string why = EtcdCluster::SkipReason(); !why.empty()) GTEST_SKIP() << why;
  auto cluster = EtcdCluster::Start({.members = 3});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  const std::vector<std::string> all = (*cluster)->endpoints();

  // The member to fail is a follower, so that no election adds to the test.
  auto probe = EtcdKv::Open({.endpoints = all});
  ASSERT_TRUE(probe.ok());
  auto members = (*probe)->Members();
  ASSERT_TRUE(members.ok());
  int leader = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*members)[i].healthy) << (*members)[i].error;
    if ((*members)[i].leader) leader = i;
  }
  ASSERT_GE(leader, 0);
  const int victim = (leader + 1) % 3;
  std::vector<std::string> order;  // the victim first: the member a client tries first
  for (int i = 0; i < 3; ++i) order.push_back(all[(victim + i) % 3]);
  const EtcdKv::Options options{.endpoints = order,
                                .request_timeout = milliseconds(500),
                                .connect_timeout = milliseconds(300)};

  {
    auto kv = EtcdKv::Open(options);
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE((*kv)->Txn({}, {KvOp::Put("/f/a", "1")}).ok());  // a kept-alive connection to the victim
    ASSERT_TRUE((*cluster)->StopMember(victim).ok());
    // A read costs one request timeout on the hung member, then goes on;
    // the next calls skip it.
    auto read = (*kv)->Range("/f/a");
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(read->kvs.size(), 1u);
    const auto start = std::chrono::steady_clock::now();
    auto txn = (*kv)->Txn({KvCompare::Absent("/f/b")}, {KvOp::Put("/f/b", "2")});
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    EXPECT_TRUE(txn->succeeded);
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(400)) << "the hung member was tried again";

    // A Txn that reached the hung member is not sent again elsewhere: it
    // may yet be applied (the member has it in its socket), so the caller
    // hears kUnavailable and retries under its compare, which makes the
    // two attempts one change whichever order they land in.
    auto other = EtcdKv::Open(options);  // the hung member first again
    ASSERT_TRUE(other.ok());
    const auto create = [&] {
      return (*other)->Txn({KvCompare::Absent("/f/sent")}, {KvOp::Put("/f/sent", "once")});
    };
    auto lost = create();
    EXPECT_EQ(lost.status().code(), Code::kUnavailable);
    EXPECT_NE(lost.status().message().find("may have been applied"), std::string::npos) << lost.status().ToString();
    auto retry = create();
    ASSERT_TRUE(retry.ok()) << retry.status().ToString();
    EXPECT_TRUE(retry->succeeded);
    ASSERT_TRUE((*cluster)->ContMember(victim).ok());
  }

  ASSERT_TRUE((*cluster)->KillMember(victim).ok());
  auto kv = EtcdKv::Open(options);  // a new client: the dead member is still its first
  ASSERT_TRUE(kv.ok());
  auto range = (*kv)->Range("/f/", PrefixEnd("/f/"));
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  ASSERT_EQ(range->kvs.size(), 3u);  // a, b, sent
  EXPECT_EQ(range->kvs[2].version, 1);
  auto txn = (*kv)->Txn({KvCompare::Absent("/f/c")}, {KvOp::Put("/f/c", "3")});
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_TRUE(txn->succeeded);
  auto lease = (*kv)->LeaseGrant(seconds(10));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto ttl = (*kv)->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  auto held = (*kv)->Txn({}, {KvOp::Put("/f/held", "x", *lease)});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto events = (*kv)->WaitEvents("/f/", PrefixEnd("/f/"), range->revision, seconds(5));
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->events.size(), 2u);  // /f/c and /f/held
  EXPECT_EQ(events->events[1].kv.key, "/f/held");
  ASSERT_TRUE((*kv)->LeaseRevoke(*lease).ok());
  auto after = (*kv)->Range("/f/held");
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->kvs.empty());

  members = (*kv)->Members();
  ASSERT_TRUE(members.ok());
  ASSERT_EQ(members->size(), 3u);
  int healthy = 0;
  int leaders = 0;
  for (const auto& m : *members) {
    healthy += m.healthy;
    leaders += m.leader;
  }
  EXPECT_EQ(healthy, 2);
  EXPECT_EQ(leaders, 1);
  EXPECT_FALSE((*members)[0].healthy);
  EXPECT_FALSE((*members)[0].error.empty());
  EXPECT_EQ((*members)[0].endpoint, order[0]);
}

// ---- TimedKv ----

TEST(TimedKvTest, TimesEachKindOfCallAndCountsFailures) {
  FakeClock clock;
  MemKv mem({.clock = &clock});
  TimedKv timed(&mem);
  Kv& kv = timed;  // the defaults of Kv's calls
  ASSERT_TRUE(kv.Txn({}, {KvOp::Put("k", "v")}).ok());
  ASSERT_TRUE(kv.Range("k").ok());
  mem.FailNext(1, Status::Unavailable("injected"));
  EXPECT_EQ(kv.Txn({}, {KvOp::Put("k", "w")}).status().code(), Code::kUnavailable);
  EXPECT_EQ(kv.Range("k")->kvs[0].value, "v") << "calls pass through unchanged";
  EXPECT_EQ(timed.calls("txn"), 2u);
  EXPECT_EQ(timed.calls("range"), 2u);
  EXPECT_EQ(timed.calls("lease"), 0u);
  metrics::Registry registry;
  timed.RegisterMetrics(&registry);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("hoard_etcd_request_seconds_count{op=\"txn\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("hoard_etcd_request_errors_total{op=\"txn\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("hoard_etcd_request_errors_total{op=\"range\"} 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace hoard
