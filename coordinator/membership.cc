#include "coordinator/membership.h"

namespace hoard {

void Membership::Load(const std::vector<proto::NodeInfo>& nodes, TimePoint now) {
  nodes_.clear();
  // Up/down is state (it is part of the placement every party computes from
  // the map at this epoch); silence is not: every node that was up gets a
  // full timeout to heartbeat again, and a down one stays down until it does.
  for (const proto::NodeInfo& n : nodes) nodes_.emplace(n.name, Node{n, now});
}

Membership::Registration Membership::Register(const proto::RegisterNode& req, TimePoint now, int64_t wall_unix) {
  auto [it, inserted] = nodes_.try_emplace(req.name);
  Node& n = it->second;
  Registration r;
  r.inserted = inserted;
  r.before = n.info;
  n.info.name = req.name;
  n.info.endpoint = req.endpoint;
  n.info.capacity_bytes = req.capacity_bytes;
  n.info.used_bytes = req.used_bytes;
  n.info.used_dataset_bytes = req.used_dataset_bytes;
  n.info.used_read_tier_bytes = req.used_read_tier_bytes;
  n.info.used_checkpoint_bytes = req.used_checkpoint_bytes;
  n.info.build = req.build;
  n.info.weight = proto::CapacityWeight(req.capacity_bytes);
  SetUp(&n.info);
  n.info.last_seen_unix = wall_unix;
  n.last_heard = now;
  r.placement_changed = inserted || proto::PlacementWeight(r.before) != proto::PlacementWeight(n.info);
  // Coming back up is news too, even for a node placement skips (drained):
  // members learn it from the epoch, and `up` is journalled state.
  r.news = r.placement_changed || r.before.endpoint != n.info.endpoint || r.before.weight != n.info.weight ||
           r.before.up != n.info.up;
  return r;
}

void Membership::UndoRegister(const std::string& name, const Registration& r) {
  if (r.inserted) {
    nodes_.erase(name);
  } else if (auto it = nodes_.find(name); it != nodes_.end()) {
    it->second.info = r.before;
  }
}

Membership::Node* Membership::Heard(const proto::Heartbeat& req, TimePoint now, int64_t wall_unix) {
  auto it = nodes_.find(req.name);
  if (it == nodes_.end()) return nullptr;
  Node& n = it->second;
  n.last_heard = now;
  n.info.last_seen_unix = wall_unix;
  n.info.used_bytes = req.used_bytes;
  n.info.used_dataset_bytes = req.used_dataset_bytes;
  n.info.used_read_tier_bytes = req.used_read_tier_bytes;
  n.info.used_checkpoint_bytes = req.used_checkpoint_bytes;
  n.info.capacity_bytes = req.capacity_bytes;
  n.info.chunks = req.chunks;
  n.info.scrub_last_pass_unix = req.scrub_last_pass_unix;
  n.info.scrub_corrupt = req.scrub_corrupt;
  n.info.build = req.build;
  return &n;
}

Membership::Node* Membership::Find(const std::string& name) {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::optional<Membership::Node> Membership::Remove(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  Node removed = std::move(it->second);
  nodes_.erase(it);
  return removed;
}

void Membership::Restore(const std::string& name, Node node) { nodes_.emplace(name, std::move(node)); }

std::vector<proto::NodeInfo> Membership::MarkSilentDown(TimePoint now, std::chrono::milliseconds down_after,
                                                       int64_t wall_unix, bool hold, bool* placement_changed) {
  std::vector<proto::NodeInfo> silent;
  *placement_changed = false;
  for (auto& [name, n] : nodes_) {
    if (n.info.up && now - n.last_heard > down_after) {
      silent.push_back(n.info);
      n.info.up = false;
      n.info.held = hold;
      n.info.down_since_unix = wall_unix;
      *placement_changed = *placement_changed || proto::PlacementWeight(silent.back()) != proto::PlacementWeight(n.info);
    }
  }
  return silent;
}

std::vector<proto::NodeInfo> Membership::MarkOut(int64_t wall_unix, std::chrono::seconds out_after,
                                                bool* placement_changed) {
  std::vector<proto::NodeInfo> out;
  *placement_changed = false;
  for (auto& [name, n] : nodes_) {
    // Strictly more than out_after whole seconds: down_since_unix is cut to
    // the second, so a node is held at least out_after, never less.
    if (!n.info.up && n.info.held && wall_unix - n.info.down_since_unix > out_after.count()) {
      out.push_back(n.info);
      n.info.held = false;
      *placement_changed = *placement_changed || proto::PlacementWeight(out.back()) != proto::PlacementWeight(n.info);
    }
  }
  return out;
}

void Membership::Undo(const std::vector<proto::NodeInfo>& before) {
  for (const proto::NodeInfo& info : before) {
    if (auto it = nodes_.find(info.name); it != nodes_.end()) it->second.info = info;
  }
}

void Membership::SetUp(proto::NodeInfo* info) {
  info->up = true;
  info->held = false;
  info->down_since_unix = 0;
}

void Membership::RestartTimeouts(TimePoint now) {
  for (auto& [name, n] : nodes_) n.last_heard = now;
}

std::set<std::string> Membership::UpNames() const {
  std::set<std::string> up;
  for (const auto& [name, n] : nodes_) {
    if (n.info.up) up.insert(name);
  }
  return up;
}

void Membership::CkptClasses(TimePoint now, std::chrono::milliseconds lost_after, std::set<std::string>* up,
                             std::set<std::string>* lost, std::set<std::string>* leaving) const {
  for (const auto& [name, n] : nodes_) {
    if (n.info.up && n.info.draining) leaving->insert(name);
    if (n.info.up) {
      up->insert(name);
    } else if (now - n.last_heard > lost_after) {
      lost->insert(name);
    }
  }
}

std::vector<proto::NodeInfo> Membership::Infos() const {
  std::vector<proto::NodeInfo> out;
  out.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) out.push_back(n.info);
  return out;
}

std::vector<proto::NodeInfo> Membership::DurableInfos() const {
  std::vector<proto::NodeInfo> out = Infos();
  for (proto::NodeInfo& info : out) {
    // Volatile facts are not state: they would make every commit rewrite
    // every node. (`up` is: it changes only by a commit, with the epochs.)
    info.used_bytes = 0;
    info.used_dataset_bytes = 0;
    info.used_read_tier_bytes = 0;
    info.used_checkpoint_bytes = 0;
    info.chunks = 0;
    info.last_seen_unix = 0;
    info.build = {};
  }
  return out;
}

}  // namespace hoard
