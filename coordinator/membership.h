// File: coordinator/membership.h
//
// Membership is the coordinator's list of nodes: each registered member's
// NodeInfo (endpoint, capacity, placement weight, draining flag, up/down)
// and when it was last heard from. It decides the membership facts; the
// coordinator (coordinator/coordinator.h) journals them and bumps the epochs.
//
// Up and down: `up` is durable state (part of the placement every party
// computes from the map at an epoch); silence is not. A loaded node gets a
// full timeout to heartbeat again; MarkSilentDown turns nodes silent past the
// down timeout down; a heartbeat or a registration brings one back up (the
// coordinator does that, as it must commit it).
//
// Down and out: a node marked down is `held` (it keeps its placement weight,
// so nothing moves) and stamped with the wall-clock second it went down
// (down_since_unix, saved with it); MarkOut ends the hold of nodes down for
// longer than --out-after, and their chunks then get new owners. Wall clock,
// not the monotonic one, because the count must survive a coordinator
// restart. Coming back (SetUp) clears both: a node back within --out-after
// finds its placement as it left it.
//
// Every change is undoable: the coordinator changes a node, tries to commit,
// and on failure puts back what it saved (Register returns the node as it
// was, Remove returns the node removed, MarkSilentDown and MarkOut the nodes
// they changed as they were, for Undo).
//
// Invariants: nodes are keyed by name and info.name equals the key; a
// registered node's weight is CapacityWeight(capacity_bytes).
//
// Thread-safety: none; the coordinator calls it under its mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proto/messages.h"

namespace hoard {

class Membership {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Node {
    proto::NodeInfo info;
    TimePoint last_heard;
  };

  // Replaces the members by `nodes` (from the durable state), each heard
  // from `now`.
  void Load(const std::vector<proto::NodeInfo>& nodes, TimePoint now);

  // Records a registration: a new member, or a known one (re)starting. Up,
  // heard now.
  struct Registration {
    bool inserted = false;
    proto::NodeInfo before;  // the node before (empty when inserted)
    // The placement changes (a new member or another placement weight).
    bool placement_changed = false;
    // Anything the cluster map shows changed (placement, endpoint, weight,
    // up): the coordinator commits only then.
    bool news = false;
  };
  Registration Register(const proto::RegisterNode& req, TimePoint now, int64_t wall_unix);
  // Undoes Register after a failed commit.
  void UndoRegister(const std::string& name, const Registration& r);

  // The volatile facts of a heartbeat (usage, chunk count, scrub results,
  // build), heard now. nullptr for an unknown node.
  Node* Heard(const proto::Heartbeat& req, TimePoint now, int64_t wall_unix);

  Node* Find(const std::string& name);
  // Forgets a node and returns it (nullopt if unknown), for Restore.
  std::optional<Node> Remove(const std::string& name);
  void Restore(const std::string& name, Node node);

  // Marks up nodes silent for longer than `down_after` down, as of the wall
  // clock's `wall_unix`, and returns them as they were. With `hold` they keep
  // their placement (held) until MarkOut; without, they are out at once.
  // `placement_changed` tells whether any placement weight changed.
  std::vector<proto::NodeInfo> MarkSilentDown(TimePoint now, std::chrono::milliseconds down_after, int64_t wall_unix,
                                              bool hold, bool* placement_changed);
  // Ends the hold of nodes down for longer than `out_after` at `wall_unix`
  // (they are out: their chunks get new owners) and returns them as they
  // were; `placement_changed` as above (false for a draining one).
  std::vector<proto::NodeInfo> MarkOut(int64_t wall_unix, std::chrono::seconds out_after, bool* placement_changed);
  // Puts back nodes as MarkSilentDown or MarkOut returned them (after a
  // failed commit).
  void Undo(const std::vector<proto::NodeInfo>& before);
  // Up again (heard from): not held, no down time.
  static void SetUp(proto::NodeInfo* info);
  // Every node heard from `now` (after the coordinator itself stalled).
  void RestartTimeouts(TimePoint now);

  // The names of the nodes up now.
  std::set<std::string> UpNames() const;
  // For the checkpoints: `up` nodes, up and draining ones (`leaving`), and
  // down ones silent for longer than `lost_after` (`lost`).
  void CkptClasses(TimePoint now, std::chrono::milliseconds lost_after, std::set<std::string>* up,
                   std::set<std::string>* lost, std::set<std::string>* leaving) const;
  // Every member's NodeInfo, by name: the cluster map's and status's view.
  std::vector<proto::NodeInfo> Infos() const;
  // The same without the volatile facts (usage, chunks, last seen, build): what is
  // saved, so that heartbeats do not make every commit rewrite every node.
  std::vector<proto::NodeInfo> DurableInfos() const;

  // By name; for the coordinator's per-node walks (progress, status).
  const std::map<std::string, Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

 private:
  std::map<std::string, Node> nodes_;  // by name
};

}  // namespace hoard
