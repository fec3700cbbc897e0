// File: coordinator/eviction.h
//
// Which datasets leave the cache, and whether a dataset may enter it: the
// admission planner (`hoard warm NAME`), the TTL check and the tenants' quota
// usage. Pure functions of their input, so every rule is unit-tested without
// a cluster (eviction_test.cc); the coordinator fills the input under its
// mutex and carries out the plan (Coordinator::Warm, CheckEvictions).
//
// The accounting ("charge"): a resident dataset that is warm is charged, on
// each node with a positive placement weight, its share of the cluster's
// copies, whether or not its warm-up has finished, since it will. The share
// is what the node reports the placement gives it (Dataset::owned: exact);
// for a node that has not reported on the dataset's version at the current
// placement, the expected share total_bytes * replicas * weight / sum of
// weights (at most total_bytes: a node holds one copy of a chunk). Hashing
// spreads chunks unevenly: with a few hundred chunks a node's share can be a
// third above the expected one, and a plan made on the expectation would
// leave the warm-up stalled on a full disk. A resident dataset that is not warm is charged
// what the node reports it holds of it (chunks stored by reads through it).
// A dataset that is not resident is charged nothing: nodes drop its chunks.
// A node also carries `other_bytes` (checkpoint copies, the read tier: what
// the node's disk holds besides dataset chunks). Admission of dataset A
// succeeds when, on every node, other + the charges of the other resident
// datasets + A's share <= the node's capacity. Shares, not reported usage,
// so the answer is the same before and after the nodes have dropped what an
// eviction freed, and warm-ups never overcommit a disk.
//
// Eviction order (the first in order is evicted first, until A fits):
//   never A itself, a pinned dataset, a leased one (PlanInput::leased: a job
//   reads it), or one of higher priority than A; among the rest
//   1. A's tenant's datasets first, when A's tenant has a quota;
//   2. lowest priority first;
//   3. least recently read first: max(last_read_unix, created_unix), oldest
//      first; then by name, so that a plan is deterministic.
// A plan that cannot make room fails with kNoSpace and a message that says
// how much is missing on which node and what holds the space (pinned, leased,
// higher priority datasets, with their bytes there), so `hoard warm` fails at
// once instead of stalling.
//
// Quotas: a tenant's datasets may hold at most its quota, counted as
// QuotaCharge (a warm dataset: bytes * replicas, what it holds once warm).
// A's admission first brings A's tenant within its quota: with
// QuotaPolicy::kReject it fails (kNoSpace, saying by how much); with kEvict
// it evicts the tenant's own evictable datasets in the order above, and fails
// if even that cannot.
//
// A dataset larger than the cache (its share alone exceeds what a
// node holds besides checkpoint copies) is admitted without evicting
// anything (Plan::partial): evicting others would not make it fit. Its owners
// fill their share until their disk is full and keep what they stored, a
// stable subset, never a rotating one (prefetch/warmer.h); a read of the rest
// goes to the origin.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "proto/messages.h"

namespace hoard::eviction {

enum class QuotaPolicy { kEvict, kReject };
const char* QuotaPolicyName(QuotaPolicy p);  // "evict", "reject"
Result<QuotaPolicy> ParseQuotaPolicy(const std::string& name);

// A member with a positive placement weight (up, not draining).
struct Node {
  std::string name;
  double weight = 0;
  uint64_t capacity_bytes = 0;  // 0: not reported yet; the node does not constrain
  uint64_t other_bytes = 0;     // what its disk holds besides dataset chunks
};

struct Dataset {
  proto::DatasetMeta meta;
  std::map<std::string, uint64_t> held;  // by node: the bytes it reports holding of it
  // By node: the bytes the placement gives it (its owned share, replicas
  // counted), where it reported them for the current version and placement.
  std::map<std::string, uint64_t> owned;
};

struct PlanInput {
  std::vector<Node> nodes;
  std::vector<Dataset> datasets;  // every dataset, A included
  std::string admit;              // A: the dataset to make resident and warm
  std::set<std::string> leased;   // datasets a job holds a lease on: never evicted
  std::map<std::string, uint64_t> quotas;  // by tenant, bytes
  QuotaPolicy policy = QuotaPolicy::kEvict;
};

struct Plan {
  std::vector<std::string> evict;  // in eviction order
  // A is larger than the cache (its share exceeds a node's capacity even
  // with every dataset evicted): admitted, evicting nothing; its owners keep
  // a stable subset.
  bool partial = false;
};

// What to evict so that PlanInput::admit fits (see the top). kNotFound if A is
// not among the datasets; kNoSpace, with what holds the space, if it cannot fit.
Result<Plan> PlanAdmission(const PlanInput& in);

// The resident datasets not read for their ttl_s by `now_unix` (counting from
// their creation when never read), except pinned and leased ones. By name.
std::vector<std::string> ExpiredByTtl(const std::vector<Dataset>& datasets, const std::set<std::string>& leased,
                                      int64_t now_unix);

// What a dataset counts against its tenant's quota: nothing when not
// resident; total_bytes * replicas when warm; else what the nodes hold of it.
uint64_t QuotaCharge(const Dataset& d);

// Every tenant with a quota or a resident dataset: its quota and the
// QuotaCharge of its datasets. By tenant.
std::vector<proto::TenantQuota> QuotaUsage(const std::vector<Dataset>& datasets,
                                           const std::map<std::string, uint64_t>& quotas);

}  // namespace hoard::eviction
