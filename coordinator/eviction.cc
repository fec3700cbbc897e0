#include "coordinator/eviction.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/units.h"

namespace hoard::eviction {

const char* QuotaPolicyName(QuotaPolicy p) { return p == QuotaPolicy::kReject ? "reject" : "evict"; }

Result<QuotaPolicy> ParseQuotaPolicy(const std::string& name) {
  if (name == "evict") return QuotaPolicy::kEvict;
  if (name == "reject") return QuotaPolicy::kReject;
  return Status::InvalidArgument("quota policy must be evict or reject, not '" + name + "'");
}

namespace {

// A's and every resident dataset's place in the accounting of the top.
class Accounts {
 public:
  explicit Accounts(const PlanInput& in) : in_(in) {
    for (const Node& n : in.nodes) total_weight_ += std::max(0.0, n.weight);
  }

  // Its share of the cluster's copies on `n`: as `n` reported it, else the
  // expected one.
  uint64_t Share(const Dataset& d, const Node& n) const {
    if (total_weight_ <= 0 || n.weight <= 0) return 0;
    if (auto it = d.owned.find(n.name); it != d.owned.end()) return it->second;
    const proto::DatasetMeta& m = d.meta;
    const double share = std::ceil(double(m.total_bytes) * m.replicas * n.weight / total_weight_);
    return std::min<uint64_t>(m.total_bytes, static_cast<uint64_t>(share));
  }
  uint64_t Charge(const Dataset& d, const Node& n) const {
    if (!d.meta.resident) return 0;
    if (d.meta.warm) return Share(d, n);
    auto it = d.held.find(n.name);
    return it == d.held.end() ? 0 : it->second;
  }
  // What `n` would hold with A admitted and `evicted` gone, beyond its
  // capacity (negative: room left). A node that has not reported its
  // capacity constrains nothing.
  int64_t Overflow(const Node& n, const Dataset& a, const std::set<std::string>& evicted) const {
    if (n.capacity_bytes == 0 || n.weight <= 0) return INT64_MIN;
    uint64_t demand = n.other_bytes + Share(a, n);
    for (const Dataset& d : in_.datasets) {
      if (d.meta.name != a.meta.name && !evicted.count(d.meta.name)) demand += Charge(d, n);
    }
    return static_cast<int64_t>(demand) - static_cast<int64_t>(n.capacity_bytes);
  }

