#include "coordinator/progress.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "proto/ordinals.h"

namespace hoard {
namespace {

// The bytes of the chunks `ordinals` of manifest `m` (each as often as it
// is listed): a sort, then one pass over the files, whose ordinals ascend
// with their entries.
uint64_t KeptBytes(const Manifest& m, std::vector<uint64_t>& ordinals) {
  std::sort(ordinals.begin(), ordinals.end());
  uint64_t bytes = 0;
  size_t k = 0;
  for (uint32_t e = 0; e < m.entry_count() && k < ordinals.size(); ++e) {
    const EntryRecord& r = m.entry(e);
    if (!r.is_file()) continue;
    const uint64_t first = r.first_chunk(), n = m.chunk_count(e);
    while (k < ordinals.size() && ordinals[k] < first) ++k;  // not expected: ordinals are of files
    for (; k < ordinals.size() && ordinals[k] < first + n; ++k) {
      const uint64_t offset = (ordinals[k] - first) * m.chunk_size();
      bytes += std::min<uint64_t>(m.chunk_size(), r.size - offset);
    }
  }
  return bytes;
}

}  // namespace

void Progress::Report(const std::string& node, const std::vector<proto::DatasetReport>& reports, TimePoint now) {
  NodeReports& n = nodes_[node];
  std::map<uint64_t, proto::DatasetReport> before;
  before.swap(n.by_uid);
  for (const proto::DatasetReport& r : reports) {
    auto old = before.find(r.uid);
    if (old != before.end() && old->second.version == r.version && r.cached_bytes > old->second.cached_bytes) {
      fill_rates_[r.uid].Add(now, r.cached_bytes - old->second.cached_bytes);
    }
    n.by_uid[r.uid] = r;
  }
  n.reported = true;
}

bool Progress::HasReported(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.reported;
}

void Progress::ForgetNode(const std::string& node) { nodes_.erase(node); }

void Progress::ForgetDataset(uint64_t uid) { fill_rates_.erase(uid); }

double Progress::TotalFillRate(TimePoint now) const {
  double fill = 0;
  for (const auto& [uid, rate] : fill_rates_) fill += rate.Rate(now);
  return fill;
}

const proto::DatasetReport* Progress::Find(const std::string& node, uint64_t uid) const {
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return nullptr;
  auto r = n->second.by_uid.find(uid);
  return r == n->second.by_uid.end() ? nullptr : &r->second;
}

std::vector<proto::SettledDataset> Progress::SettledNow(const Catalogue& catalogue, const Membership& members,
                                                        uint64_t placement_epoch) const {
  std::vector<proto::SettledDataset> settled;
  for (const auto& [name, d] : catalogue.datasets()) {
    bool all = true, any = false;
    for (const auto& [node, n] : members.nodes()) {
      if (proto::PlacementWeight(n.info) <= 0) continue;
      any = true;
      const proto::DatasetReport* r = Find(node, d.meta.uid);
      if (!n.info.up || r == nullptr || r->version != d.meta.version || r->placement_epoch != placement_epoch ||
          r->cached_chunks != r->owned_chunks) {
        all = false;
        break;
      }
    }
    if (all && any) settled.push_back({d.meta.uid, d.meta.version, placement_epoch});
  }
  return settled;
}

void Progress::UpdateSettled(const Catalogue& catalogue, const Membership& members, uint64_t placement_epoch,
                             TimePoint now, std::chrono::milliseconds down_after) {
  // See the header: settled for a whole down timeout before nodes are told.
  std::map<uint64_t, SettledSince> still;
  settled_.clear();
  for (const proto::SettledDataset& d : SettledNow(catalogue, members, placement_epoch)) {
    auto it = settled_since_.find(d.uid);
    SettledSince since{d, now};
    if (it != settled_since_.end() && it->second.dataset.version == d.version &&
        it->second.dataset.placement_epoch == d.placement_epoch) {
      since = it->second;
    }
    if (now - since.since >= down_after) settled_.push_back(d);
    still.emplace(d.uid, since);
  }
  settled_since_ = std::move(still);
}

Progress::StatusInput Progress::Input(const Catalogue::Dataset& d, const Membership& members, uint64_t placement_epoch,
                                      TimePoint now) const {
  StatusInput in{d.meta, d.manifest, placement_epoch, 0, {}, d.kept_from, d.kept};
  if (auto rate = fill_rates_.find(d.meta.uid); rate != fill_rates_.end()) in.fill_rate = rate->second.Rate(now);
  for (const auto& [name, n] : members.nodes()) {
    StatusInput::Node node{name, n.info.up, proto::PlacementWeight(n.info) > 0, std::nullopt};
    if (const proto::DatasetReport* r = Find(name, d.meta.uid)) node.report = *r;
    in.nodes.push_back(std::move(node));
  }
  return in;
}

proto::DatasetStatus Progress::Compute(const StatusInput& in, spdlog::logger& logger) {
  proto::DatasetStatus st;
  st.meta = in.meta;
  const uint64_t eligible = std::count_if(in.nodes.begin(), in.nodes.end(), [](const auto& n) { return n.eligible; });
  const uint64_t effective = std::min<uint64_t>(in.meta.replicas, eligible);
  st.expected_bytes = in.meta.total_bytes * effective;
  // copies[ordinal] = how many owners report the chunk cached.
  std::vector<uint8_t> copies(in.meta.total_chunks, 0);
  std::vector<uint64_t> ordinals;
  std::vector<uint64_t> carried;  // new ordinals held on the previous version, one per copy
  bool all_reported = eligible > 0;
  for (const StatusInput::Node& n : in.nodes) {
    st.shares.push_back({n.name, 0, 0, 0, false});
    const bool current =
        n.up && n.report && n.report->version == in.meta.version && n.report->placement_epoch == in.placement_epoch;
    if (!current && n.up && n.report && in.kept != nullptr && in.kept_from != 0 &&
        n.report->version == in.kept_from && n.report->placement_epoch == in.placement_epoch) {
      // A report on the version this one was refreshed from: what it holds
      // of the kept files counts (see the header), nothing else does.
      if (n.eligible) all_reported = false;
      ordinals.clear();
      // The old version's chunk count is not known here: KeptOrdinal and the
      // bound below keep what decodes within the new version.
      auto keep = [&](uint64_t o) {
        if (auto to = KeptOrdinal(*in.kept, o); to && *to < copies.size()) ordinals.push_back(*to);
      };
      Status decoded = proto::DecodeOrdinals(n.report->cached_ordinals, UINT64_MAX, n.report->cached_chunks, keep);
      if (!decoded.ok()) continue;
      // Its share stays unreported (NodeShare): its owned set on this
      // version is not known yet. Its bytes are added up below, in one pass
      // over the manifest for all such nodes.
      st.cached_chunks += ordinals.size();
      for (uint64_t o : ordinals) {
        if (copies[o] < 255) ++copies[o];
      }
      carried.insert(carried.end(), ordinals.begin(), ordinals.end());
      continue;
    }
    ordinals.clear();
    Status decoded = current
                         ? proto::DecodeOrdinals(n.report->cached_ordinals, in.meta.total_chunks,
                                                 n.report->cached_chunks, [&](uint64_t o) { ordinals.push_back(o); })
                         : Status::NotFound("");
    if (current && !decoded.ok()) {
      logger.warn("node {}: unusable report on dataset {}: {}", n.name, in.meta.name, decoded.ToString());
    }
    if (!decoded.ok()) {
      if (n.eligible) all_reported = false;
      continue;
    }
    const proto::DatasetReport& r = *n.report;
    st.shares.back() = {n.name, r.owned_chunks, r.owned_bytes, r.cached_bytes, true};
    ++st.nodes_reporting;
    st.cached_bytes += r.cached_bytes;
    st.cached_chunks += r.cached_chunks;
    for (uint64_t o : ordinals) {
      if (copies[o] < 255) ++copies[o];
    }
    for (const auto& f : r.failures) {
      if (st.failures.size() < 100) st.failures.push_back(f);
    }
  }
  if (!carried.empty()) st.cached_bytes += KeptBytes(in.manifest, carried);
  // A file counts when each of its chunks has all its copies.
  const Manifest& mf = in.manifest;
  for (uint32_t e = 0; e < mf.entry_count(); ++e) {
    const EntryRecord& r = mf.entry(e);
    if (!r.is_file()) continue;
    const uint64_t n = mf.chunk_count(e);
    bool whole = true;
    for (uint64_t i = 0; i < n && whole; ++i) whole = copies[r.first_chunk() + i] >= effective;
    if (whole) ++st.files_cached;
  }
  st.complete = all_reported && st.cached_bytes >= st.expected_bytes && st.files_cached == in.meta.file_count;
  st.fill_rate = in.fill_rate;
  if (st.complete) {
    st.eta_seconds = 0;
  } else if (in.fill_rate > 0 && st.expected_bytes > st.cached_bytes) {
    st.eta_seconds = static_cast<int64_t>(double(st.expected_bytes - st.cached_bytes) / in.fill_rate + 0.5);
  }
  return st;
}

}  // namespace hoard
