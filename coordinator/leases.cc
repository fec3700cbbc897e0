#include "coordinator/leases.h"

namespace hoard {

Result<proto::Lease> LeaseTable::Take(const std::string& dataset, const std::string& job, uint32_t ttl_s,
                                      const std::string& key_class, const proto::Caller& holder, int64_t now_unix) {
  if (job.empty()) return Status::InvalidArgument("a lease needs a job id (--job ID)");
  if (job.size() > kMaxJobLength) {
    return Status::InvalidArgument("job id of " + std::to_string(job.size()) + " characters; at most " +
                                   std::to_string(kMaxJobLength));
  }
  for (unsigned char ch : job) {
    if (ch < 0x20 || ch == 0x7f) return Status::InvalidArgument("job id has a control character");
  }
  if (ttl_s == 0) ttl_s = options_.default_ttl_s;
  if (ttl_s > options_.max_ttl_s) {
    return Status::InvalidArgument("lease ttl " + std::to_string(ttl_s) + " s is over the maximum of " +
                                   std::to_string(options_.max_ttl_s) + " s; renew a lease instead");
  }
  auto it = leases_.find({dataset, job});
  if (it == leases_.end()) {
    if (leases_.size() >= options_.max_total) {
      return Status::NoSpace("the coordinator holds " + std::to_string(leases_.size()) +
                                       " leases, its maximum; release leases of jobs that ended");
    }
    size_t on_dataset = 0;
    for (auto d = leases_.lower_bound({dataset, ""}); d != leases_.end() && d->first.first == dataset; ++d) {
      ++on_dataset;
    }
    if (on_dataset >= options_.max_per_dataset) {
      return Status::NoSpace("dataset " + dataset + " has " + std::to_string(on_dataset) +
                                       " leases, the maximum per dataset; release leases of jobs that ended");
    }
    proto::Lease fresh;
    fresh.dataset = dataset;
    fresh.job = job;
    fresh.taken_unix = now_unix;
    it = leases_.emplace(std::make_pair(dataset, job), std::move(fresh)).first;
  } else if (it->second.expires_unix <= now_unix) {
    it->second.taken_unix = now_unix;  // an expired lease taken again is a new one
  }
  proto::Lease& l = it->second;
  l.key_class = key_class;
  l.holder = holder;
  l.renewed_unix = now_unix;
  l.expires_unix = now_unix + ttl_s;
  return l;
}

std::vector<proto::Lease> LeaseTable::Release(const std::string& dataset, const std::string& job) {
  std::vector<proto::Lease> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->first.second == job && (dataset.empty() || it->first.first == dataset)) {
      out.push_back(std::move(it->second));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<proto::Lease> LeaseTable::ReleaseDataset(const std::string& dataset) {
  std::vector<proto::Lease> out;
  auto it = leases_.lower_bound({dataset, ""});
  while (it != leases_.end() && it->first.first == dataset) {
    out.push_back(std::move(it->second));
    it = leases_.erase(it);
  }
  return out;
}

std::vector<proto::Lease> LeaseTable::Expire(int64_t now_unix) {
  std::vector<proto::Lease> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires_unix <= now_unix) {
      out.push_back(std::move(it->second));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<proto::Lease> LeaseTable::List(int64_t now_unix) const {
  std::vector<proto::Lease> out;
  for (const auto& [key, l] : leases_) {
    if (l.expires_unix > now_unix) out.push_back(l);
  }
  return out;
}

std::set<std::string> LeaseTable::HeldDatasets(int64_t now_unix) const {
  std::set<std::string> out;
  for (const auto& [key, l] : leases_) {
    if (l.expires_unix > now_unix) out.insert(key.first);
  }
  return out;
}

std::vector<proto::Lease> LeaseTable::All() const {
  std::vector<proto::Lease> out;
  out.reserve(leases_.size());
  for (const auto& [key, l] : leases_) out.push_back(l);
  return out;
}

void LeaseTable::Load(const std::vector<proto::Lease>& leases) {
  leases_.clear();
  for (const auto& l : leases) leases_[{l.dataset, l.job}] = l;
}

const proto::Lease* LeaseTable::Find(const std::string& dataset, const std::string& job) const {
  auto it = leases_.find({dataset, job});
  return it == leases_.end() ? nullptr : &it->second;
}

}  // namespace hoard
