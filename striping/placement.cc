// File: striping/placement.cc
//
// Weighted rendezvous hashing, tuned for being called once per chunk over
// millions of chunks.
//
// The score of (chunk, member) is weight / -ln(u), u in (0,1) derived from
// Mix64(placement_hash, name_hash). The exact arithmetic below is part of the
// cluster's protocol: every node, client and coordinator must rank members
// identically, so changing the hash, the u mapping or the tie-break moves
// nearly every chunk. (It also assumes every process uses the same libm;
// log/log1p differing by an ulp could only matter for scores that tie to
// within an ulp, which do not occur in practice.)
//
// Speed: a log per member dominates the cost. Since -ln(u) >= 1 - u, a member
// whose cheap upper bound weight / (1 - u) is already below the current k-th
// best score cannot enter the top k, and its log is skipped. Scanning N members
// in any fixed order, only O(k log N) of them survive that test (measured: 5.7
// logs per call for N=100, k=1; 15 for k=3), so Owners() costs N hash mixes
// plus a handful of logs.
#include "striping/placement.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/hash.h"

namespace hoard {
namespace {

constexpr uint64_t kTwo52 = 1ull << 52;
constexpr uint64_t kTwo53 = 1ull << 53;

// Owners() keeps the running top k in arrays on the stack up to this k.
// Replication factors are single digits; larger k falls back to a per-thread
// scratch buffer, which allocates only the first time a thread needs it.
constexpr size_t kInlineOwners = 16;

// A skipped member's true score is at most bound / kPruneSlack. The slack is
// far above the few ulps of rounding in the bound and in the score, so a
// member is skipped only when its computed score would be strictly lower than
// the k-th best: pruning never changes the result, ties included.
constexpr double kPruneSlack = 1 + 1e-9;

// Members that can own chunks. Non-finite weights are refused too: an infinite
// score would tie with any other infinite score and defeat the pruning bound.
inline bool Eligible(double weight) { return weight > 0 && std::isfinite(weight); }

// x is the top 53 bits of the pair hash and u = (x + 1/2) / 2^53, so u is
// uniform over 2^53 distinct values strictly inside (0,1).

// 1 - u, to within a relative 2^-53 (exact when u >= 1/2).
inline double OneMinusU(uint64_t x) { return (static_cast<double>(kTwo53 - x) - 0.5) * 0x1p-53; }

// -ln(u). For u >= 1/2 the value (x + 1/2) needs 54 bits and would round,
// possibly to u == 1 (score infinite) and in any case losing the low bits of
// 1 - u, which are exactly the bits that rank the winners (they are the
// members with u closest to 1). So that half goes through log1p of the exact
// 1 - u instead.
inline double NegLogU(uint64_t x) {
  if (x < kTwo52) return -std::log((static_cast<double>(x) + 0.5) * 0x1p-53);
  return -std::log1p(-OneMinusU(x));
}

inline uint64_t PairBits(uint64_t placement_hash, uint64_t name_hash) {
  return Mix64(placement_hash, name_hash) >> 11;
}

// Total order on (score, member): higher score first, then smaller name; the
// index only separates duplicate names, which the contract forbids.
inline bool Outranks(double score_a, uint32_t a, double score_b, uint32_t b,
                     const std::vector<PlacementMember>& members) {
  if (score_a != score_b) return score_a > score_b;
  int c = members[a].name.compare(members[b].name);
  return c != 0 ? c < 0 : a < b;
}

}  // namespace

Placement::Placement(std::vector<PlacementMember> members) : members_(std::move(members)) {
  name_hashes_.reserve(members_.size());
  for (const PlacementMember& m : members_) name_hashes_.push_back(Hash64(m.name));
}

void Placement::Owners(uint64_t placement_hash, int k, std::vector<uint32_t>* out) const {
  out->clear();
  if (k <= 0 || members_.empty()) return;
  const size_t want = std::min(static_cast<size_t>(k), members_.size());

  // The running top k, best first: indices live in `out` itself, scores beside.
  double inline_scores[kInlineOwners];
  double* scores = inline_scores;
  if (want > kInlineOwners) {
    thread_local std::vector<double> scratch;
    if (scratch.size() < want) scratch.resize(want);
    scores = scratch.data();
  }
  out->resize(want);
  uint32_t* owners = out->data();

  size_t n = 0;
  double kth = 0;  // scores[want - 1] once full; a local, so the hot loop need not reload it
  const uint32_t count = static_cast<uint32_t>(members_.size());
  for (uint32_t i = 0; i < count; ++i) {
    const double w = members_[i].weight;
    if (!Eligible(w)) continue;
    const uint64_t x = PairBits(placement_hash, name_hashes_[i]);
    const bool full = n == want;
    if (full && OneMinusU(x) * kth >= w * kPruneSlack) continue;
    const double s = w / NegLogU(x);
    if (full && !Outranks(s, i, kth, owners[n - 1], members_)) continue;
    // Insertion into a sorted array of k entries: k is small, and this runs
    // only for the few members that survive the bound above.
    size_t pos = full ? n - 1 : n++;
    while (pos > 0 && Outranks(s, i, scores[pos - 1], owners[pos - 1], members_)) {
      scores[pos] = scores[pos - 1];
      owners[pos] = owners[pos - 1];
      --pos;
    }
    scores[pos] = s;
    owners[pos] = i;
    kth = scores[n - 1];
  }
  out->resize(n);
}

bool Placement::IsOwner(uint64_t placement_hash, int k, uint32_t index) const {
  if (k <= 0 || index >= members_.size()) return false;
  const double w = members_[index].weight;
  if (!Eligible(w)) return false;
  const double s = w / NegLogU(PairBits(placement_hash, name_hashes_[index]));

  // `index` owns the chunk iff fewer than k members outrank it. An owner has a
  // high score, so most rivals fall to the cheap bound; a non-owner has a low
  // one, so k rivals that beat it turn up quickly.
  int outranked_by = 0;
  const uint32_t count = static_cast<uint32_t>(members_.size());
  for (uint32_t j = 0; j < count; ++j) {
    if (j == index) continue;
    const double wj = members_[j].weight;
    if (!Eligible(wj)) continue;
    const uint64_t x = PairBits(placement_hash, name_hashes_[j]);
    if (OneMinusU(x) * s >= wj * kPruneSlack) continue;
    if (Outranks(wj / NegLogU(x), j, s, index, members_) && ++outranked_by >= k) return false;
  }
  return true;
}

}  // namespace hoard
