#include "striping/placement.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/alloc_budget.h"
#include "common/hash.h"
#include "striping/chunk_key.h"

namespace hoard {
namespace {

constexpr size_t kChunks = 100'000;

// 1,000 files of 100 chunks, like a sharded dataset: deterministic, so the
// statistical checks below give the same numbers on every run.
const std::vector<ChunkKey>& TestChunks() {
  static const std::vector<ChunkKey> chunks = [] {
    std::vector<ChunkKey> v;
    v.reserve(kChunks);
    for (int f = 0; f < 1000; ++f) {
      char path[64];
      std::snprintf(path, sizeof path, "train/shard-%05d.tar", f);
      FileKey file = MakeFileKey(20240601, path, 400ull << 20, 1'700'000'000'000'000'000 + f);
      for (uint32_t i = 0; i < 100; ++i) v.push_back(ChunkKey{file, i});
    }
    return v;
  }();
  return chunks;
}

std::string NodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "node-%03d", i);
  return buf;
}

std::vector<PlacementMember> EqualMembers(int n) {
  std::vector<PlacementMember> m;
  for (int i = 0; i < n; ++i) m.push_back({NodeName(i), 1.0});
  return m;
}

// Owner names of every test chunk, so placements with different member lists
// (and so different indices) can be compared.
std::vector<std::vector<std::string>> OwnerNames(const Placement& p, int k) {
  std::vector<std::vector<std::string>> all;
  all.reserve(kChunks);
  std::vector<uint32_t> owners;
  for (const ChunkKey& c : TestChunks()) {
    p.Owners(c.PlacementHash(), k, &owners);
    std::vector<std::string> names;
    for (uint32_t o : owners) names.push_back(p.members()[o].name);
    all.push_back(std::move(names));
  }
  return all;
}

// Checks `counts` against a multinomial with cell probabilities `p` and
// returns the worst relative deviation |count - mean| / mean, for reporting.
// Bounds, both about a one-in-a-million event for a fair hash: every cell
// within 5 standard deviations of its mean, and Pearson's chi-square below its
// 1 - 1e-6 quantile (Wilson-Hilferty approximation), which catches a bias
// spread over many cells that no single cell shows.
double ExpectMultinomial(const std::vector<uint64_t>& counts, const std::vector<double>& p,
                         const std::string& what) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  double chi2 = 0, worst = 0, worst_bound = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double mean = total * p[i];
    const double sd = std::sqrt(total * p[i] * (1 - p[i]));
    const double dev = std::abs(counts[i] - mean);
    EXPECT_LE(dev, 5 * sd) << what << ": cell " << i << " has " << counts[i] << ", expected "
                           << mean << " +- " << 5 * sd;
    chi2 += (counts[i] - mean) * (counts[i] - mean) / mean;
    worst = std::max(worst, dev / mean);
    worst_bound = std::max(worst_bound, 5 * sd / mean);
  }
  const double df = counts.size() - 1.0;
  const double z = 4.75;  // standard normal 1 - 1e-6 quantile
  const double c = 1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df));
  const double chi2_bound = df * c * c * c;
  EXPECT_LT(chi2, chi2_bound) << what;
  std::cout << "[stats] " << what << ": worst cell off by " << 100 * worst
            << "% of its mean (bound " << 100 * worst_bound << "%), chi2 " << chi2 << " on " << df
            << " df (bound " << chi2_bound << ")\n";
  return worst;
}

std::vector<uint64_t> PrimaryCounts(const Placement& p) {
  std::vector<uint64_t> counts(p.members().size());
  std::vector<uint32_t> owners;
  for (const ChunkKey& c : TestChunks()) {
    p.Owners(c.PlacementHash(), 1, &owners);
    ++counts[owners.at(0)];
  }
  return counts;
}

// The specification, written independently and slowly: score every eligible
// member in long double (x + 1/2 is exact there), sort them all, take k.
std::vector<std::string> ReferenceOwners(const std::vector<PlacementMember>& members, uint64_t hash,
                                         int k) {
  std::vector<std::pair<long double, std::string>> scored;
  for (const PlacementMember& m : members) {
    if (!(m.weight > 0) || !std::isfinite(m.weight)) continue;
    const uint64_t x = Mix64(hash, Hash64(m.name)) >> 11;
    const long double u = (static_cast<long double>(x) + 0.5L) / 9007199254740992.0L;  // 2^53
    scored.push_back({-m.weight / std::log(u), m.name});
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> names;
  for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(std::max(k, 0)); ++i) {
    names.push_back(scored[i].second);
  }
  return names;
}

