// File: checkpoint/ckpt_holders.h
//
// CkptHolders is the part of CkptTable (ckpt_table.h) about the copies on
// the nodes: who holds which chunk of which generation, and when a copy may
// go. It owns:
//   - the copies nodes must delete (CkptDrop, by seq and by node), handed
//     out in Work replies until the node reports them done;
//   - old generations kept for readers ("Old generations": KeepOldGen,
//     Orphan, Retire, QueueDrops) and retention past a job's newest
//     keep_last checkpoints (Release);
//   - re-replication of chunks whose holders are lost ("Lost holders":
//     Rereplicate), the rebuild lists that tell the new holders, and their
//     confirmations;
//   - the level shown to users ("Shown level"), which counts only holders
//     that are up and have confirmed.
//
// Durable state (the drops, and the index of entries with old generations
// or unconfirmed holders, derived from the entries) changes only through
// Apply/ApplyDrops/Index, which CkptTable::Apply calls live and on replay;
// the Stage*/Queue*/Retire/Release/Rereplicate methods only add to a record
// being built, from the state before it. What nodes were told (rebuild lists
// sent, pages, who is due one), which nodes are up and which generations the
// mounts hold are not durable (rebuilt by nodes asking and mounts reporting
// again) and are set by CkptTable's methods directly.
//
// Invariants: a drop seq is unique and below next_drop_seq(); a node's
// drops are handed out in seq order; a replica file that some kept
// generation of its file still uses is never handed out for deletion
// (RefLive is checked when a drop is handed out, not only when queued).
//
// Thread-safety: not thread-safe; guarded by CkptTable's mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checkpoint/ckpt_namespace.h"
#include "checkpoint/ckpt_store.h"
#include "common/status.h"
#include "proto/messages.h"

namespace hoard {

class CkptHolders {
 public:
  using ChunkOf = std::tuple<uint64_t, uint64_t, uint32_t>;  // (id, gen, index)

  // `first_rebuild_seq`: the number of the first rebuild list; unique across
  // restarts (a node may still echo the previous run's).
  explicit CkptHolders(uint64_t first_rebuild_seq) : next_rebuild_seq_(first_rebuild_seq) {}

  // ---- shown level ----
  // The nodes up now; until the first call, levels are shown as committed.
  void SetUp(std::set<std::string> up) { up_ = std::move(up); }
  proto::CkptLevel ShownLevel(const CkptNode& n) const;

  // ---- readers (sessions) ----
  void SetHolds(std::set<proto::CkptHold> holds) { holds_ = std::move(holds); }
  bool held(uint64_t id, uint64_t gen) const { return holds_.contains(proto::CkptHold{.id = id, .gen = gen}); }

  // ---- a commit (the state before it) ----
  // kStale unless every chunk `req` reuses is `n`'s current generation's,
  // with the same checksum, on holders it lists.
  static Status CheckReuse(const CkptNode& n, const proto::CkptCommit& req);
  // The holders of `old` (the entry before the commit) that had not
  // confirmed and stay unconfirmed in `c` (the entry after it): those of
  // chunks `c` reuses.
  static std::vector<CkptUnconfirmed> CarryUnconfirmed(const CkptNode& old, const CkptNode& c);
  // Keeps `old` (the generation a commit or removal replaces) in
  // `c->old_gens` while it has copies; `c` is the entry as it will be.
  static void KeepOldGen(CkptNode* c, const CkptNode& old, int64_t now_ms);
  // Queues into `r` the deletion of sends the commit `c` did not count.
  void QueueDiscards(CkptRecord* r, const CkptNode& c, const std::vector<proto::CkptReplicaRef>& discard) const;
  // Turns `gone` (a removed or replaced file) into an orphan in `r`, kept
  // for its old generations, or deletes it when nothing is left to read.
  static void Orphan(CkptRecord* r, CkptNode gone, int64_t now_ms);

  // ---- old generations ----
  // Retires into `r` the old generations older than `grace` that no session
  // holds, with the drops of their copies; returns how many.
  size_t Retire(const CkptNamespace& ns, int64_t now_ms, std::chrono::milliseconds grace, CkptRecord* r) const;
  // Queues into `r` the drops of what `retired` used that no generation
  // still in `n` (after the change) uses.
  void QueueDrops(CkptRecord* r, const CkptNode& n, const CkptOldGen& retired) const;
  // Whether replica file (node, gen, index, checksum) of `id` is used by its
  // current generation or an old one still kept.
  static bool RefLive(const CkptNamespace& ns, uint64_t id, const std::string& node, uint64_t gen, uint32_t index,
                      uint64_t checksum);
  size_t old_generations(const CkptNamespace& ns) const;
  size_t pending_drops() const { return drops_.size(); }

