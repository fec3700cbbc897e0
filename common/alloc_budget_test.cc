#include "common/alloc_budget.h"

#include <malloc.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "common/msgpack_budget.h"

namespace hoard {
namespace {

// Keeps the compiler from eliding an allocation it can see is unused.
void* Use(void* p) {
  asm volatile("" : : "g"(p) : "memory");
  return p;
}

// Allocates `bytes` through operator new and frees them; throws what it throws.
void NewAndDelete(size_t bytes) { ::operator delete(Use(::operator new(bytes))); }

// Blocks kept until it goes away (without allocating to keep them).
class Held {
 public:
  ~Held() {
    for (int i = 0; i < n_; ++i) ::operator delete(p_[i]);
  }
  void Add(size_t bytes) {
    void* p = Use(::operator new(bytes));
    p_[n_++] = p;
  }

 private:
  void* p_[64];
  int n_ = 0;
};

TEST(AllocBudgetTest, ChargesOperatorNewAndRefusesPastTheLimit) {
  AllocBudget budget(1 << 20);
  EXPECT_TRUE(AllocBudget::Active());
  EXPECT_EQ(budget.charged(), 0u);
  void* p = Use(::operator new(1000));
  EXPECT_EQ(budget.charged(), MallocCost(1000)) << "charged as malloc sizes a block";
  EXPECT_EQ(MallocCost(1000), 1008u);
  EXPECT_EQ(MallocCost(1), 32u);
  ::operator delete(p);
  EXPECT_EQ(budget.charged(), 0u) << "frees are credited";
  EXPECT_EQ(budget.peak(), MallocCost(1000));
  Held held;
  held.Add(500 << 10);
  const size_t before = budget.charged();
  EXPECT_GE(before, 500u << 10);
  EXPECT_THROW(held.Add(600 << 10), AllocBudgetExceeded);
  EXPECT_EQ(budget.charged(), before) << "the refused allocation is not charged";
  EXPECT_TRUE(budget.exceeded());
  // Sticky: code that caught the exception cannot go on allocating.
  EXPECT_THROW(NewAndDelete(1), AllocBudgetExceeded);
  EXPECT_THROW(std::string(100, 'x'), std::bad_alloc);
  EXPECT_LE(budget.charged(), budget.peak());
  EXPECT_LE(budget.peak(), budget.limit());
}

TEST(AllocBudgetTest, TheLiveGrowthIsBoundedNotTheSum) {
  AllocBudget budget(100 << 10);
  for (int i = 0; i < 100; ++i) NewAndDelete(10 << 10);  // 1 MB asked in all, 10 KB at a time
  EXPECT_EQ(budget.charged(), 0u);
  Held held;
  for (int i = 0; i < 9; ++i) held.Add(10 << 10);
  EXPECT_THROW(held.Add(10 << 10), AllocBudgetExceeded) << "100 KiB held at once";
}

TEST(AllocBudgetTest, FreeingOlderBlocksEarnsNothing) {
  Held before;
  before.Add(200 << 10);
  void* old = Use(::operator new(300 << 10));
  AllocBudget budget(100 << 10);
  ::operator delete(old);
  EXPECT_EQ(budget.charged(), 0u);
  Held held;
  EXPECT_THROW(held.Add(200 << 10), AllocBudgetExceeded);
}

TEST(AllocBudgetTest, EveryFormOfNewIsChargedAndEveryDeleteCredited) {
  struct alignas(64) Wide {
    char bytes[64];
  };
  AllocBudget budget(1 << 20);
  // Allocates with `make`, checks the charge, frees with `drop`, checks the credit.
  auto check = [&](const char* form, auto make, auto drop) {
    SCOPED_TRACE(form);  // allocates
    const size_t base = budget.charged();
    void* p = Use(make());
    EXPECT_GT(budget.charged(), base);
    drop(p);
    EXPECT_EQ(budget.charged(), base);
  };
  check("new", [] { return ::operator new(100); }, [](void* p) { ::operator delete(p); });
  check("new, sized delete", [] { return ::operator new(100); }, [](void* p) { ::operator delete(p, 100); });
  check("new[]", [] { return new char[100]; }, [](void* p) { delete[] static_cast<char*>(p); });
  check("aligned new", [] { return new Wide; }, [](void* p) { delete static_cast<Wide*>(p); });
  check("aligned new[]", [] { return new Wide[3]; }, [](void* p) { delete[] static_cast<Wide*>(p); });
  check("nothrow new", [] { return ::operator new(100, std::nothrow); },
        [](void* p) { ::operator delete(p, std::nothrow); });
  check("nothrow new[]", [] { return ::operator new[](100, std::nothrow); },
        [](void* p) { ::operator delete[](p, std::nothrow); });
  check("aligned nothrow new", [] { return ::operator new(100, std::align_val_t(256), std::nothrow); },
        [](void* p) { ::operator delete(p, std::align_val_t(256), std::nothrow); });
  check("aligned new, sized aligned delete",
        [] {
          void* p = ::operator new(100, std::align_val_t(4096));
          EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
          return p;
        },
        [](void* p) { ::operator delete(p, 100, std::align_val_t(4096)); });
  check("new of 0 bytes", [] { return ::operator new(0); }, [](void* p) { ::operator delete(p); });
  EXPECT_FALSE(budget.exceeded());

  // Past the limit the nothrow forms answer nullptr instead of throwing.
  EXPECT_EQ(::operator new(2 << 20, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](1, std::nothrow), nullptr) << "sticky";
  EXPECT_EQ(::operator new(1, std::align_val_t(64), std::nothrow), nullptr);
  EXPECT_THROW(Use(::operator new[](1)), AllocBudgetExceeded);
  EXPECT_THROW(Use(::operator new(1, std::align_val_t(64))), AllocBudgetExceeded);
}

TEST(AllocBudgetTest, EndsWithItsScopeAlsoWhenUnwinding) {
  EXPECT_FALSE(AllocBudget::Active());
  try {
    AllocBudget budget(0);
    NewAndDelete(1);
    FAIL() << "a zero budget allows nothing";
  } catch (const AllocBudgetExceeded& e) {
    EXPECT_STREQ(e.what(), "decoding would take more than 0 bytes");
  }
  EXPECT_FALSE(AllocBudget::Active());
  NewAndDelete(64 << 20);  // no budget: anything goes
  AllocBudget::Charge(SIZE_MAX);  // no-ops without a budget
  AllocBudget::Credit(SIZE_MAX);
}

TEST(AllocBudgetTest, NestedBudgetsTakeTheTighterLimitAndAddUp) {
  AllocBudget outer(1 << 20);
  Held held;
  held.Add(300 << 10);
  const size_t after_first = outer.charged();
  {
    AllocBudget inner(10 << 20);
    EXPECT_EQ(inner.limit(), outer.remaining()) << "never more than the outer one has left";
    held.Add(100 << 10);
    // Below malloc's mmap threshold (128 KiB at first), whose blocks take
    // whole pages: their cost would depend on what the process freed before.
    NewAndDelete(120 << 10);
    EXPECT_EQ(inner.charged(), MallocCost(100 << 10));
    EXPECT_EQ(inner.peak(), MallocCost(100 << 10) + MallocCost(120 << 10));
    EXPECT_EQ(outer.charged(), after_first) << "counted when the inner one ends";
  }
  EXPECT_EQ(outer.charged(), after_first + MallocCost(100 << 10));
  EXPECT_EQ(outer.peak(), after_first + MallocCost(100 << 10) + MallocCost(120 << 10));
  {
    AllocBudget inner(1000);
    EXPECT_EQ(inner.limit(), 1000u) << "a tighter inner limit stands";
    EXPECT_THROW(NewAndDelete(2000), AllocBudgetExceeded);
    EXPECT_TRUE(inner.exceeded());
  }
  EXPECT_FALSE(outer.exceeded()) << "an inner budget's refusal is its own";
  NewAndDelete(1000);
  {
    AllocBudget inner(10 << 20);
    EXPECT_THROW(NewAndDelete(1 << 20), AllocBudgetExceeded) << "the outer one's limit holds inside";
  }
  EXPECT_FALSE(outer.exceeded());
  EXPECT_THROW(NewAndDelete(1 << 20), AllocBudgetExceeded);
  {
    AllocBudget inner(10 << 20);
    EXPECT_TRUE(inner.exceeded()) << "an exceeded outer budget stays exceeded inside";
  }
}

TEST(AllocBudgetTest, OtherThreadsAreUnaffected) {
  std::atomic<bool> other_ok{false}, other_refused{false};
  std::thread t;
  {
    AllocBudget budget(64 << 10);
    // The thread's state is allocated here, on this thread: it is charged.
    t = std::thread([&] {
      EXPECT_FALSE(AllocBudget::Active());
      Held held;
      held.Add(16 << 20);
      other_ok = true;
      AllocBudget own(0);
      try {
        NewAndDelete(1);
      } catch (const AllocBudgetExceeded&) {
        other_refused = true;
      }
    });
    t.join();
    EXPECT_FALSE(budget.exceeded());
    EXPECT_LT(budget.peak(), 64u << 10);
    EXPECT_THROW(NewAndDelete(1 << 20), AllocBudgetExceeded);
  }
  EXPECT_TRUE(other_ok) << "another thread's allocations are not charged here";
  EXPECT_TRUE(other_refused) << "nor are this thread's charged to another's budget";
}

TEST(AllocBudgetTest, RunWithAllocBudgetHandsBackTheException) {
  size_t charged = 0;
  Held held;
  std::exception_ptr e = RunWithAllocBudget(1 << 20, [&] { held.Add(1000); }, &charged);
  EXPECT_FALSE(e);
  EXPECT_EQ(charged, MallocCost(1000));
  EXPECT_STREQ(ExceptionMessage(e), "");

  e = RunWithAllocBudget(1 << 20, [] { std::vector<char> v(2 << 20); Use(v.data()); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(IsAllocBudgetExceeded(e));
  EXPECT_STREQ(ExceptionMessage(e), "decoding would take more than 1048576 bytes");
  EXPECT_FALSE(AllocBudget::Active());

  e = RunWithAllocBudget(1 << 20, [] { throw std::runtime_error("not mine"); });
  ASSERT_TRUE(e);
  EXPECT_FALSE(IsAllocBudgetExceeded(e));
  EXPECT_STREQ(ExceptionMessage(e), "not mine");
  EXPECT_THROW(std::rethrow_exception(e), std::runtime_error);
}

TEST(AllocBudgetTest, DecodeBudgetIsSixteenTimesTheInputPlusAFloor) {
  EXPECT_EQ(DecodeBudget(0), kDecodeBudgetFloor);
  EXPECT_EQ(DecodeBudget(1 << 20), (16u << 20) + kDecodeBudgetFloor);
  EXPECT_EQ(DecodeBudget(SIZE_MAX / 4), SIZE_MAX) << "saturates";
}

// ---- msgpack's tree (common/msgpack_budget.h) ------------------------------

const msgpack::unpack_limit kLimits(/*array=*/1u << 16, /*map=*/1u << 12, /*str=*/1u << 20, /*bin=*/1u << 24,
                                    /*ext=*/0, /*depth=*/8);

// Shapes that exercise the zone: tiny elements, large arrays (a chunk of its
// own, doubled), strings and bins copied, maps.
std::vector<std::string> Shapes() {
  std::vector<std::string> out;
  {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(40);
    for (int r = 0; r < 40; ++r) {
      pk.pack_array(65535);
      for (int i = 0; i < 65535; ++i) pk.pack_map(0);
    }
    out.emplace_back(b.data(), b.size());
  }
  {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(20000);
    for (int i = 0; i < 20000; ++i) {
      pk.pack_map(3);
      pk.pack(std::string("id"));
      pk.pack(uint64_t(i) * 7919);
      pk.pack(std::string("name"));
      pk.pack(std::string(i % 40, 'n'));
      pk.pack(std::string("blob"));
      pk.pack(std::vector<char>(i % 300, 'b'));
    }
    out.emplace_back(b.data(), b.size());
  }
  {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(3);
    pk.pack(std::vector<uint64_t>(60000, 1ull << 40));
    pk.pack(std::string(900000, 's'));
    pk.pack(std::vector<uint32_t>(3000, 7));
    out.emplace_back(b.data(), b.size());
  }
  return out;
}

size_t MallocInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

#if defined(__SANITIZE_ADDRESS__)
#define HOARD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOARD_ASAN 1
#endif
#endif

TEST(MsgpackBudgetTest, MsgpackChargeMatchesTheZone) {
#ifdef HOARD_ASAN
  GTEST_SKIP() << "ASan's allocator does not keep glibc's accounting";
#endif
  for (const std::string& bytes : Shapes()) {
    const size_t charge = MsgpackTreeCharge(bytes.data(), bytes.size(), kLimits);
    const size_t before = MallocInUse();
    msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), nullptr, nullptr, kLimits);
    const size_t zone = MallocInUse() - before;  // the parser's stacks are freed again
    // Large blocks are mmapped in whole pages: up to 4 KiB each more than
    // malloc's chunk, and the model does not know which.
    EXPECT_GE(charge + 16 * 1024, zone) << bytes.size() << "-byte input";
    EXPECT_LE(charge, zone + zone / 50) << bytes.size() << "-byte input";
  }
}

TEST(MsgpackBudgetTest, UnpackChargedChargesTheTreeBeforeBuildingIt) {
  for (const std::string& bytes : Shapes()) {
    const size_t charge = MsgpackTreeCharge(bytes.data(), bytes.size(), kLimits);
    {
      AllocBudget budget(SIZE_MAX);
      msgpack::object_handle h = UnpackCharged(bytes.data(), bytes.size(), kLimits);
      EXPECT_EQ(budget.charged(), charge) << "the parsers' stacks are credited back, the zone never";
      EXPECT_LE(budget.peak(), charge + 16 * 1024) << "the parsers' stacks";
    }
    AllocBudget budget(charge - 1);
    EXPECT_THROW(UnpackCharged(bytes.data(), bytes.size(), kLimits), AllocBudgetExceeded);
  }
}

TEST(MsgpackBudgetTest, LimitsStopTheWalkAndMsgpackReportsThem) {
  // An array header claiming 4 billion entries: msgpack refuses it; the walk
  // must not charge 96 GB for it first.
  const std::string huge("\xdd\xff\xff\xff\xff", 5);
  EXPECT_LT(MsgpackTreeCharge(huge.data(), huge.size(), kLimits), 16u * 1024);
  AllocBudget budget(1 << 20);
  EXPECT_THROW(UnpackCharged(huge.data(), huge.size(), kLimits), msgpack::array_size_overflow);
  // Nesting deeper than the limit.
  const std::string deep(100, '\x91');
  EXPECT_THROW(UnpackCharged(deep.data(), deep.size(), kLimits), msgpack::depth_size_overflow);
  // Cut short.
  const std::string cut("\x93\x01", 2);
  EXPECT_THROW(UnpackCharged(cut.data(), cut.size(), kLimits), msgpack::insufficient_bytes);
  EXPECT_FALSE(budget.exceeded());
}

}  // namespace
}  // namespace hoard