TEST(PlacementTest, BalancedOverEqualNodes) {
  for (int n : {3, 10, 100}) {
    Placement p(EqualMembers(n));
    ExpectMultinomial(PrimaryCounts(p), std::vector<double>(n, 1.0 / n),
                      "100k chunks over " + std::to_string(n) + " equal nodes");
  }
}

TEST(PlacementTest, SharesFollowWeights) {
  Placement p({{"small", 1}, {"medium", 2}, {"large", 4}});
  std::vector<uint64_t> counts = PrimaryCounts(p);
  ExpectMultinomial(counts, {1.0 / 7, 2.0 / 7, 4.0 / 7}, "weights 1:2:4");
  std::cout << "[stats] weights 1:2:4 shares: " << counts[0] / double(kChunks) << " "
            << counts[1] / double(kChunks) << " " << counts[2] / double(kChunks)
            << " (ideal 0.1429 0.2857 0.5714)\n";

  // A mixed fleet: 30 nodes with capacities 100, 250 and 1000 GiB.
  std::vector<PlacementMember> fleet;
  const double caps[] = {100, 250, 1000};
  double sum = 0;
  for (int i = 0; i < 30; ++i) {
    fleet.push_back({NodeName(i), caps[i % 3]});
    sum += caps[i % 3];
  }
  std::vector<double> ideal;
  for (const PlacementMember& m : fleet) ideal.push_back(m.weight / sum);
  ExpectMultinomial(PrimaryCounts(Placement(fleet)), ideal, "30 nodes weighted 100/250/1000");
}

TEST(PlacementTest, JoinMovesOnlyChunksTheNewNodeTakes) {
  std::vector<PlacementMember> ten = EqualMembers(10);
  std::vector<PlacementMember> eleven = EqualMembers(11);
  const auto before = OwnerNames(Placement(ten), 1);
  const auto after = OwnerNames(Placement(eleven), 1);
  size_t moved = 0;
  for (size_t c = 0; c < kChunks; ++c) {
    if (before[c] == after[c]) continue;
    ++moved;
    EXPECT_EQ(after[c][0], NodeName(10)) << "chunk " << c << " moved between old nodes";
  }
  const double frac = moved / double(kChunks), ideal = 1.0 / 11;
  std::cout << "[stats] join 10->11: moved " << frac << " of chunks (ideal " << ideal << ")\n";
  EXPECT_NEAR(frac, ideal, 0.1 * ideal);

  // A node twice as big takes twice the share: 2/12 of the chunks.
  eleven.back().weight = 2;
  const auto after_big = OwnerNames(Placement(eleven), 1);
  moved = 0;
  for (size_t c = 0; c < kChunks; ++c) {
    if (before[c] == after_big[c]) continue;
    ++moved;
    EXPECT_EQ(after_big[c][0], NodeName(10));
  }
  std::cout << "[stats] join of a weight-2 node into 10: moved " << moved / double(kChunks)
            << " (ideal " << 2.0 / 12 << ")\n";
  EXPECT_NEAR(moved / double(kChunks), 2.0 / 12, 0.1 * 2.0 / 12);
}

TEST(PlacementTest, LeaveMovesOnlyTheLeaversChunksAndSpreadsThem) {
  std::vector<PlacementMember> ten = EqualMembers(10);
  const std::string leaver = ten[3].name;
  std::vector<PlacementMember> nine = ten;
  nine.erase(nine.begin() + 3);
  Placement p9(nine);
  const auto before = OwnerNames(Placement(ten), 1);
  const auto after = OwnerNames(p9, 1);
  std::map<std::string, uint64_t> heirs;
  size_t moved = 0;
  for (size_t c = 0; c < kChunks; ++c) {
    if (before[c][0] != leaver) {
      EXPECT_EQ(before[c], after[c]) << "chunk " << c << " moved though its owner stayed";
      continue;
    }
    ++moved;
    ++heirs[after[c][0]];
  }
  std::cout << "[stats] leave 10->9: moved " << moved / double(kChunks) << " of chunks\n";
  std::vector<uint64_t> counts;
  for (const PlacementMember& m : nine) counts.push_back(heirs[m.name]);
  ExpectMultinomial(counts, std::vector<double>(9, 1.0 / 9), "the leaver's chunks over 9 heirs");
}

