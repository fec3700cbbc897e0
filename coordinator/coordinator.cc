#include "coordinator/coordinator.h"

#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <random>

#include "proto/ordinals.h"
#include "striping/manifest_diff.h"

namespace hoard {

namespace {

// tcp://HOST:PORT with a port in 1..65535 and a non-empty host: what a peer
// will be asked to dial, so it must not be able to make a mount's connect fail.
bool ValidTcpEndpoint(const std::string& ep) {
  if (ep.rfind("tcp://", 0) != 0 || ep.size() > 256) return false;
  const std::string rest = ep.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= rest.size()) return false;
  const std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host == "*" || host.find_first_of(" /\\\0") != std::string::npos) return false;
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const int p = std::stoi(port);
  return p >= 1 && p <= 65535;
}

}  // namespace

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Coordinator::Coordinator(Options options)
    : options_(std::move(options)), store_(options_.data_dir, {.logger = options_.logger}) {
  if (!options_.open_origin) {
    OriginOptions o = options_.origin;
    options_.open_origin = [o](const std::string& source) { return OpenOrigin(source, o); };
  }
}

Result<std::unique_ptr<Coordinator>> Coordinator::Open(Options options) {
  if (options.data_dir.empty() || !options.logger) {
    return Status::InvalidArgument("coordinator needs a data directory and a logger");
  }
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  HOARD_RETURN_IF_ERROR(c->Load());
  HOARD_RETURN_IF_ERROR(c->OpenCheckpoints());
  {
    MutexLock lock(&c->mu_);
    c->ShareUpNodesLocked();
  }
  return c;
}

Status Coordinator::Load() {
  HOARD_ASSIGN_OR_RETURN(CoordinatorState state, store_.Open());
  MutexLock lock(&mu_);
  epoch_ = state.epoch;
  placement_epoch_ = state.placement_epoch;
  const auto now = options_.clock->Now();
  last_liveness_check_ = now;
  for (auto& n : state.nodes) {
    // Up/down is state (it is part of the placement every party computes
    // from the map at this epoch); silence is not: every node that was up
    // gets a full timeout to heartbeat again, and a down one stays down until
    // it does.
    nodes_.emplace(n.name, NodeState{n, now, {}});
  }
  for (auto& d : state.datasets) {
    Result<Manifest> m = store_.LoadManifest(d);
    if (!m.ok()) {
      return m.status().Annotate("dataset " + d.name + " is in the coordinator state but its manifest is unusable");
    }
    datasets_.emplace(d.name, DatasetState{d, std::move(*m)});
  }
  options_.logger->info("coordinator state loaded from {}: epoch {}, {} nodes, {} datasets", store_.dir(),
                        epoch_, nodes_.size(), datasets_.size());
  return Status::Ok();
}

CoordinatorState Coordinator::SnapshotLocked() const {
  CoordinatorState s;
  s.epoch = epoch_;
  s.placement_epoch = placement_epoch_;
  for (const auto& [name, n] : nodes_) {
    proto::NodeInfo info = n.info;
    // Volatile facts are not state: they would make every commit rewrite
    // every node. (`up` is: it changes only by a commit, with the epochs.)
    info.used_bytes = 0;
    info.chunks = 0;
    info.last_seen_unix = 0;
    s.nodes.push_back(std::move(info));
  }
  for (const auto& [name, d] : datasets_) s.datasets.push_back(d.meta);
  return s;
}

Status Coordinator::CommitLocked(bool placement_changed) {
  ++epoch_;
  if (placement_changed) ++placement_epoch_;
  Status s = store_.Save(SnapshotLocked());
  if (!s.ok()) {
    // Nothing durable changed (StateStore cuts a failed record), and the
    // caller undoes its change: the epochs go back with it.
    --epoch_;
    if (placement_changed) --placement_epoch_;
    options_.logger->error("cannot save coordinator state: {}", s.ToString());
  } else {
    ShareUpNodesLocked();
  }
  return s;
}

std::set<std::string> Coordinator::UpNodesLocked() const {
  std::set<std::string> up;
  for (const auto& [name, n] : nodes_) {
    if (n.info.up) up.insert(name);
  }
  return up;
}