 private:
  const PlanInput& in_;
  double total_weight_ = 0;
};

int64_t LastUse(const proto::DatasetMeta& m) { return std::max(m.last_read_unix, m.created_unix); }

// Why a dataset that was not evicted holds its place ("pinned", "leased",
// "higher priority"), or "" for an evictable one.
std::string WhyKept(const Dataset& d, const Dataset& a, const std::set<std::string>& leased) {
  if (d.meta.pinned) return "pinned";
  if (leased.count(d.meta.name)) return "leased";
  if (d.meta.priority > a.meta.priority) return "higher priority";
  return "";
}

// "pinned ds-a", or the name alone.
std::string Label(const Dataset& d, const Dataset& a, const std::set<std::string>& leased) {
  const std::string why = WhyKept(d, a, leased);
  return why.empty() ? d.meta.name : why + " " + d.meta.name;
}

// "held by pinned ds-a (1.0 GiB), leased ds-b (800 MiB)": the largest first,
// at most 5 named.
std::string HeldBy(std::vector<std::pair<uint64_t, std::string>> holders) {
  std::sort(holders.begin(), holders.end(), [](const auto& x, const auto& y) {
    return std::tie(y.first, x.second) < std::tie(x.first, y.second);
  });
  std::string out;
  for (size_t i = 0; i < holders.size() && i < 5; ++i) {
    out += (i == 0 ? "" : ", ") + holders[i].second + " (" + FormatBytes(double(holders[i].first)) + ")";
  }
  if (holders.size() > 5) out += " and " + std::to_string(holders.size() - 5) + " more";
  return out;
}

}  // namespace

uint64_t QuotaCharge(const Dataset& d) {
  if (!d.meta.resident) return 0;
  if (d.meta.warm) return d.meta.total_bytes * d.meta.replicas;
  uint64_t held = 0;
  for (const auto& [node, bytes] : d.held) held += bytes;
  return held;
}

Result<Plan> PlanAdmission(const PlanInput& in) {
  auto a_it = std::find_if(in.datasets.begin(), in.datasets.end(),
                           [&](const Dataset& d) { return d.meta.name == in.admit; });
  if (a_it == in.datasets.end()) return Status::NotFound("dataset " + in.admit + " does not exist");
  const Dataset& a = *a_it;
  const Accounts accounts(in);
  auto quota_it = in.quotas.find(a.meta.tenant);
  const bool has_quota = quota_it != in.quotas.end() && quota_it->second > 0;

  // The evictable datasets, in eviction order.
  std::vector<const Dataset*> candidates;
  for (const Dataset& d : in.datasets) {
    if (d.meta.name == a.meta.name || !d.meta.resident || !WhyKept(d, a, in.leased).empty()) continue;
    candidates.push_back(&d);
  }
  auto order = [&](const Dataset* d) {
    const bool other_tenant = !(has_quota && d->meta.tenant == a.meta.tenant);
    return std::make_tuple(other_tenant, d->meta.priority, LastUse(d->meta), d->meta.name);
  };
  std::sort(candidates.begin(), candidates.end(),
            [&](const Dataset* x, const Dataset* y) { return order(x) < order(y); });

  Plan plan;
  std::set<std::string> evicted;
  auto evict = [&](const Dataset* d) {
    evicted.insert(d->meta.name);
    plan.evict.push_back(d->meta.name);
  };

  // 1. A's tenant within its quota.
  if (has_quota) {
    const uint64_t quota = quota_it->second;
    const uint64_t need = a.meta.total_bytes * a.meta.replicas;
    auto used = [&] {
      uint64_t u = 0;
      for (const Dataset& d : in.datasets) {
        if (d.meta.tenant == a.meta.tenant && d.meta.name != a.meta.name && !evicted.count(d.meta.name)) {
          u += QuotaCharge(d);
        }
      }
      return u;
    };
    const std::string head = "dataset " + a.meta.name + " (" + FormatBytes(double(need)) + " with its replicas)";
    const std::string over_quota = "tenant " + a.meta.tenant + "'s quota of " + FormatBytes(double(quota));
    if (need > quota) return Status::NoSpace(head + " is larger than " + over_quota + " alone");
    if (used() + need > quota && in.policy == QuotaPolicy::kReject) {
      std::vector<std::pair<uint64_t, std::string>> holders;
      for (const Dataset& d : in.datasets) {
        if (d.meta.tenant == a.meta.tenant && d.meta.name != a.meta.name && QuotaCharge(d) > 0) {
          holders.emplace_back(QuotaCharge(d), d.meta.name);
        }
      }
      return Status::NoSpace(head + " would take tenant " + a.meta.tenant + " over its quota of " +
                             FormatBytes(double(quota)) + " by " + FormatBytes(double(used() + need - quota)) +
                             ": held by " + HeldBy(holders) +
                             " (--quota-policy reject: raise the quota with `hoard quota set`, or remove one)");
    }
    for (const Dataset* d : candidates) {
      if (used() + need <= quota) break;
      if (d->meta.tenant == a.meta.tenant && QuotaCharge(*d) > 0) evict(d);
    }
    if (used() + need > quota) {
      std::vector<std::pair<uint64_t, std::string>> holders;
      for (const Dataset& d : in.datasets) {
        if (d.meta.tenant != a.meta.tenant || d.meta.name == a.meta.name || evicted.count(d.meta.name)) continue;
        if (QuotaCharge(d) > 0) holders.emplace_back(QuotaCharge(d), Label(d, a, in.leased));
      }
      return Status::NoSpace(head + " needs " + FormatBytes(double(used() + need - quota)) + " more of " +
                             over_quota + ": held by " + HeldBy(holders));
    }
  }

  // 2. A larger than the cache: its share exceeds what a node could give it
  // even with every dataset evicted. Evicting others would not make it fit,
  // so nothing is evicted for it: it is admitted as a stable subset (each
  // owner keeps the chunks it stored first, and stops when full).
  for (const Node& n : in.nodes) {
    if (n.capacity_bytes > 0 && accounts.Share(a, n) + n.other_bytes > n.capacity_bytes) {
      plan.evict.clear();
      plan.partial = true;
      return plan;
    }
  }

  // 3. Room on every node.
  auto overflowing = [&] {
    std::vector<const Node*> out;
    for (const Node& n : in.nodes) {
      if (accounts.Overflow(n, a, evicted) > 0) out.push_back(&n);
    }
    return out;
  };
  for (const Dataset* d : candidates) {
    std::vector<const Node*> over = overflowing();
    if (over.empty()) return plan;
    if (evicted.count(d->meta.name)) continue;
    // One that frees nothing where room is needed is left alone.
    if (std::any_of(over.begin(), over.end(), [&](const Node* n) { return accounts.Charge(*d, *n) > 0; })) evict(d);
  }
  std::vector<const Node*> over = overflowing();
  if (over.empty()) return plan;

  // Even evicting everything evictable leaves a node short: say where and why.
  const Node* worst = over.front();
  for (const Node* n : over) {
    if (accounts.Overflow(*n, a, evicted) > accounts.Overflow(*worst, a, evicted)) worst = n;
  }
  const uint64_t share = accounts.Share(a, *worst);
  std::string msg = "dataset " + a.meta.name + " does not fit: needs " +
                    FormatBytes(double(accounts.Overflow(*worst, a, evicted))) + " more on " + worst->name +
                    " (capacity " + FormatBytes(double(worst->capacity_bytes)) + ", its share there " +
                    FormatBytes(double(share)) + ")";
  std::vector<std::pair<uint64_t, std::string>> holders;
  for (const Dataset& d : in.datasets) {
    if (d.meta.name == a.meta.name || evicted.count(d.meta.name)) continue;
    if (const uint64_t c = accounts.Charge(d, *worst); c > 0) {
      holders.emplace_back(c, Label(d, a, in.leased));
    }
  }
  if (worst->other_bytes > 0) holders.emplace_back(worst->other_bytes, "checkpoint copies");
  if (!holders.empty()) msg += ": held by " + HeldBy(holders);
  return Status::NoSpace(msg);
}

std::vector<std::string> ExpiredByTtl(const std::vector<Dataset>& datasets, const std::set<std::string>& leased,
                                      int64_t now_unix) {
  std::vector<std::string> out;
  for (const Dataset& d : datasets) {
    const proto::DatasetMeta& m = d.meta;
    if (!m.resident || m.ttl_s <= 0 || m.pinned || leased.count(m.name)) continue;
    if (now_unix - LastUse(m) >= m.ttl_s) out.push_back(m.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<proto::TenantQuota> QuotaUsage(const std::vector<Dataset>& datasets,
                                           const std::map<std::string, uint64_t>& quotas) {
  std::map<std::string, proto::TenantQuota> by_tenant;
  for (const auto& [tenant, bytes] : quotas) by_tenant[tenant] = {.tenant = tenant, .quota_bytes = bytes};
  for (const Dataset& d : datasets) {
    if (!d.meta.resident) continue;
    proto::TenantQuota& q = by_tenant[d.meta.tenant];
    q.tenant = d.meta.tenant;
    q.used_bytes += QuotaCharge(d);
    ++q.datasets;
  }
  std::vector<proto::TenantQuota> out;
  for (auto& [tenant, q] : by_tenant) out.push_back(std::move(q));
  return out;
}

}  // namespace hoard::eviction
