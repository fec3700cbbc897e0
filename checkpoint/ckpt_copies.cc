// CkptTable: keeping K copies of what is not on the origin yet (see
// "Lost holders" in ckpt_table.h; the choice is CkptHolders::Rereplicate).
#include "checkpoint/ckpt_table.h"

namespace hoard {

Result<CkptTable::Rereplicated> CkptTable::Rereplicate(const std::set<std::string>& up,
                                                       const std::set<std::string>& lost,
                                                       const std::set<std::string>& leaving) {
  MutexLock lock(&mu_);
  Rereplicated out;
  if (lost.empty()) return out;
  CkptRecord r;
  const CkptHolders::Given given = CkptHolders::Rereplicate(ns_, drain_.undrained(), up, lost, leaving, &r);
  if (given.chunks == 0) return out;
  HOARD_RETURN_IF_ERROR(SaveLocked(std::move(r)));
  out.files = given.files;
  out.chunks = given.chunks;
  std::string lost_names, given_names;
  for (const std::string& n : lost) lost_names += (lost_names.empty() ? "" : ", ") + n;
  for (const std::string& n : given.nodes) given_names += (given_names.empty() ? "" : ", ") + n;
  options_.logger->warn("checkpoint copies on lost node(s) {}: {} chunks of {} undrained files get a new holder ({})",
                        lost_names, out.chunks, out.files, given_names);
  holders_.RebuildDue(given.nodes);
  rereplicated_chunks_.fetch_add(out.chunks, std::memory_order_relaxed);
  out.nodes.assign(given.nodes.begin(), given.nodes.end());
  return out;
}

}  // namespace hoard
