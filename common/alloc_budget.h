// File: common/alloc_budget.h
//
// A decode budget: a cap on what a thread may allocate while it decodes
// untrusted bytes, so that no input of N bytes makes a daemon allocate more
// than DecodeBudget(N) = 16 N + 64 KiB for it.
//
// Why: msgpack decodes a 1-byte empty map into a 24-byte object, and a body
// converts it into a whole struct. A member's 16 MB Heartbeat of empty maps
// took the coordinator 1.4 GB while it decoded, on each of 4 workers at once;
// decoder limits bound each array and string, not the total. Every decoder of
// bytes from the network or a daemon's disk (proto/envelope.h DecodeMessage
// and BodyAs, common/msgpack_codec.h UnpackState, StateStore's snapshot,
// striping/manifest.h Parse and Load) runs under an AllocBudget of
// DecodeBudget(its input's size) and turns AllocBudgetExceeded into the error
// it gives any bad input (InvalidArgument for messages, Corruption for files).
//
//   std::exception_ptr failed = RunWithAllocBudget(DecodeBudget(len), [&] {
//     UnpackCharged(data, len, limits).get().convert(out);
//   });
//
// How: this file's .cc replaces the global operator new and delete (every
// form). While an AllocBudget is active on the calling thread, operator new
// charges each block to the innermost budget as glibc's malloc sizes it (the
// request plus an 8-byte header, rounded up to 16, at least 32; checked before
// the block is taken, corrected to the block's real size after), and throws
// AllocBudgetExceeded instead of allocating past the limit; the nothrow forms
// return nullptr. operator delete credits what it frees, so a budget bounds
// the live growth of the heap, not the sum of every allocation: msgpack's
// MSGPACK_DEFINE_MAP builds a throwaway std::map of the keys for every struct
// it converts, which summed would double what a body seems to cost. A block
// is credited as malloc_usable_size sees it, so sized and unsized deletes
// (clang does not size them by default) count alike. Allocations operator new
// never sees (msgpack's zone calls malloc) are charged by their owner with
// AllocBudget::Charge before they are made, and never credited
// (common/msgpack_budget.h). Threads without a budget pay one thread-local
// load per allocation and per free.
//
// Sanitizers (why the replacement stays in force under them): ASan, TSan
// and the others define operator new too, but weakly (clang's runtime
// archives) or in a shared library (gcc's), so a program's own definition
// wins and the budget holds in the ASan unit-test and libFuzzer builds as in
// production: fuzz_message refuses the 16 MB message below in 1.6 s and
// 93 MB under ASan, where the fuzzers' 2 GB limit would otherwise be the
// first to stop it. The replacements allocate with malloc, posix_memalign
// and free, which the sanitizers intercept, so overflows, use-after-free and
// leaks are still reported; what ASan no longer reports is new/free and
// new[]/delete mismatches. The alternatives were worse: turning the
// replacement off under sanitizers (__SANITIZE_ADDRESS__) would leave the
// fuzzed code without the budget it runs under in production, and charging
// only msgpack's zone would miss the structs a body converts into, half of
// what the hostile Heartbeat cost (DecodeBudgetTest.TheStructsAreChargedToo).
//
// Every program that links hoard_common has the replacements, decoder or
// not: they sit in the translation unit that defines AllocBudget, and the
// linker takes that member of the static library to resolve operator new
// before it reaches the C++ library.
//
// Why 16x: msgpack objects take 24 bytes each and 48 per map entry, and the
// structs come on top, so real messages take 2x to 8x their bytes, lists of
// tiny maps up to 12x; the margins, measured (peak charge, its multiple of
// the input, and how many times over the budget holds it) by
// DecodeBudgetTest in proto/envelope_test.cc,
// StateStoreTest.DecodingStaysWithinTheBudget and
// CkptTableTest.SnapshotsDecodeWithinTheBudget:
//   - CkptWorkReply of 16,384 rebuild entries (2 MB)      6.3x  2.6x to spare
//   - ClusterStatusReply, 1,000 datasets on 64 nodes      4.8x  3.3x
//   - CkptCommit of 65,536 checksums                      4.5x  3.6x
//   - CkptListReply of 5,000 files of 75 chunks (14 MB)   7.0x  2.3x
//   - Heartbeat, 20 reports of 1M chunks (10 MB)          2.1x  7.8x
//   - a drop page of 4,096 tiny {id, gen} maps, the
//     worst shape a real message has                     12.3x  1.4x
//   - the coordinator's state                             5.6x  2.9x
//   - a checkpoint namespace snapshot, 2,000 or 20,000
//     files (the same per entry, so 10M entries too)      8.2x  1.96x
//   - a ManifestPart: its 8 MiB is the payload frame, never decoded; the
//     header costs what a Ping does, 8.8 KB, mostly msgpack's first zone
//     chunk, which the 64 KiB floor covers 7x over.
// The hostile 16 MB Heartbeat of 250 x 65,535 empty maps would take 32x for
// its msgpack tree alone (1.4 GB before, with its structs): it is refused
// during the walk that charges the tree, having allocated nothing for it.
//
// Thread-safety: a budget belongs to the thread that made it and counts only
// that thread's allocations and frees; other threads are unaffected (a block
// freed on another thread is credited to that thread's budget, if it has
// one; decoders do not hand blocks between threads). Budgets nest: an inner
// one's limit is at most what its outer one has left, and what it has charged counts towards the outer one when it
// ends. Destroy in reverse order of construction (they are scoped objects).
//
// Invariants: charged() <= peak() <= limit(); a free never takes charged()
// below 0 (freeing blocks from before the budget earns nothing); once
// exceeded(), every further charge under the budget throws too, so code that
// catches the exception and carries on cannot go on allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

