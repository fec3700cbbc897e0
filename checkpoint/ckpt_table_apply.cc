// CkptTable: opening, and the one mutator: a record made durable, then
// applied to every part (live and on replay: the same code, see
// "Durability" in ckpt_table.h).
#include <algorithm>

#include "checkpoint/ckpt_table.h"

namespace hoard {

namespace {

// The options with the wall clock filled in when not injected.
CkptTable::Options WithWallClock(CkptTable::Options o) {
  if (!o.now_unix_ms) {
    o.now_unix_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  return o;
}

CkptDrainQueue::Options DrainOptions(const CkptTable::Options& o) {
  return {.max_tasks_per_node = o.max_tasks_per_node,
          .lease = o.lease,
          .writing_hold = o.writing_hold,
          .drain_deadline = o.drain_deadline,
          .drain_max_bytes_per_s = o.drain_max_bytes_per_s,
          .drain_share = o.drain_share,
          .drain_min_bytes_per_s = o.drain_min_bytes_per_s};
}

// Unique across restarts too: a node may still echo a list number of the
// coordinator's previous run, which must not confirm this run's list.
uint64_t FirstRebuildSeq() {
  return std::max<uint64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count());
}

}  // namespace

CkptTable::CkptTable(Options options)
    : options_(WithWallClock(options)),
      opened_at_(options_.clock->Now()),
      wall_injected_(static_cast<bool>(options.now_unix_ms)),
      store_(options_.dir, options_.store),
      drain_(DrainOptions(options_), opened_at_, options_.now_unix_ms()),
      origin_(options_.commit_markers),
      holders_(FirstRebuildSeq()),
      health_(options_.logger) {}

Result<std::unique_ptr<CkptTable>> CkptTable::Open(Options options) {
  if (options.dir.empty() || !options.logger) {
    return Status::InvalidArgument("the checkpoint table needs a directory and a logger");
  }
  std::unique_ptr<CkptTable> t(new CkptTable(std::move(options)));
  HOARD_RETURN_IF_ERROR(t->Load());
  return t;
}

Status CkptTable::Load() {
  MutexLock lock(&mu_);
  std::string cut;
  HOARD_ASSIGN_OR_RETURN(CkptStore::Loaded loaded, store_.Open(&cut));
  if (!cut.empty()) options_.logger->warn("checkpoint journal: {}", cut);
  CkptRecord base{.next_id = loaded.snapshot.next_id,
                  .next_commit_seq = loaded.snapshot.next_commit_seq,
                  .next_op_seq = loaded.snapshot.next_op_seq,
                  .put = std::move(loaded.snapshot.nodes),
                  .ops_add = std::move(loaded.snapshot.ops),
                  .next_drop_seq = loaded.snapshot.next_drop_seq,
                  .drops_add = std::move(loaded.snapshot.drops)};
  Apply(base);  // children are keyed by parent id, so puts may come in any order
  for (const CkptRecord& r : loaded.records) Apply(r);
  // A snapshot and journal that replay into a state no sequence of
  // operations could have built are damaged (found by
  // fuzz/ckpt_store_fuzz.cc): refusing to start is safer than serving them.
  // Each check also moves its part's counters past the ids in use, so ids
  // are never reused.
  Status checked = ns_.CheckLoaded();
  if (checked.ok()) checked = origin_.CheckLoaded();
  if (checked.ok()) checked = holders_.CheckLoaded();
  HOARD_RETURN_IF_ERROR(checked.Annotate("checkpoint namespace in " + options_.dir + " (restore it from a backup)"));
  ns_.SetRootTimes(NowNs());
  options_.logger->info(
      "checkpoint namespace: {} entries, {} origin operations queued, {} uploads awaiting publish, {} old "
      "generations kept for readers, {} copies to delete on nodes",
      ns_.entries().size(), origin_.ops().size(), origin_.held().size(), holders_.with_old_gens(),
      holders_.drops().size());
  return Status::Ok();
}

// ---- records --------------------------------------------------------------

void CkptTable::IndexLocked(const CkptNode& n, bool add) {
  drain_.Index(n, add);
  origin_.Index(n, add);
  holders_.Index(n, add);
}

void CkptTable::ApplyPut(const CkptNode& n) {
  if (const CkptNode* was = ns_.Find(n.id); was != nullptr) IndexLocked(*was, false);
  ns_.Put(n);
  IndexLocked(n, true);
  // At P (or out of the namespace) nothing keeps it from the origin any more.
  if (n.orphan || n.level == uint8_t(proto::CkptLevel::kP)) health_.Forget(n.id);
}

void CkptTable::ApplyDel(uint64_t id) {
  const CkptNode* was = ns_.Find(id);
  if (was == nullptr) return;
  IndexLocked(*was, false);
  ns_.Del(id);
  health_.Forget(id);
  drain_.Forget(id);
}

void CkptTable::Apply(const CkptRecord& r) {
  ns_.AdvanceCounters(r.next_id, r.next_commit_seq);
  for (const CkptNode& n : r.put) ApplyPut(n);
  for (uint64_t id : r.del) ApplyDel(id);
  origin_.Apply(r);
  holders_.ApplyDrops(r);
}

CkptSnapshot CkptTable::SnapshotLocked() const {
  CkptSnapshot s{.next_id = ns_.next_id(), .next_commit_seq = ns_.next_commit_seq(),
                 .next_op_seq = origin_.next_seq(), .next_drop_seq = holders_.next_drop_seq()};
  for (const auto& [id, n] : ns_.entries()) s.nodes.push_back(n);
  for (const auto& [seq, op] : origin_.ops()) s.ops.push_back(op);
  for (const auto& [seq, d] : holders_.drops()) s.drops.push_back(d);
  return s;
}

Status CkptTable::SaveLocked(CkptRecord r) {
  r.next_id = ns_.next_id();
  r.next_commit_seq = ns_.next_commit_seq();
  r.next_op_seq = origin_.next_seq();
  r.next_drop_seq = holders_.next_drop_seq();
  for (const CkptDrop& d : r.drops_add) r.next_drop_seq = std::max(r.next_drop_seq, d.seq + 1);
  for (const CkptNode& n : r.put) r.next_id = std::max(r.next_id, n.id + 1);
  for (const CkptNode& n : r.put) r.next_commit_seq = std::max(r.next_commit_seq, n.commit_seq + 1);
  for (const OriginOp& op : r.ops_add) r.next_op_seq = std::max(r.next_op_seq, op.seq + 1);
  HOARD_RETURN_IF_ERROR(store_.Append(r).Annotate("save the checkpoint namespace"));
  Apply(r);
  if (store_.SnapshotDue()) {
    // The record is durable; a failed snapshot only means a longer replay.
    if (Status s = store_.WriteSnapshot(SnapshotLocked()); !s.ok()) {
      options_.logger->warn("checkpoint namespace snapshot: {}", s.ToString());
    }
  }
  if (!r.ops_add.empty() && listener_) listener_();
  return Status::Ok();
}

int64_t CkptTable::NowMs() const { return options_.now_unix_ms(); }

int64_t CkptTable::NowNs() const {
  // An injected clock (tests) has millisecond steps; the real one nanoseconds.
  if (wall_injected_) return NowMs() * 1'000'000;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace hoard