void Coordinator::ShareUpNodesLocked() {
  // The levels `hoard checkpoint` and user.hoard.state show count only the
  // holders that are up (CkptTable's "Shown level").
  if (ckpt_table_ != nullptr) ckpt_table_->SetUpNodes(UpNodesLocked());
}

uint64_t Coordinator::epoch() const {
  MutexLock lock(&mu_);
  return epoch_;
}

// ---- membership ------------------------------------------------------------

Result<proto::RegisterNodeReply> Coordinator::RegisterNode(const proto::RegisterNode& req) {
  if (!IsValidName(req.name)) return Status::InvalidArgument("invalid node name '" + req.name + "'");
  if (!ValidTcpEndpoint(req.endpoint)) {
    return Status::InvalidArgument("node endpoint must be tcp://host:port (a host peers can dial and a port), got '" +
                                   req.endpoint + "'");
  }
  MutexLock lock(&mu_);
  auto [it, inserted] = nodes_.try_emplace(req.name);
  NodeState& n = it->second;
  const proto::NodeInfo before = n.info;
  n.info.name = req.name;
  n.info.endpoint = req.endpoint;
  n.info.capacity_bytes = req.capacity_bytes;
  n.info.used_bytes = req.used_bytes;
  n.info.weight = proto::CapacityWeight(req.capacity_bytes);
  n.info.up = true;
  n.info.last_seen_unix = options_.clock->WallSeconds();
  n.last_heard = options_.clock->Now();
  n.reports.clear();  // a restarted node reports afresh
  n.reported = false;
  const bool placement_changed =
      inserted || proto::PlacementWeight(before) != proto::PlacementWeight(n.info);
  // Coming back up is news too, even for a node placement skips (drained):
  // members learn it from the epoch, and `up` is journalled state.
  if (placement_changed || before.endpoint != n.info.endpoint || before.weight != n.info.weight ||
      before.up != n.info.up) {
    options_.logger->info("node {} {} at {} (weight {})", req.name, inserted ? "joined" : "re-registered",
                          req.endpoint, n.info.weight);
    Status s = CommitLocked(placement_changed);
    if (!s.ok()) {
      if (inserted) {
        nodes_.erase(it);
      } else {
        n.info = before;
      }
      return s;
    }
  }
  return proto::RegisterNodeReply{epoch_};
}

Result<proto::HeartbeatReply> Coordinator::Heartbeat(const proto::Heartbeat& req) {
  if (!IsValidName(req.name)) return Status::InvalidArgument("invalid node name '" + req.name + "' in a heartbeat");
  MutexLock lock(&mu_);
  auto it = nodes_.find(req.name);
  if (it == nodes_.end()) return proto::HeartbeatReply{epoch_, /*registered=*/false};
  NodeState& n = it->second;
  n.last_heard = options_.clock->Now();
  n.info.last_seen_unix = options_.clock->WallSeconds();
  n.info.used_bytes = req.used_bytes;
  n.info.capacity_bytes = req.capacity_bytes;
  n.info.chunks = req.chunks;
  n.info.scrub_last_pass_unix = req.scrub_last_pass_unix;
  n.info.scrub_corrupt = req.scrub_corrupt;
  if (req.datasets_included) {
    std::map<uint64_t, proto::DatasetReport> before;
    before.swap(n.reports);
    const auto now = options_.clock->Now();
    for (const auto& r : req.datasets) {
      // Checked once, here, so that progress and settling judge the same
      // reports: one whose ordinals do not decode counts as not sent.
      if (Status s = CheckReportLocked(r); !s.ok()) {
        options_.logger->warn("node {}: report on dataset {:016x} ignored: {}", req.name, r.uid, s.ToString());
        continue;
      }
      auto old = before.find(r.uid);
      if (old != before.end() && old->second.version == r.version && r.cached_bytes > old->second.cached_bytes) {
        fill_rates_[r.uid].Add(now, r.cached_bytes - old->second.cached_bytes);
      }
      n.reports[r.uid] = r;
    }
    n.reported = true;
  }
  if (!n.info.up) {
    n.info.up = true;
    // It owns its share again (unless draining).
    if (CommitLocked(/*placement_changed=*/proto::PlacementWeight(n.info) > 0).ok()) {
      options_.logger->info("node {} is up again", req.name);
    } else {
      n.info.up = false;  // not durable: the map stays as it was, the next heartbeat tries again
    }
  }
  return proto::HeartbeatReply{epoch_, true, !n.reported, settled_};
}

