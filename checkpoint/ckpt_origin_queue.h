// File: checkpoint/ckpt_origin_queue.h
//
// CkptOriginQueue is the ordered FIFO of operations the checkpoint origin
// must see (OriginOp: publish, rename, unlink, rmdir, symlink), applied in
// seq order by the Publisher (publisher.h), and the rule that holds commit
// markers back (ckpt_table.h, "The origin queue" and "Commit markers").
//
// Operations are queued into the record of the namespace change that causes
// them (Queue, QueuePublish, DropUpload, MarkAncestors), so the origin sees
// them in the order they happened and they survive a restart; they enter
// and leave the queue only through Apply (CkptTable::Apply: live after the
// journal append, and on replay). It also indexes the files whose upload
// waits in staging for its publish (held(): a marker whose rule is not met
// yet), derived from the entries by Index.
//
// Commit markers: a file whose basename is one of `markers` is published
// only when every other non-marker file in its directory's subtree that was
// committed before it (commit_seq) is P: renamed into place on the origin.
//
// Invariants: seqs are unique and below next_seq(); every queued operation's
// paths are safe (CheckLoaded refuses a replay with one that is not: the
// publisher would rename outside the origin).
//
// Thread-safety: not thread-safe; guarded by CkptTable's mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/ckpt_namespace.h"
#include "checkpoint/ckpt_store.h"
#include "common/status.h"
#include "origin/ckpt_origin.h"

namespace hoard {

class CkptOriginQueue {
 public:
  explicit CkptOriginQueue(std::vector<std::string> markers) : markers_(std::move(markers)) {}

  // The oldest operation not yet done, if any.
  std::optional<OriginOp> Next() const;
  const OriginOp* Find(uint64_t seq) const;
  const std::map<uint64_t, OriginOp>& ops() const { return ops_; }
  uint64_t next_seq() const { return next_seq_; }
  // Files whose upload waits in staging (uploaded_gen set), by id.
  const std::set<uint64_t>& held() const { return held_; }

  // ---- building a record (the state before it) ----
  // Appends an operation to `r`, numbered after those already in it.
  void Queue(CkptRecord* r, uint8_t kind, std::string from, std::string path, uint64_t id = 0,
             uint64_t gen = 0) const;
  // The directories from `parent` up are (about to be) on the origin: the
  // publisher's MakeDirs creates the whole chain, so an rmdir or rename of
  // any of them later must be mirrored.
  static void MarkAncestors(const CkptNamespace& ns, CkptRecord* r, uint64_t parent);
  // Queues the deletion of `n`'s upload waiting in staging, if any, and
  // forgets it in `n` (superseded by a commit, or the file goes).
  void DropUpload(CkptRecord* r, CkptNode* n) const;
  // Queues the publish of `n`'s uploaded generation (its path now).
  void QueuePublish(const CkptNamespace& ns, CkptRecord* r, CkptNode n) const;
  // Queues the publishes of held markers whose rule is now met.
  void QueueReadyMarkers(const CkptNamespace& ns, CkptRecord* r) const;

  // ---- commit markers ----
  bool IsMarker(const std::string& name) const;
  bool MarkerReady(const CkptNamespace& ns, const CkptNode& marker) const;

  // The staging name of a generation's upload by `node` (see
  // CkptTable::StagingPath), and the node in one ("" if it is not one).
  static std::string StagingPath(uint64_t id, uint64_t gen, const std::string& node);
  static std::string StagingNode(const std::string& tmp);

  // ---- CkptTable::Apply only ----
  void Apply(const CkptRecord& r);
  void Index(const CkptNode& n, bool add);
  // After a replay: kCorruption for an operation of an unknown kind or on an
  // unsafe path; moves next_seq past the seqs in use.
  Status CheckLoaded();

 private:
  std::vector<std::string> markers_;
  std::map<uint64_t, OriginOp> ops_;  // by seq
  uint64_t next_seq_ = 1;
  std::set<uint64_t> held_;
};

}  // namespace hoard