  // ---- retention ----
  // Releases into `r` the copies of the files of `job` past its newest
  // `keep_last` checkpoints, once each is P (and not reopened for writing
  // within `reopen_hold`); entries directly in `job` named as markers keep
  // theirs.
  static void Release(const CkptNamespace& ns, uint64_t job, uint32_t keep_last,
                      const std::function<bool(const std::string&)>& is_marker, int64_t now_ms,
                      std::chrono::milliseconds reopen_hold, CkptRecord* r);

  // ---- lost holders ----
  struct Given {
    size_t files = 0;
    size_t chunks = 0;
    std::set<std::string> nodes;  // the new holders
  };
  // Names into `r` new holders among `up` (not `leaving`) for the chunks of
  // the `undrained` files left with fewer than replicas_wanted copies off
  // `lost` nodes.
  static Given Rereplicate(const CkptNamespace& ns, const std::set<std::pair<uint64_t, uint64_t>>& undrained,
                           const std::set<std::string>& up, const std::set<std::string>& lost,
                           const std::set<std::string>& leaving, CkptRecord* r);
  // Nodes given new copies (durably): their next Work carries their list.
  void RebuildDue(const std::set<std::string>& nodes) { rebuild_due_.insert(nodes.begin(), nodes.end()); }

  // ---- a node's Work ----
  // The unconfirmed copies on the rebuild list `node` holds in full, if
  // `rebuilt` echoes the last list sent to it.
  const std::set<ChunkOf>* Listed(const std::string& node, uint64_t rebuilt) const;
  void ForgetListed(const std::string& node) { listed_.erase(node); }
  // Removes from `r`'s entries the unconfirmed marks of `chunks` on `node`.
  static void StageConfirm(const CkptNamespace& ns, const std::string& node, const std::set<ChunkOf>& chunks,
                           CkptRecord* r);
  // The seqs of `node`'s drops up to `dropped` (the last it did).
  std::vector<uint64_t> DropsDone(const std::string& node, uint64_t dropped) const;
  // The copies part of `node`'s Work reply: keep_files, its rebuild list
  // page (with `rebuild`, or when one is due or unfinished; pages of
  // `rebuild_page` entries) and its drops (at most `drop_page`).
  void FillWork(const CkptNamespace& ns, const std::string& node, bool rebuild, size_t rebuild_page,
                size_t drop_page, proto::CkptWorkReply* reply);

  uint64_t next_drop_seq() const { return next_drop_seq_; }

  // ---- CkptTable::Apply only ----
  void Index(const CkptNode& n, bool add);
  void ApplyDrops(const CkptRecord& r);
  const std::map<uint64_t, CkptDrop>& drops() const { return drops_; }
  // After a replay: kCorruption for a drop naming a bad node; moves
  // next_drop_seq past the seqs in use; every node with unconfirmed copies
  // is due its rebuild list (it may never have been told).
  Status CheckLoaded();
  size_t with_old_gens() const { return with_old_gens_.size(); }

 private:
  std::map<uint64_t, CkptDrop> drops_;  // by seq
  std::map<std::string, std::set<uint64_t>> drops_by_node_;
  uint64_t next_drop_seq_ = 1;
  std::set<uint64_t> with_old_gens_;  // ids whose old_gens is not empty
  std::map<std::string, std::set<ChunkOf>> unconfirmed_;  // by node: copies Rereplicate gave it

  // Not durable.
  std::optional<std::set<std::string>> up_;  // unknown until SetUp
  std::set<proto::CkptHold> holds_;
  std::set<std::string> rebuild_due_;
  // By node: the rebuild_seq of the last list sent to it, and which of its
  // unconfirmed copies were on it.
  std::map<std::string, std::pair<uint64_t, std::set<ChunkOf>>> listed_;
  // By node: where its next rebuild page starts (id, chunk).
  std::map<std::string, std::pair<uint64_t, uint32_t>> rebuild_cursor_;
  uint64_t next_rebuild_seq_;
};

}  // namespace hoard