TEST(PlacementTest, ReplicasAreDistinctAndExtendThePrimary) {
  Placement p(EqualMembers(10));
  std::vector<uint32_t> k1, k2, k3;
  for (const ChunkKey& c : TestChunks()) {
    const uint64_t h = c.PlacementHash();
    p.Owners(h, 1, &k1);
    p.Owners(h, 2, &k2);
    p.Owners(h, 3, &k3);
    ASSERT_EQ(k2.size(), 2u);
    ASSERT_EQ(k3.size(), 3u);
    EXPECT_NE(k2[0], k2[1]);
    EXPECT_EQ(std::set<uint32_t>(k3.begin(), k3.end()).size(), 3u);
    // Ranking is one order, so the k owners are a prefix of the k+1 owners:
    // raising the replication factor only adds copies.
    EXPECT_EQ(k2[0], k1[0]);
    EXPECT_TRUE(std::equal(k2.begin(), k2.end(), k3.begin()));
  }
}

TEST(PlacementTest, ReplicatedSlotsAreBalanced) {
  for (int k : {2, 3}) {
    Placement p(EqualMembers(10));
    std::vector<uint64_t> primary(10), any(10);
    std::vector<uint32_t> owners;
    for (const ChunkKey& c : TestChunks()) {
      p.Owners(c.PlacementHash(), k, &owners);
      ++primary[owners[0]];
      for (uint32_t o : owners) ++any[o];
    }
    ExpectMultinomial(primary, std::vector<double>(10, 0.1), "primaries, k=" + std::to_string(k));
    // Each node holds a copy of a chunk with probability k/10, independently
    // per chunk, so its count is Binomial(chunks, k/10).
    const double q = k / 10.0;
    for (int i = 0; i < 10; ++i) {
      const double mean = kChunks * q, sd = std::sqrt(kChunks * q * (1 - q));
      EXPECT_LE(std::abs(any[i] - mean), 5 * sd) << "node " << i << " k=" << k;
    }
  }
}

TEST(PlacementTest, ReplicatedJoinDisplacesAtMostOneOwner) {
  for (int k : {2, 3}) {
    const auto before = OwnerNames(Placement(EqualMembers(10)), k);
    const auto after = OwnerNames(Placement(EqualMembers(11)), k);
    const std::string joiner = NodeName(10);
    size_t changed_chunks = 0, changed_slots = 0;
    for (size_t c = 0; c < kChunks; ++c) {
      std::vector<std::string> survivors;
      for (const std::string& o : after[c]) {
        if (o != joiner) survivors.push_back(o);
      }
      // Old owners keep their relative order; at most the lowest-ranked one
      // is pushed out, and only by the joiner.
      ASSERT_GE(survivors.size(), static_cast<size_t>(k - 1));
      EXPECT_TRUE(std::equal(survivors.begin(), survivors.end(), before[c].begin())) << c;
      if (after[c] != before[c]) ++changed_chunks;
      if (survivors.size() < static_cast<size_t>(k)) ++changed_slots;
    }
    const double chunk_frac = changed_chunks / double(kChunks);
    const double slot_frac = changed_slots / double(k * kChunks);
    std::cout << "[stats] join 10->11 with k=" << k << ": owner set changed for " << chunk_frac
              << " of chunks (ideal k/11 = " << k / 11.0 << "), " << slot_frac
              << " of owner slots (ideal 1/11 = " << 1 / 11.0 << ")\n";
    EXPECT_NEAR(chunk_frac, k / 11.0, 0.1 * k / 11.0);
    EXPECT_NEAR(slot_frac, 1 / 11.0, 0.1 / 11.0);
    EXPECT_LE(slot_frac, 2.0 / 10);
  }
}

TEST(PlacementTest, MemberOrderDoesNotMatter) {
  std::vector<PlacementMember> members;
  for (int i = 0; i < 20; ++i) members.push_back({NodeName(i), 1.0 + (i % 4)});
  std::vector<PlacementMember> reversed(members.rbegin(), members.rend());
  std::vector<PlacementMember> interleaved;
  for (int i = 0; i < 20; i += 2) interleaved.push_back(members[i]);
  for (int i = 1; i < 20; i += 2) interleaved.push_back(members[i]);
  for (int k : {1, 2, 3}) {
    const auto base = OwnerNames(Placement(members), k);
    EXPECT_EQ(base, OwnerNames(Placement(reversed), k)) << "k=" << k;
    EXPECT_EQ(base, OwnerNames(Placement(interleaved), k)) << "k=" << k;
  }
}

