// CkptTable: keeping K copies of what is not on the origin yet (see
// "Lost holders" in ckpt_table.h).
#include <algorithm>

#include "checkpoint/ckpt_table.h"

namespace hoard {

namespace {

// Up nodes in the order the commit would have asked them (CkptHolderScore),
// so a repeated call picks the same node.
std::vector<std::string> Candidates(uint64_t id, uint32_t index, const std::set<std::string>& up) {
  std::vector<std::pair<uint64_t, std::string>> scored;
  for (const std::string& n : up) scored.emplace_back(proto::CkptHolderScore(id, index, n), n);
  std::sort(scored.begin(), scored.end(), std::greater<>());
  std::vector<std::string> out;
  for (auto& [score, n] : scored) out.push_back(std::move(n));
  return out;
}

}  // namespace

Result<CkptTable::Rereplicated> CkptTable::Rereplicate(const std::set<std::string>& up,
                                                       const std::set<std::string>& lost,
                                                       const std::set<std::string>& leaving) {
  MutexLock lock(&mu_);
  Rereplicated out;
  if (lost.empty()) return out;
  CkptRecord r;
  std::set<std::string> given;
  for (const auto& [seq, id] : undrained_) {
    const CkptNode& n = nodes_.at(id);
    if (n.gen == 0 || n.chunk_size == 0 || n.replicas_wanted < 2) continue;
    CkptNode* changed = nullptr;
    for (uint32_t i = 0; i < n.checksums.size(); ++i) {
      std::vector<std::string> holders = proto::CkptChunkHolders(n, i);
      // A node down for less than the loss timeout still counts: it may come
      // back with its disk, and a reboot must not copy every checkpoint.
      size_t alive = 0;
      bool source = false;
      for (const std::string& h : holders) {
        alive += lost.contains(h) ? 0 : 1;
        source = source || up.contains(h);
      }
      if (alive >= n.replicas_wanted || alive == holders.size() || !source) continue;
      for (const std::string& c : Candidates(id, i, up)) {
        if (alive >= n.replicas_wanted) break;
        if (leaving.contains(c) || std::find(holders.begin(), holders.end(), c) != holders.end()) continue;
        if (changed == nullptr) changed = PutLocked(&r, n);
        changed->replicas.resize(std::max<size_t>(changed->replicas.size(), n.checksums.size()));
        changed->replicas[i].push_back(c);
        changed->unconfirmed.push_back({.gen = n.gen, .index = i, .node = c});  // counts for R once c has it
        holders.push_back(c);
        given.insert(c);
        ++alive;
        ++out.chunks;
      }
    }
    if (changed != nullptr) ++out.files;
  }
  if (out.chunks == 0) return out;
  HOARD_RETURN_IF_ERROR(SaveLocked(std::move(r)));
  std::string lost_names, given_names;
  for (const std::string& n : lost) lost_names += (lost_names.empty() ? "" : ", ") + n;
  for (const std::string& n : given) given_names += (given_names.empty() ? "" : ", ") + n;
  options_.logger->warn("checkpoint copies on lost node(s) {}: {} chunks of {} undrained files get a new holder ({})",
                        lost_names, out.chunks, out.files, given_names);
  rebuild_due_.insert(given.begin(), given.end());
  rereplicated_chunks_.fetch_add(out.chunks, std::memory_order_relaxed);
  out.nodes.assign(given.begin(), given.end());
  return out;
}

}  // namespace hoard