namespace hoard {

inline constexpr size_t kDecodeBudgetFactor = 16;
inline constexpr size_t kDecodeBudgetFloor = 64u << 10;

// kDecodeBudgetFactor * input_bytes + kDecodeBudgetFloor, saturating.
size_t DecodeBudget(size_t input_bytes);

// What glibc's malloc takes for a request of `bytes`: the unit of charges.
constexpr size_t MallocCost(size_t bytes) {
  const size_t chunk = (bytes + 8 + 15) & ~size_t{15};
  return chunk < bytes ? SIZE_MAX : chunk < 32 ? 32 : chunk;
}

// Thrown by a charge past a budget. A std::bad_alloc, so callers that catch
// std::exception report it like any decode failure; its what() says
// "decoding would take more than N bytes" (kept in the object: building a
// string would allocate).
class AllocBudgetExceeded : public std::bad_alloc {
 public:
  explicit AllocBudgetExceeded(size_t limit);
  const char* what() const noexcept override { return message_; }

 private:
  char message_[64];
};

class AllocBudget {
 public:
  // Makes this the calling thread's budget until it is destroyed.
  explicit AllocBudget(size_t limit_bytes);
  ~AllocBudget();
  AllocBudget(const AllocBudget&) = delete;
  AllocBudget& operator=(const AllocBudget&) = delete;

  // The limit in force: the one asked for, or less under an outer budget.
  size_t limit() const { return limit_; }
  // Charged and not credited back, including by budgets nested in this one
  // that ended: the heap's growth under this budget.
  size_t charged() const { return charged_; }
  // The most charged() has been.
  size_t peak() const { return peak_; }
  size_t remaining() const { return limit_ - charged_; }
  bool exceeded() const { return exceeded_; }

  // Charges `bytes` to the calling thread's innermost budget; throws
  // AllocBudgetExceeded (charging nothing) if they do not fit. No-op without
  // a budget. For allocations that do not go through operator new.
  static void Charge(size_t bytes);
  // Credits `bytes` back (at most what is charged). No-op without a budget.
  static void Credit(size_t bytes);
  // Whether the calling thread has a budget.
  static bool Active();

 private:
  void Take(size_t bytes);

  AllocBudget* const outer_;
  size_t limit_;
  size_t charged_ = 0;
  size_t peak_ = 0;
  bool exceeded_;
};

// Runs fn() under an AllocBudget of `limit` bytes and returns the exception
// it threw, or nullptr. The exception is caught while the budget is active
// (taking it costs no allocation) and left to the caller to describe after
// the budget ended: under an exceeded budget, building the message would
// throw again.
// `charged`, if given, gets what the budget had charged when fn returned.
template <typename Fn>
std::exception_ptr RunWithAllocBudget(size_t limit, Fn&& fn, size_t* charged = nullptr) {
  AllocBudget budget(limit);
  std::exception_ptr failure;
  try {
    fn();
  } catch (...) {
    failure = std::current_exception();
  }
  if (charged != nullptr) *charged = budget.charged();
  return failure;
}

// The message of an exception RunWithAllocBudget returned ("" for none).
const char* ExceptionMessage(const std::exception_ptr& e);
// Whether it is an AllocBudgetExceeded.
bool IsAllocBudgetExceeded(const std::exception_ptr& e);

}  // namespace hoard