TEST(PlacementTest, MatchesTheSlowReference) {
  // The pruned top-k selection must pick exactly what scoring and sorting
  // every member picks, for equal, mixed and extreme weights and for k
  // beyond the inline buffer.
  std::vector<std::vector<PlacementMember>> configs;
  configs.push_back(EqualMembers(100));
  std::vector<PlacementMember> mixed;
  for (int i = 0; i < 40; ++i) mixed.push_back({NodeName(i), std::pow(1.5, i % 12)});
  configs.push_back(mixed);
  configs.push_back({{"tiny", 1e-6}, {"huge", 1e6}, {"one", 1}, {"zero", 0}, {"also-one", 1}});
  for (const auto& members : configs) {
    Placement p(members);
    std::vector<uint32_t> owners;
    for (size_t c = 0; c < kChunks; c += 5) {
      const uint64_t h = TestChunks()[c].PlacementHash();
      for (int k : {1, 2, 3, 5, 20}) {
        p.Owners(h, k, &owners);
        std::vector<std::string> names;
        for (uint32_t o : owners) names.push_back(members[o].name);
        ASSERT_EQ(names, ReferenceOwners(members, h, k)) << "chunk " << c << " k=" << k;
      }
    }
  }
}

TEST(PlacementTest, IsOwnerAgreesWithOwners) {
  std::vector<PlacementMember> members;
  for (int i = 0; i < 25; ++i) members.push_back({NodeName(i), i % 5 == 0 ? 0.0 : 1.0 + (i % 3)});
  Placement p(members);
  std::vector<uint32_t> owners;
  for (size_t c = 0; c < kChunks; c += 10) {
    const uint64_t h = TestChunks()[c].PlacementHash();
    for (int k : {1, 2, 3, 19, 20, 21, 100}) {
      p.Owners(h, k, &owners);
      for (uint32_t i = 0; i < members.size(); ++i) {
        const bool listed = std::find(owners.begin(), owners.end(), i) != owners.end();
        ASSERT_EQ(p.IsOwner(h, k, i), listed) << "chunk " << c << " k=" << k << " member " << i;
      }
    }
    EXPECT_FALSE(p.IsOwner(h, 3, static_cast<uint32_t>(members.size())));
    EXPECT_FALSE(p.IsOwner(h, 0, 1));
  }
}

TEST(PlacementTest, ZeroWeightMembersNeverOwn) {
  Placement p({{"a", 1}, {"off", 0}, {"b", 1}, {"negative", -3}, {"c", 2}});
  std::vector<uint32_t> owners;
  for (const ChunkKey& c : TestChunks()) {
    p.Owners(c.PlacementHash(), 5, &owners);
    ASSERT_EQ(owners.size(), 3u);
    for (uint32_t o : owners) {
      EXPECT_GT(p.members()[o].weight, 0);
    }
    EXPECT_FALSE(p.IsOwner(c.PlacementHash(), 5, 1));
    EXPECT_FALSE(p.IsOwner(c.PlacementHash(), 5, 3));
  }
}

TEST(PlacementTest, NonFiniteWeightsNeverOwn) {
  // NaN is neither > 0 nor <= 0, and an infinite weight would make scores
  // tie; both are configuration errors, treated like a zero weight.
  Placement p({{"a", 1},
               {"nan", std::numeric_limits<double>::quiet_NaN()},
               {"inf", std::numeric_limits<double>::infinity()}});
  for (size_t c = 0; c < 1000; ++c) {
    EXPECT_EQ(p.Owners(TestChunks()[c], 3), std::vector<uint32_t>{0});
  }
}

TEST(PlacementTest, KBeyondMembersReturnsEveryPositiveMember) {
  Placement p({{"a", 1}, {"b", 3}, {"off", 0}, {"c", 0.5}});
  std::vector<uint32_t> owners;
  for (size_t c = 0; c < 1000; ++c) {
    const uint64_t h = TestChunks()[c].PlacementHash();
    p.Owners(h, 100, &owners);
    EXPECT_EQ(std::set<uint32_t>(owners.begin(), owners.end()), (std::set<uint32_t>{0, 1, 3}));
    std::vector<uint32_t> top3;
    p.Owners(h, 3, &top3);
    EXPECT_EQ(owners, top3);
    for (uint32_t i : {0u, 1u, 3u}) EXPECT_TRUE(p.IsOwner(h, 100, i));
  }
}

