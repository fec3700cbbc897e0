// CkptTable: generations that readers may still read, and the copies that no
// generation uses any more (see "Old generations" in ckpt_table.h; the rules
// are CkptHolders', ckpt_holders.h).
#include "checkpoint/ckpt_table.h"

namespace hoard {

void CkptTable::RemoveFileLocked(CkptRecord* r, CkptNode gone) {
  origin_.DropUpload(r, &gone);
  CkptHolders::Orphan(r, std::move(gone), NowMs());
}

void CkptTable::SetSessions(std::set<proto::CkptHold> holds, std::set<uint64_t> writing, uint64_t mount,
                            const std::set<uint64_t>& mount_writing) {
  MutexLock lock(&mu_);
  holders_.SetHolds(std::move(holds));
  drain_.SetWriting(std::move(writing), mount, mount_writing);
}

Result<size_t> CkptTable::CollectGarbage() {
  MutexLock lock(&mu_);
  // After a restart, mounts need a while to say what they hold.
  if (options_.clock->Now() - opened_at_ < options_.retire_grace) return size_t(0);
  CkptRecord r;
  const size_t retired = holders_.Retire(ns_, NowMs(), options_.retire_grace, &r);
  if (retired == 0) return size_t(0);
  HOARD_RETURN_IF_ERROR(SaveLocked(std::move(r)).Annotate("retire old checkpoint generations"));
  return retired;
}

size_t CkptTable::pending_drops() const {
  MutexLock lock(&mu_);
  return holders_.pending_drops();
}

size_t CkptTable::old_generations() const {
  MutexLock lock(&mu_);
  return holders_.old_generations(ns_);
}

}  // namespace hoard