Status Coordinator::CheckReportLocked(const proto::DatasetReport& r) const {
  for (const auto& [name, d] : datasets_) {
    if (d.meta.uid != r.uid || d.meta.version != r.version) continue;
    if (r.cached_chunks > r.owned_chunks || r.owned_chunks > d.meta.total_chunks) {
      return Status::InvalidArgument("chunk counts out of range");
    }
    return proto::DecodeOrdinals(r.cached_ordinals, d.meta.total_chunks, r.cached_chunks, [](uint64_t) {});
  }
  return Status::Ok();  // another version: kept, and ignored until it is current
}

Result<proto::NodeDrainReply> Coordinator::SetDraining(const std::string& name, bool drain) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::NotFound("no node named '" + name + "'");
  proto::NodeInfo& info = it->second.info;
  if (info.draining != drain) {
    const proto::NodeInfo before = info;
    info.draining = drain;
    if (Status s = CommitLocked(/*placement_changed=*/PlacementWeight(before) != PlacementWeight(info)); !s.ok()) {
      info = before;
      return s;
    }
    options_.logger->info("node {} {}", name, drain ? "is draining: its chunks move to new owners" : "taken back");
  }
  return proto::NodeDrainReply{info, epoch_};
}

Result<proto::NodeRemoveReply> Coordinator::RemoveNode(const std::string& name, bool force) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::NotFound("no node named '" + name + "'");
  const bool owns = proto::PlacementWeight(it->second.info) > 0;
  if (owns && !force) {
    return Status::InvalidArgument("node " + name + " is up and owns chunks: drain it first (hoard node drain " +
                                   name + " --wait), stop it, then remove it; or remove it with --force");
  }
  NodeState removed = std::move(it->second);
  nodes_.erase(it);
  if (Status s = CommitLocked(/*placement_changed=*/owns); !s.ok()) {
    nodes_.emplace(name, std::move(removed));
    return s;
  }
  options_.logger->info("node {} removed from the cluster{}", name, owns ? " (forced: its chunks move)" : "");
  return proto::NodeRemoveReply{epoch_};
}

void Coordinator::CheckLiveness() {
  if (CheckMembers()) CheckCkptCopies();
}

bool Coordinator::CheckMembers() {
  MutexLock lock(&mu_);
  const auto now = options_.clock->Now();
  const auto since_last = now - last_liveness_check_;
  last_liveness_check_ = now;
  if (since_last > options_.down_after / 2 && since_last < std::chrono::hours(24 * 365)) {
    options_.logger->warn("the liveness check ran {} ms late; giving every node a fresh timeout",
                          std::chrono::duration_cast<std::chrono::milliseconds>(since_last).count());
    for (auto& [name, n] : nodes_) n.last_heard = now;
    return false;
  }
  std::vector<NodeState*> silent;
  bool placement_changed = false;
  for (auto& [name, n] : nodes_) {
    if (n.info.up && now - n.last_heard > options_.down_after) {
      silent.push_back(&n);
      placement_changed = placement_changed || proto::PlacementWeight(n.info) > 0;
      n.info.up = false;
    }
  }
  // A down node's chunks get new owners (PlacementWeight), which refill them
  // from surviving replicas or the origin.
  if (!silent.empty()) {
    if (CommitLocked(placement_changed).ok()) {
      for (NodeState* n : silent) {
        options_.logger->warn("node {} marked down: silent for more than {} ms", n->info.name,
                              options_.down_after.count());
      }
    } else {
      for (NodeState* n : silent) n->info.up = true;  // not durable: the next check tries again
    }
  }
  UpdateSettledLocked(now);
  return true;
}

void Coordinator::UpdateSettledLocked(std::chrono::steady_clock::time_point now) {
  // A dataset must stay settled for a whole down timeout before nodes are
  // told: an owner whose last report counted may have died a moment ago, and
  // the copies others hold would then be the only ones left. Within the
  // timeout it is marked down, the placement moves, and the clock restarts.
  std::map<uint64_t, SettledSince> still;
  settled_.clear();
  for (const proto::SettledDataset& d : SettledLocked()) {
    auto it = settled_since_.find(d.uid);
    SettledSince since{d, now};
    if (it != settled_since_.end() && it->second.dataset.version == d.version &&
        it->second.dataset.placement_epoch == d.placement_epoch) {
      since = it->second;
    }
    if (now - since.since >= options_.down_after) settled_.push_back(d);
    still.emplace(d.uid, since);
  }
  settled_since_ = std::move(still);
}