TEST(PlacementTest, DegenerateInputsGiveNoOwners) {
  std::vector<uint32_t> owners = {7, 7};
  Placement(std::vector<PlacementMember>{}).Owners(1, 3, &owners);
  EXPECT_TRUE(owners.empty());
  Placement p(EqualMembers(3));
  owners = {7};
  p.Owners(1, 0, &owners);
  EXPECT_TRUE(owners.empty());
  p.Owners(1, -2, &owners);
  EXPECT_TRUE(owners.empty());
  Placement(std::vector<PlacementMember>{{"off", 0}, {"neg", -1}}).Owners(1, 2, &owners);
  EXPECT_TRUE(owners.empty());
}

TEST(PlacementTest, OwnersDoesNotAllocateWithCapacity) {
  Placement p(EqualMembers(100));
  const std::vector<ChunkKey>& chunks = TestChunks();  // built here, not while counting
  std::vector<uint32_t> owners;
  owners.reserve(3);
  // The decode budget's operator new (common/alloc_budget.h) sees every
  // allocation of this thread, from inside the library too.
  size_t peak = 0;
  {
    AllocBudget budget(SIZE_MAX);
    for (size_t c = 0; c < 10000; ++c) {
      for (int k : {1, 2, 3}) p.Owners(chunks[c].PlacementHash(), k, &owners);
      p.IsOwner(chunks[c].PlacementHash(), 3, static_cast<uint32_t>(c % 100));
    }
    peak = budget.peak();
  }
  EXPECT_EQ(peak, 0u);
}

// Mean wall-clock nanoseconds per call of fn(i) over `calls` calls.
template <typename Fn>
double NanosPerCall(int calls, Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn(i);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / calls;
}

// Reports speed; asserts nothing about it (machines differ).
TEST(PlacementPerfTest, ReportNanosecondsPerCall) {
  std::vector<PlacementMember> weighted;
  for (int i = 0; i < 100; ++i) weighted.push_back({NodeName(i), 100.0 * (1 + i % 4)});
  const std::pair<const char*, Placement> setups[] = {{"equal", Placement(EqualMembers(100))},
                                                      {"weighted", Placement(weighted)}};
  constexpr int kCalls = 300'000;
  const std::vector<ChunkKey>& chunks = TestChunks();
  std::vector<uint32_t> owners;
  owners.reserve(8);
  uint64_t sink = 0;  // consumed below, so the calls cannot be optimised away
  for (const auto& setup : setups) {
    // Not a structured binding: the lambdas below capture `p`, which clang
    // before 16 (scripts/check-threads) refuses for a binding.
    const char* const label = setup.first;
    const Placement& p = setup.second;
    for (int k : {1, 3}) {
      const double owners_ns = NanosPerCall(kCalls, [&](int i) {
        p.Owners(chunks[i % kChunks].PlacementHash(), k, &owners);
        sink += owners[0];
      });
      const double any_ns = NanosPerCall(kCalls, [&](int i) {
        sink += p.IsOwner(chunks[i % kChunks].PlacementHash(), k, static_cast<uint32_t>(i % 100));
      });
      // IsOwner of an actual owner is its slow case: it must look at every
      // rival, where a non-owner stops as soon as k of them beat it.
      std::vector<uint32_t> primaries(kChunks);
      for (size_t c = 0; c < kChunks; ++c) primaries[c] = p.Owners(chunks[c], k)[0];
      const double primary_ns = NanosPerCall(kCalls, [&](int i) {
        sink += p.IsOwner(chunks[i % kChunks].PlacementHash(), k, primaries[i % kChunks]);
      });
      const std::string key = std::string(label) + "_100_nodes_k" + std::to_string(k);
      RecordProperty("owners_ns_" + key, std::to_string(owners_ns));
      RecordProperty("is_owner_any_ns_" + key, std::to_string(any_ns));
      RecordProperty("is_owner_primary_ns_" + key, std::to_string(primary_ns));
      std::cout << "[perf] " << label << " 100 nodes k=" << k << ": Owners " << owners_ns
                << " ns/call; IsOwner " << any_ns << " ns/call for a random member, " << primary_ns
                << " for the primary\n";
    }
  }
  EXPECT_GT(sink, 0u);
}

}  // namespace
}  // namespace hoard
