// File: checkpoint/ckpt_namespace.h
//
// CkptNamespace is the tree of checkpoint entries CkptTable keeps
// (ckpt_table.h): every directory, file and symlink under MOUNT/checkpoints
// by id, with its parent and name, and what POSIX derives from the tree
// (paths, a directory's st_nlink, the job an entry belongs to). The root
// ("", id 0) is never stored: it is root's, mode 1777, and its times are
// kept in memory only. Orphans (removed files kept for their old
// generations, CkptNode::orphan) are stored by id but have no name and no
// parent: no path reaches them.
//
// It answers lookups and resolves paths; it decides nothing about drains,
// copies or the origin. It changes only through Put and Del, which
// CkptTable::Apply calls for a record's entries (live, after the journal
// append, and on replay), so it is always what the journal says.
//
// Invariants: every non-orphan entry but the root is in its parent's
// children under its name, and its parent is a directory (CheckLoaded
// refuses a replay that breaks this, or that has a cycle of parents, an
// unsafe name or chunks that do not fit a file's size); next_id and
// next_commit_seq are above every id and commit_seq in use.
//
// Thread-safety: not thread-safe; guarded by CkptTable's mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "checkpoint/ckpt_store.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

// The copy of entry `n` in the record being built (added if not there yet):
// helpers that add to one record see the state before it, so the record may
// already hold a newer copy of an entry, and changes go to that one.
CkptNode* StagePut(CkptRecord* r, const CkptNode& n);

class CkptNamespace {
 public:
  // kInvalidArgument unless `path` is a safe checkpoint path ("" included).
  static Status CheckPath(const std::string& path);
  // Path resolution: the entry at `path` ("" is the root). kNotFound,
  // kNotDirectory (a file in the middle), kInvalidArgument (a bad path).
  Result<const CkptNode*> Resolve(const std::string& path) const;
  // The directory `path` would be in. Also kInvalidArgument for the root.
  Result<const CkptNode*> ResolveParent(const std::string& path) const;
  const CkptNode* Find(uint64_t id) const;  // null if none (and for the root)
  std::string Path(uint64_t id) const;      // "" for the root and orphans
  bool HasChildren(uint64_t id) const;
  // Whether `id` is `ancestor` or under it (everything is under the root).
  bool InSubtree(uint64_t id, uint64_t ancestor) const;
  // The top-level ancestor (itself if top-level); 0 for the root.
  uint64_t JobOf(uint64_t id) const;
  // The ancestor directly in the top-level directory (itself if there): the
  // job's "checkpoint" that holds `id`, for retention. 0 for the root, a
  // job itself, and orphans.
  uint64_t CheckpointOf(uint64_t id) const;
  // Calls fn for every file in the subtree of `id` (itself if a file).
  void ForEachFile(uint64_t id, const std::function<void(const CkptNode&)>& fn) const;
  // The entries directly in directory `id`, by name (null if none).
  const std::map<std::string, uint64_t>* Children(uint64_t id) const;
  // Every stored entry (orphans included, the root not), by id.
  const std::map<uint64_t, CkptNode>& entries() const { return nodes_; }
  // The wire entry of `n`: its path computed, its nlink, the root's times.
  proto::CkptEntry ToEntry(const CkptNode& n) const;
  uint32_t Nlink(const CkptNode& n) const;

  // Moves ctime (and, with `mtime`, mtime) of entry `id` to `now_ns` in `r`.
  // The root's are moved at once, in memory: they are not journaled.
  void Touch(CkptRecord* r, uint64_t id, int64_t now_ns, bool mtime);
  void SetRootTimes(int64_t now_ns) { root_mtime_ns_ = root_ctime_ns_ = now_ns; }

  // Ids and commit order: the next ones to hand out.
  uint64_t next_id() const { return next_id_; }
  uint64_t next_commit_seq() const { return next_commit_seq_; }

  // ---- CkptTable::Apply only ----
  void Put(const CkptNode& n);  // insert or replace by id
  void Del(uint64_t id);
  void AdvanceCounters(uint64_t next_id, uint64_t next_commit_seq);
  // After a replay: kCorruption unless operations could have built this
  // tree (see the top); moves the counters past the ids in use.
  Status CheckLoaded();

 private:
  void CountSubdir(const CkptNode& n, bool add);
  void Unname(const CkptNode& was);

  std::map<uint64_t, CkptNode> nodes_;
  std::map<uint64_t, std::map<std::string, uint64_t>> children_;  // dir id -> name -> id
  std::map<uint64_t, uint32_t> subdirs_;  // dir id -> directories in it (nlink)
  uint64_t next_id_ = 1;
  uint64_t next_commit_seq_ = 1;
  // Not durable: a restart starts them at the open.
  int64_t root_mtime_ns_ = 0;
  int64_t root_ctime_ns_ = 0;
};

}  // namespace hoard