std::vector<proto::SettledDataset> Coordinator::SettledLocked() const {
  std::vector<proto::SettledDataset> settled;
  for (const auto& [name, d] : datasets_) {
    bool all = true, any = false;
    for (const auto& [node, n] : nodes_) {
      if (proto::PlacementWeight(n.info) <= 0) continue;
      any = true;
      auto r = n.reports.find(d.meta.uid);
      if (r == n.reports.end() || r->second.version != d.meta.version ||
          r->second.placement_epoch != placement_epoch_ || r->second.cached_chunks != r->second.owned_chunks) {
        all = false;
        break;
      }
    }
    if (all && any) settled.push_back({d.meta.uid, d.meta.version, placement_epoch_});
  }
  return settled;
}

proto::ClusterMap Coordinator::GetClusterMap() const {
  MutexLock lock(&mu_);
  proto::ClusterMap map;
  map.epoch = epoch_;
  map.placement_epoch = placement_epoch_;
  for (const auto& [name, n] : nodes_) map.nodes.push_back(n.info);
  for (const auto& [name, d] : datasets_) map.datasets.push_back(d.meta);
  map.origin_limits = options_.origin_limits;
  map.ckpt_replicas = options_.ckpt.replicas;
  map.ckpt_chunk_size = options_.ckpt.chunk_size;
  return map;
}

Result<proto::ManifestPart> Coordinator::GetManifest(const proto::GetManifest& req, std::string* payload) const {
  MutexLock lock(&mu_);
  auto it = datasets_.find(req.name);
  if (it == datasets_.end()) return Status::NotFound("dataset " + req.name + " does not exist");
  if (it->second.meta.version != req.version) {
    return Status::Stale("dataset " + req.name + " is at version " + std::to_string(it->second.meta.version) +
                         ", not " + std::to_string(req.version));
  }
  std::string_view bytes = it->second.manifest.bytes();
  if (req.offset > bytes.size()) return Status::InvalidArgument("manifest offset past its end");
  uint64_t len = std::min<uint64_t>({req.length, proto::GetManifest::kMaxPart, bytes.size() - req.offset});
  payload->assign(bytes.substr(req.offset, len));
  return proto::ManifestPart{bytes.size(), req.offset};
}

// ---- datasets --------------------------------------------------------------

Coordinator::WalkReservation::~WalkReservation() {
  MutexLock lock(&c->mu_);
  c->adding_.erase(name);
}

Status Coordinator::ReserveWalkLocked(const std::string& name) {
  if (adding_.size() >= static_cast<size_t>(options_.max_concurrent_adds)) {
    return Status::Unavailable(std::to_string(adding_.size()) +
                               " datasets are walking their sources; retry when one finishes");
  }
  adding_.insert(name);
  return Status::Ok();
}

Result<Manifest> Coordinator::WalkSource(const std::string& what, const proto::DatasetMeta& meta,
                                         int64_t created_unix) {
  Result<std::unique_ptr<Origin>> origin = options_.open_origin(meta.source);
  if (!origin.ok()) return origin.status().Annotate(what);
  Result<OriginEntry> root = (*origin)->Stat("");
  if (!root.ok()) return root.status().Annotate(what);

  ManifestBuilder builder(meta.uid, meta.version, meta.chunk_size);
  builder.SetRoot(root->mode, root->uid, root->gid, root->mtime_ns);
  const uint64_t chunk_limit = kMaxDatasetChunks;
  uint64_t chunks = 0;
  Status walk = (*origin)->Walk([&](const OriginEntry& e) {
    if (shutting_down_.load()) return Status::Unavailable("the coordinator is shutting down");
    if (e.type == EntryType::kFile) {
      chunks += ChunkCount(e.size, meta.chunk_size);
      if (chunks > chunk_limit) {
        return Status::InvalidArgument("the dataset has more than " + std::to_string(chunk_limit) + " chunks of " +
                                       std::to_string(meta.chunk_size) + " bytes; use a larger --chunk-size");
      }
    }
    builder.Add(e.path, e.mode, e.uid, e.gid, e.size, e.mtime_ns, e.symlink_target);
    if (builder.size() % 100000 == 0) options_.logger->info("{}: {} entries so far", what, builder.size());
    return Status::Ok();
  });
  if (!walk.ok()) return walk.Annotate(what + ": walk " + meta.source);
  Result<std::string> bytes = builder.Finish(created_unix);
  if (!bytes.ok()) return bytes.status().Annotate(what);
  return Manifest::Parse(std::move(*bytes));
}

