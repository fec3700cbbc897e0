#include "coordinator/coordinator.h"

#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <random>

#include "common/units.h"
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

namespace {

Status CheckEvictionSettings(uint8_t priority, int64_t ttl_s, const std::string& tenant) {
  if (priority > proto::kPriorityHigh) return Status::InvalidArgument("priority must be low, normal or high");
  if (ttl_s < 0) return Status::InvalidArgument("a TTL cannot be negative");
  if (!IsValidName(tenant)) {
    return Status::InvalidArgument("invalid tenant name '" + tenant + "': use 1-64 letters, digits, '.', '_' or '-'");
  }
  return Status::Ok();
}

// "3m ago", "never": a last-read time for a log line.
std::string Ago(int64_t then, int64_t now) {
  if (then <= 0) return "never";
  const int64_t s = std::max<int64_t>(0, now - then);
  return s < 120 ? std::to_string(s) + "s ago" : s < 7200 ? std::to_string(s / 60) + "m ago"
                                                           : std::to_string(s / 3600) + "h ago";
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
    : options_(std::move(options)),
      store_(options_.data_dir, {.logger = options_.logger, .journal = options_.state_journal}),
      leases_(options_.leases),
      mounts_({.clock = options_.clock}) {
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
  std::shared_ptr<CkptOrigin> shared;
  if (!options_.shared_store.empty()) {
    if (!options_.ckpt.open_origin) return Status::InvalidArgument("a shared store needs ckpt.open_origin to open it");
    Result<std::unique_ptr<CkptOrigin>> opened = options_.ckpt.open_origin(options_.shared_store);
    if (!opened.ok()) return opened.status().Annotate("the shared store " + options_.shared_store);
    shared = std::move(*opened);
  }
  manifests_ = std::make_unique<ManifestStore>(&store_, std::move(shared));
  MutexLock lock(&mu_);
  epoch_ = state.epoch;
  placement_epoch_ = state.placement_epoch;
  const auto now = options_.clock->Now();
  last_liveness_check_ = now;
  members_.Load(state.nodes, now);
  quotas_ = state.quotas;
  last_read_saved_ = now;
  for (auto& d : state.datasets) {
    Result<Manifest> m = manifests_->Load(d);
    if (!m.ok()) {
      return m.status().Annotate("dataset " + d.name + " is in the coordinator state but its manifest is unusable");
    }
    catalogue_.Put({d, std::move(*m)});
  }
  leases_.Load(state.leases);
  options_.logger->info("coordinator state loaded from {}: epoch {}, {} nodes, {} datasets, {} job leases",
                        store_.dir(), epoch_, members_.size(), catalogue_.size(), leases_.size());
  return Status::Ok();
}

CoordinatorState Coordinator::SnapshotLocked() const {
  CoordinatorState s;
  s.epoch = epoch_;
  s.placement_epoch = placement_epoch_;
  s.nodes = members_.DurableInfos();
  s.datasets = catalogue_.Metas();
  s.quotas = quotas_;
  s.leases = leases_.All();
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
    last_read_dirty_ = false;  // saved with it
    last_read_saved_ = options_.clock->Now();
  }
  return s;
}

Status Coordinator::SaveLocked() {
  Status s = store_.Save(SnapshotLocked());
  if (!s.ok()) {
    options_.logger->error("cannot save coordinator state: {}", s.ToString());
  } else {
    last_read_dirty_ = false;
    last_read_saved_ = options_.clock->Now();
  }
  return s;
}

void Coordinator::ShareUpNodesLocked() {
  // The levels `hoard checkpoint` and user.hoard.state show count only the
  // holders that are up (CkptTable's "Shown level").
  if (ckpt_table_ != nullptr) ckpt_table_->SetUpNodes(members_.UpNames());
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
  const Membership::Registration reg = members_.Register(req, options_.clock->Now(), options_.clock->WallSeconds());
  progress_.ForgetNode(req.name);  // a restarted node reports afresh
  if (reg.news) {
    options_.logger->info("node {} {} at {} (weight {})", req.name, reg.inserted ? "joined" : "re-registered",
                          req.endpoint, proto::CapacityWeight(req.capacity_bytes));
    Status s = CommitLocked(reg.placement_changed);
    if (!s.ok()) {
      members_.UndoRegister(req.name, reg);
      return s;
    }
  }
  return proto::RegisterNodeReply{epoch_};
}

Result<proto::HeartbeatReply> Coordinator::Heartbeat(const proto::Heartbeat& req) {
  if (!IsValidName(req.name)) return Status::InvalidArgument("invalid node name '" + req.name + "' in a heartbeat");
  MutexLock lock(&mu_);
  Membership::Node* node = members_.Heard(req, options_.clock->Now(), options_.clock->WallSeconds());
  if (node == nullptr) return proto::HeartbeatReply{epoch_, /*registered=*/false};
  Membership::Node& n = *node;
  if (req.datasets_included) {
    std::vector<proto::DatasetReport> checked;
    checked.reserve(req.datasets.size());
    for (const auto& r : req.datasets) {
      // Checked once, here, so that progress and settling judge the same
      // reports: one whose ordinals do not decode counts as not sent.
      if (Status s = catalogue_.CheckReport(r); !s.ok()) {
        options_.logger->warn("node {}: report on dataset {:016x} ignored: {}", req.name, r.uid, s.ToString());
        continue;
      }
      checked.push_back(r);
    }
    progress_.Report(req.name, checked, options_.clock->Now());
  }
  if (!n.info.up) {
    const proto::NodeInfo before = n.info;
    Membership::SetUp(&n.info);
    // Back within --out-after, it kept its placement: nothing moves. Back
    // after it, it owns its share again (unless draining).
    const bool placement_changed = proto::PlacementWeight(before) != proto::PlacementWeight(n.info);
    if (CommitLocked(placement_changed).ok()) {
      options_.logger->info("node {} is up again{}{}", req.name,
                            before.down_since_unix == 0
                                ? ""
                                : fmt::format(" after {} s down", options_.clock->WallSeconds() - before.down_since_unix),
                            before.held ? ": it kept its placement, nothing moved" : "");
    } else {
      n.info = before;  // not durable: the map stays as it was, the next heartbeat tries again
    }
  }
  return proto::HeartbeatReply{epoch_, true, !progress_.HasReported(req.name), progress_.settled()};
}

Result<proto::NodeDrainReply> Coordinator::SetDraining(const std::string& name, bool drain) {
  MutexLock lock(&mu_);
  Membership::Node* node = members_.Find(name);
  if (node == nullptr) return Status::NotFound("no node named '" + name + "'");
  proto::NodeInfo& info = node->info;
  if (drain && !info.draining) {
    if (std::string last = LastOwnerLocked(name, "draining"); !last.empty()) return Status::InvalidArgument(last);
  }
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
  Membership::Node* node = members_.Find(name);
  if (node == nullptr) return Status::NotFound("no node named '" + name + "'");
  if (std::string last = LastOwnerLocked(name, "removing"); !last.empty()) return Status::InvalidArgument(last);
  const proto::NodeInfo& info = node->info;
  if (info.up) {
    // Even with --force: its agent would register again at its next
    // heartbeat and the removal would be undone a second later.
    return Status::InvalidArgument("node " + name + " is up: its agent still heartbeats and would register again a "
                                   "second after a removal; drain it first (hoard node drain " + name +
                                   " --wait), stop its agent, then remove it");
  }
  const bool owns = proto::PlacementWeight(info) > 0;
  if (owns && !force) {
    const int64_t down_for = options_.clock->WallSeconds() - info.down_since_unix;
    return Status::InvalidArgument(
        "node " + name + " is down (for " + std::to_string(down_for) + " s) but keeps its placement until it is out (" +
        "--out-after " + std::to_string(options_.out_after.count()) + " s): its chunks would move now; wait until "
        "`hoard status` shows it out, or remove it with --force");
  }
  std::optional<Membership::Node> removed = members_.Remove(name);
  if (Status s = CommitLocked(/*placement_changed=*/owns); !s.ok()) {
    members_.Restore(name, std::move(*removed));
    return s;
  }
  progress_.ForgetNode(name);
  options_.logger->info("node {} removed from the cluster{}", name, owns ? " (forced: its chunks move)" : "");
  return proto::NodeRemoveReply{epoch_};
}

std::string Coordinator::LastOwnerLocked(const std::string& name, const std::string& what) const {
  if (catalogue_.size() == 0) return "";
  bool self_owns = false, others_own = false;
  for (const auto& [n, node] : members_.nodes()) {
    const bool owns = proto::PlacementWeight(node.info) > 0;
    (n == name ? self_owns : others_own) |= owns;
  }
  if (!self_owns || others_own) return "";
  return what + " node " + name + " would leave the " + std::to_string(catalogue_.size()) +
         " dataset(s) no node to hold them: it is the last node with a placement weight. Add a node first, or "
         "remove the datasets (hoard dataset rm NAME)";
}

void Coordinator::CheckLiveness() {
  ExpireLeases();
  if (CheckMembers()) CheckCkptCopies();
  CheckEvictions();
}

bool Coordinator::CheckMembers() {
  MutexLock lock(&mu_);
  const auto now = options_.clock->Now();
  const auto since_last = now - last_liveness_check_;
  last_liveness_check_ = now;
  if (since_last > options_.down_after / 2 && since_last < std::chrono::hours(24 * 365)) {
    options_.logger->warn("the liveness check ran {} ms late; giving every node a fresh timeout",
                          std::chrono::duration_cast<std::chrono::milliseconds>(since_last).count());
    members_.RestartTimeouts(now);
    return false;
  }
  MarkDownAndOutLocked(now);
  progress_.UpdateSettled(catalogue_, members_, placement_epoch_, now, options_.down_after);
  return true;
}

void Coordinator::MarkDownAndOutLocked(std::chrono::steady_clock::time_point now) {
  const int64_t wall = options_.clock->WallSeconds();
  const bool hold = options_.out_after.count() > 0;
  bool placement_changed = false;
  // A down node keeps its placement (held) for out_after: readers skip it,
  // nothing moves. Without a hold its chunks get new owners at once.
  std::vector<proto::NodeInfo> silent = members_.MarkSilentDown(now, options_.down_after, wall, hold,
                                                                &placement_changed);
  if (!silent.empty()) {
    if (CommitLocked(placement_changed).ok()) {
      for (const proto::NodeInfo& n : silent) {
        options_.logger->warn("node {} marked down: silent for more than {} ms{}", n.name, options_.down_after.count(),
                              hold ? fmt::format("; it keeps its placement for {} s (--out-after)",
                                                 options_.out_after.count())
                                   : "");
      }
    } else {
      members_.Undo(silent);  // not durable: the next check tries again
    }
  }
  // Out: its chunks get new owners (PlacementWeight), which refill them from
  // surviving replicas or the origin.
  std::vector<proto::NodeInfo> out = members_.MarkOut(wall, options_.out_after, &placement_changed);
  if (!out.empty()) {
    if (CommitLocked(placement_changed).ok()) {
      for (const proto::NodeInfo& n : out) {
        options_.logger->warn("node {} is out: down for {} s, more than --out-after {} s; its chunks get new owners",
                              n.name, wall - n.down_since_unix, options_.out_after.count());
      }
    } else {
      members_.Undo(out);
    }
  }
}

proto::ClusterMap Coordinator::GetClusterMap() const {
  MutexLock lock(&mu_);
  proto::ClusterMap map;
  map.epoch = epoch_;
  map.placement_epoch = placement_epoch_;
  map.nodes = members_.Infos();
  map.datasets = catalogue_.Metas();
  map.origin_limits = options_.origin_limits;
  map.ckpt_replicas = options_.ckpt.replicas;
  map.ckpt_chunk_size = options_.ckpt.chunk_size;
  return map;
}

Result<proto::ManifestPart> Coordinator::GetManifest(const proto::GetManifest& req, std::string* payload) const {
  MutexLock lock(&mu_);
  return catalogue_.GetManifest(req, payload);
}

// ---- datasets --------------------------------------------------------------

Coordinator::WalkReservation::~WalkReservation() {
  MutexLock lock(&c->mu_);
  c->catalogue_.Release(name);
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
  HOARD_RETURN_IF_ERROR(CheckEvictionSettings(req.priority, req.ttl_s, req.tenant));
  {
    MutexLock lock(&mu_);
    if (const Catalogue::Dataset* d = catalogue_.Find(req.name); d != nullptr && req.retry &&
        d->meta.source == req.source && d->meta.chunk_size == chunk_size && d->meta.replicas == req.replicas) {
      return proto::DatasetAddReply{.meta = d->meta};  // a resend (proto/message_types.h)
    }
    if (catalogue_.Find(req.name) != nullptr || catalogue_.Reserved(req.name)) {
      return Status::AlreadyExists("dataset " + req.name + " already exists");
    }
    HOARD_RETURN_IF_ERROR(catalogue_.Reserve(req.name, options_.max_concurrent_adds));
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
  meta.priority = req.priority;
  meta.pinned = req.pinned;
  meta.ttl_s = req.ttl_s;
  meta.tenant = req.tenant;
  HOARD_ASSIGN_OR_RETURN(Manifest manifest, WalkSource("dataset add " + req.name, meta, meta.created_unix));
  SetManifestFields(manifest, &meta);
  HOARD_RETURN_IF_ERROR(manifests_->Save(meta, manifest.bytes()));

  MutexLock lock(&mu_);
  catalogue_.Put({meta, std::move(manifest)});
  Status s = CommitLocked(false);
  if (!s.ok()) {
    // The manifest stays: if the failed record could not be cut off it may
    // come back at a restart, and must find its manifest; if not, the next
    // start removes it as an orphan.
    catalogue_.Erase(meta.name);
    return s;
  }
  const uint64_t ms = MillisSince(start);
  options_.logger->info("dataset {} added: {} files, {} bytes, {} chunks of {} bytes, {} replica(s), walked in {} ms",
                        meta.name, meta.file_count, meta.total_bytes, meta.total_chunks, meta.chunk_size, meta.replicas,
                        ms);
  return proto::DatasetAddReply{meta, ms};
}

Result<proto::DatasetRefreshReply> Coordinator::RefreshDataset(const std::string& name) {
  Catalogue::Dataset current;
  {
    MutexLock lock(&mu_);
    const Catalogue::Dataset* d = catalogue_.Find(name);
    if (d == nullptr) return Status::NotFound("dataset " + name + " does not exist");
    if (catalogue_.Reserved(name)) {
      return Status::Unavailable("dataset " + name + " is being refreshed already; retry when that finishes");
    }
    HOARD_RETURN_IF_ERROR(catalogue_.Reserve(name, options_.max_concurrent_adds));
    current = *d;
  }
  WalkReservation reservation{this, name};

  const auto start = std::chrono::steady_clock::now();
  const std::string what = "dataset refresh " + name;
  options_.logger->info("{}: walking {} (current version {})", what, current.meta.source, current.meta.version);
  proto::DatasetMeta next = current.meta;
  next.version = current.meta.version + 1;
  HOARD_ASSIGN_OR_RETURN(Manifest manifest, WalkSource(what, next, options_.clock->WallSeconds()));

  const ManifestDiff diff = DiffManifests(current.manifest, manifest, /*max_listed=*/1000);
  proto::DatasetRefreshReply reply;
  reply.previous_version = current.meta.version;
  reply.files_added = diff.files_added;
  reply.files_changed = diff.files_changed;
  reply.files_removed = diff.files_removed;
  reply.other_changes = diff.other_changes;
  reply.fetch_bytes = diff.fetch_bytes;
  reply.fetch_chunks = diff.fetch_chunks;
  reply.changed_bytes = diff.changed_bytes;
  for (const ManifestChange& c : diff.files) {
    if (reply.files.size() == 100) break;
    reply.files.push_back({c.path, ManifestChangeName(c.kind), c.size});
  }
  for (const OtherChange& c : diff.others) reply.others.push_back({c.path, c.what, 0});
  if (SameNamespace(current.manifest, manifest)) {
    reply.walk_ms = MillisSince(start);
    options_.logger->info("{}: the origin is unchanged since version {}; nothing recorded", what, current.meta.version);
    MutexLock lock(&mu_);
    const Catalogue::Dataset* d = catalogue_.Find(name);
    reply.meta = d != nullptr ? d->meta : current.meta;
    return reply;
  }
  SetManifestFields(manifest, &next);
  HOARD_RETURN_IF_ERROR(manifests_->Save(next, manifest.bytes()));

  MutexLock lock(&mu_);
  Catalogue::Dataset* d = catalogue_.Find(name);
  if (d == nullptr || d->meta.uid != current.meta.uid) {
    // Removed (and maybe added again) during the walk. Nobody else names
    // this uid and version: the manifest goes with the refresh.
    (void)manifests_->Remove(next, /*shared_too=*/false);
    return Status::NotFound("dataset " + name + " was removed while it was being refreshed");
  }
  // What may have changed during the walk (the warm flag) comes from now.
  next.warm = d->meta.warm;
  Catalogue::Dataset previous = std::move(*d);
  *d = Catalogue::Dataset{next, std::move(manifest), current.meta.version,
                          std::make_shared<const std::vector<KeptRun>>(diff.kept)};
  // The placement does not change: a chunk's owners depend on its key only,
  // and unchanged files keep theirs.
  Status s = CommitLocked(/*placement_changed=*/false);
  if (!s.ok()) {
    // The new manifest stays, as for an add (it may come back at a restart).
    *d = std::move(previous);
    return s;
  }
  // After the state no longer names it; a failure leaves an orphan that the
  // next start removes.
  (void)manifests_->Remove(previous.meta);
  reply.meta = next;
  reply.changed = true;
  reply.walk_ms = MillisSince(start);
  options_.logger->info(
      "dataset {} refreshed to version {}: {} files added, {} changed, {} removed, {} other "
      "changes; {} bytes in {} chunks to fetch again; walked in {} ms",
      name, next.version, diff.files_added, diff.files_changed, diff.files_removed, diff.other_changes,
      diff.fetch_bytes, diff.fetch_chunks, reply.walk_ms);
  return reply;
}

proto::DatasetListReply Coordinator::ListDatasets() const {
  MutexLock lock(&mu_);
  proto::DatasetListReply r;
  r.datasets = catalogue_.Metas();
  return r;
}

Status Coordinator::RemoveDataset(const std::string& name) {
  MutexLock lock(&mu_);
  Catalogue::Dataset* d = catalogue_.Find(name);
  if (d == nullptr) return Status::NotFound("dataset " + name + " does not exist");
  Catalogue::Dataset removed = std::move(*d);
  catalogue_.Erase(name);
  // Its leases go with it, in the same commit (a dataset added again later
  // under the name is another dataset).
  std::vector<proto::Lease> leases = leases_.ReleaseDataset(name);
  Status s = CommitLocked(false);
  if (!s.ok()) {
    catalogue_.Put(std::move(removed));
    for (const auto& l : leases) leases_.Restore(l);
    return s;
  }
  progress_.ForgetDataset(removed.meta.uid);
  // After the state no longer names it; a failure here leaves an orphan that
  // the next start removes.
  (void)manifests_->Remove(removed.meta);
  options_.logger->info("dataset {} removed", name);
  return Status::Ok();
}

void Coordinator::Shutdown() {
  shutting_down_.store(true);
  if (publisher_) publisher_->Stop();
}

Result<proto::WarmReply> Coordinator::Warm(const std::string& name) {
  MutexLock lock(&mu_);
  Catalogue::Dataset* d = catalogue_.Find(name);
  if (d == nullptr) return Status::NotFound("dataset " + name + " does not exist");
  if (d->meta.warm && d->meta.resident) return proto::WarmReply{d->meta};
  eviction::PlanInput in = EvictionInputLocked();
  in.admit = name;
  Result<eviction::Plan> plan = eviction::PlanAdmission(in);
  if (!plan.ok()) {
    options_.logger->warn("dataset {}: warm-up refused: {}", name, plan.status().message());
    return plan.status();
  }
  const proto::DatasetMeta before = d->meta;
  HOARD_RETURN_IF_ERROR(EvictLocked(
      plan->evict, "to make room for " + name,
      [d] {
        d->meta.warm = true;
        d->meta.resident = true;
      },
      [d, before] { d->meta = before; }));
  options_.logger->info("dataset {}: warm-up requested{}{}", name, before.resident ? "" : " (resident again)",
                        plan->partial ? "; larger than the cache: its owners keep what fits" : "");
  return proto::WarmReply{d->meta, plan->evict};
}

eviction::PlanInput Coordinator::EvictionInputLocked() const {
  eviction::PlanInput in;
  for (const proto::NodeInfo& n : members_.Infos()) {
    const double w = proto::PlacementWeight(n);
    // other_bytes: what the node's disk holds besides dataset chunks, as it
    // last reported (store/disk_usage.h). Checkpoint copies are never
    // dropped for room; the mount's read tier is not counted, as it shrinks
    // to what datasets leave it.
    if (w > 0) {
      in.nodes.push_back({.name = n.name, .weight = w, .capacity_bytes = n.capacity_bytes,
                          .other_bytes = n.used_checkpoint_bytes});
    }
  }
  for (const auto& [name, d] : catalogue_.datasets()) {
    eviction::Dataset e{.meta = d.meta};
    for (const eviction::Node& n : in.nodes) {
      if (d.meta.resident && !d.meta.warm) {
        if (uint64_t held = progress_.HeldBytes(n.name, d.meta.uid); held > 0) e.held[n.name] = held;
      }
      if (auto owned = progress_.OwnedBytes(n.name, d.meta.uid, d.meta.version, placement_epoch_)) {
        e.owned[n.name] = *owned;
      }
    }
    in.datasets.push_back(std::move(e));
  }
  in.leased = leases_.HeldDatasets(NowUnix());
  in.quotas = quotas_;
  in.policy = options_.quota_policy;
  return in;
}

Status Coordinator::EvictLocked(const std::vector<std::string>& names, const std::string& why,
                                const std::function<void()>& also, const std::function<void()>& undo_also) {
  std::vector<std::pair<Catalogue::Dataset*, proto::DatasetMeta>> before;
  for (const std::string& v : names) {
    Catalogue::Dataset* vd = catalogue_.Find(v);
    if (vd == nullptr) continue;
    before.emplace_back(vd, vd->meta);
    vd->meta.resident = false;
    vd->meta.warm = false;
    ++vd->meta.evictions;
  }
  if (also) also();
  if (Status s = CommitLocked(false); !s.ok()) {
    for (auto& [vd, meta] : before) vd->meta = meta;
    if (undo_also) undo_also();
    return s;
  }
  const int64_t now = options_.clock->WallSeconds();
  for (const auto& [vd, meta] : before) {
    // Nodes drop its chunks at their next map (NodeAgent::CollectGarbage).
    options_.logger->info("evicting dataset {} (tenant {}, priority {}, {} with replicas, last read {}) {}", meta.name,
                          meta.tenant, proto::PriorityName(meta.priority),
                          FormatBytes(double(meta.total_bytes * meta.replicas)), Ago(meta.last_read_unix, now), why);
  }
  return Status::Ok();
}

Result<proto::DatasetSetReply> Coordinator::SetDataset(const proto::DatasetSet& req) {
  MutexLock lock(&mu_);
  Catalogue::Dataset* d = catalogue_.Find(req.name);
  if (d == nullptr) return Status::NotFound("dataset " + req.name + " does not exist");
  proto::DatasetMeta next = d->meta;
  if (req.has_priority) next.priority = req.priority;
  if (req.has_pinned) next.pinned = req.pinned;
  if (req.has_ttl) next.ttl_s = req.ttl_s;
  if (req.has_tenant) next.tenant = req.tenant;
  HOARD_RETURN_IF_ERROR(CheckEvictionSettings(next.priority, next.ttl_s, next.tenant));
  if (next.priority == d->meta.priority && next.pinned == d->meta.pinned && next.ttl_s == d->meta.ttl_s &&
      next.tenant == d->meta.tenant) {
    return proto::DatasetSetReply{d->meta};  // already so
  }
  const proto::DatasetMeta before = d->meta;
  d->meta = next;
  if (Status s = CommitLocked(false); !s.ok()) {
    d->meta = before;
    return s;
  }
  options_.logger->info("dataset {}: priority {}, {}, TTL {}, tenant {}", req.name, proto::PriorityName(next.priority),
                        next.pinned ? "pinned" : "not pinned",
                        next.ttl_s > 0 ? std::to_string(next.ttl_s) + "s" : std::string("none"), next.tenant);
  return proto::DatasetSetReply{d->meta};
}

Result<proto::QuotaSetReply> Coordinator::SetQuota(const std::string& tenant, uint64_t bytes) {
  if (!IsValidName(tenant)) return Status::InvalidArgument("invalid tenant name '" + tenant + "'");
  MutexLock lock(&mu_);
  auto it = quotas_.find(tenant);
  const std::optional<uint64_t> before = it == quotas_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  if (before.value_or(0) != bytes) {
    if (bytes == 0) {
      quotas_.erase(tenant);
    } else {
      quotas_[tenant] = bytes;
    }
    if (Status s = SaveLocked(); !s.ok()) {
      if (before) {
        quotas_[tenant] = *before;
      } else {
        quotas_.erase(tenant);
      }
      return s;
    }
    options_.logger->info("tenant {}: quota {}", tenant, bytes == 0 ? std::string("none") : FormatBytes(double(bytes)));
  }
  proto::QuotaSetReply r{.quota = {.tenant = tenant, .quota_bytes = bytes}};
  for (const proto::TenantQuota& q : eviction::QuotaUsage(EvictionInputLocked().datasets, quotas_)) {
    if (q.tenant == tenant) r.quota = q;
  }
  return r;
}

proto::QuotaListReply Coordinator::ListQuotas() const {
  MutexLock lock(&mu_);
  return {eviction::QuotaUsage(EvictionInputLocked().datasets, quotas_),
          eviction::QuotaPolicyName(options_.quota_policy)};
}

void Coordinator::DatasetsRead(const std::vector<uint64_t>& uids) {
  if (uids.empty()) return;
  MutexLock lock(&mu_);
  const int64_t now = options_.clock->WallSeconds();
  for (const auto& [name, d] : catalogue_.datasets()) {
    if (std::find(uids.begin(), uids.end(), d.meta.uid) == uids.end()) continue;
    Catalogue::Dataset* m = catalogue_.Find(name);
    if (m->meta.last_read_unix != now) {
      m->meta.last_read_unix = now;
      last_read_dirty_ = true;
    }
  }
}

void Coordinator::CheckEvictions() {
  MutexLock lock(&mu_);
  const eviction::PlanInput in = EvictionInputLocked();
  const int64_t now = options_.clock->WallSeconds();
  const std::vector<std::string> expired = eviction::ExpiredByTtl(in.datasets, in.leased, now);
  if (!expired.empty()) {
    (void)EvictLocked(expired, "not read for its TTL");  // a failure is logged; the next check tries again
  } else if (last_read_dirty_ && options_.clock->Now() - last_read_saved_ >= options_.last_read_save_interval) {
    (void)SaveLocked();
  }
}

// ---- status ----------------------------------------------------------------

// Progress is computed from a snapshot taken under the lock and then without
// it: combining reports is proportional to the chunks the nodes hold, and
// heartbeats must not wait for it.
Result<proto::ClusterStatusReply> Coordinator::GetStatus(const std::string& dataset) const {
  proto::ClusterStatusReply r;
  std::vector<Progress::StatusInput> inputs;
  {
    MutexLock lock(&mu_);
    r.epoch = epoch_;
    r.origin_limits = options_.origin_limits;
    r.nodes = members_.Infos();
    const auto now = options_.clock->Now();
    if (!dataset.empty()) {
      const Catalogue::Dataset* d = catalogue_.Find(dataset);
      if (d == nullptr) return Status::NotFound("dataset " + dataset + " does not exist");
      inputs.push_back(progress_.Input(*d, members_, placement_epoch_, now));
    } else {
      for (const auto& [name, d] : catalogue_.datasets()) {
        inputs.push_back(progress_.Input(d, members_, placement_epoch_, now));
      }
    }
  }
  for (const Progress::StatusInput& in : inputs) r.datasets.push_back(Progress::Compute(in, *options_.logger));
  r.mounts = mounts_.Live();
  r.build = proto::OwnBuild();
  r.ckpt_jobs = ckpt_table_->JobSummaries();
  r.ckpt_origin = CkptOriginHealth();
  proto::QuotaListReply quotas = ListQuotas();
  r.quotas = std::move(quotas.quotas);
  r.quota_policy = std::move(quotas.policy);
  r.leases = ListLeases().leases;
  return r;
}

// ---- job leases ------------------------------------------------------------

Result<proto::LeaseTakeReply> Coordinator::TakeLease(const proto::LeaseTake& req, const std::string& key_class) {
  MutexLock lock(&mu_);
  if (catalogue_.Find(req.dataset) == nullptr) {
    return Status::NotFound("dataset " + req.dataset + " does not exist: a lease names a dataset of hoard dataset list");
  }
  std::optional<proto::Lease> before;
  if (const proto::Lease* l = leases_.Find(req.dataset, req.job)) before = *l;
  HOARD_ASSIGN_OR_RETURN(proto::Lease lease,
                         leases_.Take(req.dataset, req.job, req.ttl_s, key_class, req.caller, NowUnix()));
  if (Status s = SaveLocked(); !s.ok()) {
    if (before) leases_.Restore(*before);
    else leases_.Erase(req.dataset, req.job);
    return s;
  }
  return proto::LeaseTakeReply{.lease = std::move(lease)};
}

Result<proto::LeaseReleaseReply> Coordinator::ReleaseLease(const proto::LeaseRelease& req) {
  if (req.job.empty()) return Status::InvalidArgument("a lease release needs a job id (--job ID)");
  MutexLock lock(&mu_);
  std::vector<proto::Lease> released = leases_.Release(req.dataset, req.job);
  if (released.empty()) return proto::LeaseReleaseReply{};
  if (Status s = SaveLocked(); !s.ok()) {
    for (const auto& l : released) leases_.Restore(l);
    return s;
  }
  return proto::LeaseReleaseReply{.released = static_cast<uint32_t>(released.size())};
}

proto::LeaseListReply Coordinator::ListLeases() const {
  MutexLock lock(&mu_);
  const int64_t now = NowUnix();
  return proto::LeaseListReply{.leases = leases_.List(now), .now_unix = now};
}

std::set<std::string> Coordinator::LeasedDatasets() const {
  MutexLock lock(&mu_);
  return leases_.HeldDatasets(NowUnix());
}

void Coordinator::ExpireLeases() {
  MutexLock lock(&mu_);
  std::vector<proto::Lease> expired = leases_.Expire(NowUnix());
  if (expired.empty()) return;
  if (!SaveLocked().ok()) {
    // Still expired for HeldDatasets and List; dropped for good next round.
    for (const auto& l : expired) leases_.Restore(l);
    return;
  }
  for (const auto& l : expired) {
    options_.logger->info("lease of job {} on dataset {} expired (not renewed since {})", l.job, l.dataset,
                          l.renewed_unix);
  }
}

}  // namespace hoard