namespace {

// The fields of `meta` that describe its manifest.
void SetManifestFields(const Manifest& manifest, proto::DatasetMeta* meta) {
  meta->manifest_bytes = manifest.bytes().size();
  meta->manifest_checksum = manifest.checksum();
  meta->file_count = manifest.file_count();
  meta->total_bytes = manifest.total_bytes();
  meta->total_chunks = manifest.total_chunks();
}

uint64_t MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<proto::DatasetAddReply> Coordinator::AddDataset(const proto::DatasetAdd& req) {
  if (!IsValidName(req.name)) {
    return Status::InvalidArgument("invalid dataset name '" + req.name +
                                   "': use 1-64 letters, digits, '.', '_' or '-'");
  }
  const uint64_t chunk_size = req.chunk_size == 0 ? kDefaultChunkSize : req.chunk_size;
  if (!ValidChunkSize(chunk_size)) {
    return Status::InvalidArgument("chunk size " + std::to_string(chunk_size) +
                                   " must be a power of two between 64 KiB and 64 MiB");
  }
  if (req.replicas < 1 || req.replicas > 16) return Status::InvalidArgument("replicas must be between 1 and 16");
  {
    MutexLock lock(&mu_);
    if (datasets_.count(req.name) || adding_.count(req.name)) {
      return Status::AlreadyExists("dataset " + req.name + " already exists");
    }
    HOARD_RETURN_IF_ERROR(ReserveWalkLocked(req.name));
  }
  WalkReservation reservation{this, req.name};

  const auto start = std::chrono::steady_clock::now();
  options_.logger->info("dataset add {}: walking {}", req.name, req.source);
  proto::DatasetMeta meta;
  meta.name = req.name;
  meta.uid = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  meta.version = 1;
  meta.source = req.source;
  meta.chunk_size = chunk_size;
  meta.replicas = req.replicas;
  meta.created_unix = options_.clock->WallSeconds();
  HOARD_ASSIGN_OR_RETURN(Manifest manifest, WalkSource("dataset add " + req.name, meta, meta.created_unix));
  SetManifestFields(manifest, &meta);
  HOARD_RETURN_IF_ERROR(store_.SaveManifest(meta, manifest.bytes()));

  MutexLock lock(&mu_);
  datasets_.emplace(meta.name, DatasetState{meta, std::move(manifest)});
  Status s = CommitLocked(false);
  if (!s.ok()) {
    // The manifest stays: if the failed record could not be cut off it may
    // come back at a restart, and must find its manifest; if not, the next
    // start removes it as an orphan.
    datasets_.erase(meta.name);
    return s;
  }
  const uint64_t ms = MillisSince(start);
  options_.logger->info("dataset {} added: {} files, {} bytes, {} chunks of {} bytes, {} replica(s), walked in {} ms",
                        meta.name, meta.file_count, meta.total_bytes, meta.total_chunks, meta.chunk_size,
                        meta.replicas, ms);
  return proto::DatasetAddReply{meta, ms};
}

Result<proto::DatasetRefreshReply> Coordinator::RefreshDataset(const std::string& name) {
  DatasetState current;
  {
    MutexLock lock(&mu_);
    auto it = datasets_.find(name);
    if (it == datasets_.end()) return Status::NotFound("dataset " + name + " does not exist");
    if (adding_.count(name)) {
      return Status::Unavailable("dataset " + name + " is being refreshed already; retry when that finishes");
    }
    HOARD_RETURN_IF_ERROR(ReserveWalkLocked(name));
    current = it->second;
  }
  WalkReservation reservation{this, name};

  const auto start = std::chrono::steady_clock::now();
  const std::string what = "dataset refresh " + name;
  options_.logger->info("{}: walking {} (current version {})", what, current.meta.source, current.meta.version);
  proto::DatasetMeta next = current.meta;
  next.version = current.meta.version + 1;
  HOARD_ASSIGN_OR_RETURN(Manifest manifest, WalkSource(what, next, options_.clock->WallSeconds()));

  const ManifestDiff diff = DiffManifests(current.manifest, manifest);
  proto::DatasetRefreshReply reply;
  reply.previous_version = current.meta.version;
  reply.files_added = diff.files_added;
  reply.files_changed = diff.files_changed;
  reply.files_removed = diff.files_removed;
  reply.other_changes = diff.other_changes;
  reply.fetch_bytes = diff.fetch_bytes;
  reply.fetch_chunks = diff.fetch_chunks;
  for (const ManifestChange& c : diff.files) {
    reply.files.push_back({c.path, ManifestChangeName(c.kind), c.size});
  }
  if (SameNamespace(current.manifest, manifest)) {
    reply.walk_ms = MillisSince(start);
    options_.logger->info("{}: the origin is unchanged since version {}; nothing recorded", what,
                          current.meta.version);
    MutexLock lock(&mu_);
    auto it = datasets_.find(name);
    reply.meta = it != datasets_.end() ? it->second.meta : current.meta;
    return reply;
  }
  SetManifestFields(manifest, &next);
  HOARD_RETURN_IF_ERROR(store_.SaveManifest(next, manifest.bytes()));

  MutexLock lock(&mu_);
  auto it = datasets_.find(name);
  if (it == datasets_.end() || it->second.meta.uid != current.meta.uid) {
    // Removed (and maybe added again) during the walk. Nobody else names
    // this uid and version: the manifest goes with the refresh.
    (void)store_.RemoveManifest(next);
    return Status::NotFound("dataset " + name + " was removed while it was being refreshed");
  }
  // What may have changed during the walk (the warm flag) comes from now.
  next.warm = it->second.meta.warm;
  DatasetState previous = std::move(it->second);
  it->second = DatasetState{next, std::move(manifest)};
  // The placement does not change: a chunk's owners depend on its key only,
  // and unchanged files keep theirs.
  Status s = CommitLocked(/*placement_changed=*/false);
  if (!s.ok()) {
    // The new manifest stays, as for an add (it may come back at a restart).
    it->second = std::move(previous);
    return s;
  }
  // After the state no longer names it; a failure leaves an orphan that the
  // next start removes.
  (void)store_.RemoveManifest(previous.meta);
  reply.meta = next;
  reply.changed = true;
  reply.walk_ms = MillisSince(start);
  options_.logger->info("dataset {} refreshed to version {}: {} files added, {} changed, {} removed, {} other "
                        "changes; {} bytes in {} chunks to fetch again; walked in {} ms",
                        name, next.version, diff.files_added, diff.files_changed, diff.files_removed,
                        diff.other_changes, diff.fetch_bytes, diff.fetch_chunks, reply.walk_ms);
  return reply;
}

proto::DatasetListReply Coordinator::ListDatasets() const {
  MutexLock lock(&mu_);
  proto::DatasetListReply r;
  for (const auto& [name, d] : datasets_) r.datasets.push_back(d.meta);
  return r;
}

Status Coordinator::RemoveDataset(const std::string& name) {
  MutexLock lock(&mu_);
  auto it = datasets_.find(name);
  if (it == datasets_.end()) return Status::NotFound("dataset " + name + " does not exist");
  DatasetState removed = std::move(it->second);
  datasets_.erase(it);
  Status s = CommitLocked(false);
  if (!s.ok()) {
    datasets_.emplace(name, std::move(removed));
    return s;
  }
  fill_rates_.erase(removed.meta.uid);
  // After the state no longer names it; a failure here leaves an orphan that
  // the next start removes.
  (void)store_.RemoveManifest(removed.meta);
  options_.logger->info("dataset {} removed", name);
  return Status::Ok();
}

void Coordinator::Shutdown() {
  shutting_down_.store(true);
  if (publisher_) publisher_->Stop();
}

Result<proto::WarmReply> Coordinator::Warm(const std::string& name) {
  MutexLock lock(&mu_);
  auto it = datasets_.find(name);
  if (it == datasets_.end()) return Status::NotFound("dataset " + name + " does not exist");
  if (!it->second.meta.warm) {
    it->second.meta.warm = true;
    Status s = CommitLocked(false);
    if (!s.ok()) {
      it->second.meta.warm = false;
      return s;
    }
    options_.logger->info("dataset {}: warm-up requested", name);
  }
  return proto::WarmReply{it->second.meta};
}

// ---- status ----------------------------------------------------------------

// Progress is computed from a snapshot taken under the lock and then without
// it: combining reports is proportional to the chunks the nodes hold, and
// heartbeats must not wait for it. Nobody's placement is computed here: each
// node reports which of its owned chunks it holds, by ordinal.
struct Coordinator::StatusInput {
  proto::DatasetMeta meta;
  Manifest manifest;
  uint64_t placement_epoch = 0;
  double fill_rate = 0;  // bytes/s
  struct Node {
    std::string name;
    bool up = false;
    bool eligible = false;  // positive placement weight: owns a share
    std::optional<proto::DatasetReport> report;
  };
  std::vector<Node> nodes;  // in member order
};

Coordinator::StatusInput Coordinator::StatusInputLocked(const DatasetState& d) const {
  StatusInput in{d.meta, d.manifest, placement_epoch_, 0, {}};
  if (auto rate = fill_rates_.find(d.meta.uid); rate != fill_rates_.end()) {
    in.fill_rate = rate->second.Rate(options_.clock->Now());
  }
  for (const auto& [name, n] : nodes_) {
    StatusInput::Node node{name, n.info.up, proto::PlacementWeight(n.info) > 0, std::nullopt};
    auto rep = n.reports.find(d.meta.uid);
    if (rep != n.reports.end()) node.report = rep->second;
    in.nodes.push_back(std::move(node));
  }
  return in;
}

proto::DatasetStatus Coordinator::ComputeStatus(const StatusInput& in) const {
  proto::DatasetStatus st;
  st.meta = in.meta;
  const uint64_t eligible = std::count_if(in.nodes.begin(), in.nodes.end(), [](const auto& n) { return n.eligible; });
  const uint64_t effective = std::min<uint64_t>(in.meta.replicas, eligible);
  st.expected_bytes = in.meta.total_bytes * effective;
  // copies[ordinal] = how many owners report the chunk cached.
  std::vector<uint8_t> copies(in.meta.total_chunks, 0);
  std::vector<uint64_t> ordinals;
  bool all_reported = eligible > 0;
  for (const StatusInput::Node& n : in.nodes) {
    st.shares.push_back({n.name, 0, 0, 0, false});
    const bool current = n.up && n.report && n.report->version == in.meta.version &&
                         n.report->placement_epoch == in.placement_epoch;
    ordinals.clear();
    Status decoded = current ? proto::DecodeOrdinals(n.report->cached_ordinals, in.meta.total_chunks,
                                                     n.report->cached_chunks,
                                                     [&](uint64_t o) { ordinals.push_back(o); })
                             : Status::NotFound("");
    if (current && !decoded.ok()) {
      options_.logger->warn("node {}: unusable report on dataset {}: {}", n.name, in.meta.name, decoded.ToString());
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

Result<proto::ClusterStatusReply> Coordinator::GetStatus(const std::string& dataset) const {
  proto::ClusterStatusReply r;
  std::vector<StatusInput> inputs;
  {
    MutexLock lock(&mu_);
    r.epoch = epoch_;
    r.origin_limits = options_.origin_limits;
    for (const auto& [name, n] : nodes_) r.nodes.push_back(n.info);
    if (!dataset.empty()) {
      auto it = datasets_.find(dataset);
      if (it == datasets_.end()) return Status::NotFound("dataset " + dataset + " does not exist");
      inputs.push_back(StatusInputLocked(it->second));
    } else {
      for (const auto& [name, d] : datasets_) inputs.push_back(StatusInputLocked(d));
    }
  }
  for (const StatusInput& in : inputs) r.datasets.push_back(ComputeStatus(in));
  r.ckpt_jobs = ckpt_table_->JobSummaries();
  r.ckpt_origin = CkptOriginHealth();
  return r;
}

}  // namespace hoard
