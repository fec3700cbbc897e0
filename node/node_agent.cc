#include "node/node_agent.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "checkpoint/ckpt_chunk_service.h"
#include "common/file_util.h"
#include "proto/ordinals.h"

namespace hoard {

NodeAgent::NodeAgent(Options options) : options_(std::move(options)) {}

NodeAgent::~NodeAgent() { Stop(); }

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(Options options) {
  if (options.name.empty() || options.listen.empty() || options.coordinator.empty() ||
      options.store_dir.empty() || !options.logger || options.context == nullptr) {
    return Status::InvalidArgument("node agent needs a name, listen and coordinator endpoints, a store "
                                   "directory, a logger and a zmq context");
  }
  std::unique_ptr<NodeAgent> agent(new NodeAgent(std::move(options)));
  HOARD_RETURN_IF_ERROR(agent->Init());
  return agent;
}

Status NodeAgent::Init() {
  auto& log = options_.logger;
  HOARD_ASSIGN_OR_RETURN(store_, ChunkStore::Open({.dir = JoinPath(options_.store_dir, "store"),
                                                   .capacity_bytes = options_.capacity_bytes,
                                                   .logger = log,
                                                   .on_corrupt = [this](const ChunkKey& key, uint64_t uid) {
                                                     {
                                                       MutexLock lock(&mu_);
                                                       refetch_.emplace_back(key, uid);
                                                     }
                                                     janitor_cv_.NotifyAll();
                                                   }}));
  OriginOptions origin = options_.origin;
  origin.max_connections = std::max(1, options_.origin_connections);
  origins_ = std::make_unique<OriginPool>(origin, options_.open_origin);
  gate_ = std::make_unique<OriginGate>(OriginGate::Limits{.connections = origin.max_connections});
  // A chunk this node newly owns is copied from the peers that hold it
  // before the origin is read (a join or a takeover moves data node to node).
  // The connect timeout covers the CURVE handshake (key exchange and the
  // peer's ZAP check, on its one I/O thread): with 16 fetch threads opening
  // connections at once on a busy node, 150 ms was too short and chunks
  // came from the origin instead of from a live peer.
  peers_ = std::make_unique<proto::ClientPool>(*options_.context, 4, std::chrono::milliseconds(1000));
  peer_source_ = std::make_unique<PeerSource>(peers_.get(), options_.name, std::chrono::seconds(5), log,
                                              options_.clock);
  HOARD_ASSIGN_OR_RETURN(replicas_, ReplicaStore::Open({.dir = JoinPath(store_->dir(), "ckpt"), .logger = log}));
  filler_ = std::make_unique<ChunkFiller>(store_.get(), origins_.get(), log, peer_source_.get(), gate_.get());
  warmer_ = std::make_unique<Warmer>(filler_.get(), store_.get(),
                                     Warmer::Options{.threads = options_.fetch_threads,
                                                     .retry_after = options_.warm_retry_after,
                                                     .logger = log,
                                                     .clock = options_.clock});
  // A warm-up that ran out of work is reported at once, not at the next
  // heartbeat, so `hoard warm --wait` ends as soon as the data is there.
  warmer_->SetOnIdle([this] {
    {
      MutexLock lock(&mu_);
      tick_now_ = true;
    }
    cv_.NotifyAll();
  });
  watcher_ = std::make_unique<ClusterWatcher>(ClusterWatcher::Options{
      .coordinator = options_.coordinator,
      .self = options_.name,
      .cache_dir = options_.store_dir,
      .timeout = options_.coordinator_timeout,
      .logger = log,
      .context = options_.context,
      .on_change = [this](const std::shared_ptr<const ClusterView>& v) { OnViewChange(v); }});
  service_ = std::make_unique<ChunkService>(
      store_.get(), filler_.get(), [this] { return watcher_->Current(); },
      // Never held up by a sync in progress: the RPC workers serve every
      // other request meanwhile (the request goes on with the current view).
      [this] { return watcher_->RefreshForRequest(ClusterWatcher::SyncInProgress::kDontWait); }, log);

  std::string data_endpoint;
  if (options_.data_port >= 0 && options_.listen.starts_with("tcp://")) {
    data_endpoint = options_.listen.substr(0, options_.listen.rfind(':') + 1) + std::to_string(options_.data_port);
  }
  server_ = std::make_unique<proto::RpcServer>(proto::RpcServer::Options{.endpoint = options_.listen,
                                                                       .name = "node " + options_.name,
                                                                       .workers = options_.serve_threads,
                                                                       .logger = log,
                                                                       .context = options_.context,
                                                                       .data_endpoint = data_endpoint});
  ChunkService* service = service_.get();
  server_->Handle<proto::GetChunk>([service](const proto::GetChunk& r, const proto::Envelope&, std::string* payload) {
    return service->GetChunk(r, payload);
  });
  ServeCkptChunks(*server_, replicas_.get());
  // Built before the server starts (Counters() reads it). Its first round
  // asks for the replicas this node should hold, so a node that comes back
  // with an empty disk rebuilds them from its peers.
  drainer_ = std::make_unique<Drainer>(
      Drainer::Options{.node = options_.name,
                       .coordinator = options_.coordinator,
                       .origin_source = options_.ckpt_origin,
                       .open_origin = options_.open_ckpt_origin,
                       .resolve = [this](const std::string& name) { return PeerEndpoint(name); },
                       .peers = peers_.get(),
                       .poll_interval = options_.ckpt_poll_interval,
                       .rpc_timeout = options_.coordinator_timeout,
                       .logger = log,
                       .context = options_.context,
                       .clock = options_.clock},
      replicas_.get());
  server_->Handle<proto::Ping>([this](const proto::Ping&, const proto::Envelope&, std::string*) {
    return Result<proto::Pong>(proto::Pong{.role = "node", .name = options_.name, .epoch = watcher_->Current()->epoch()});
  });
  HOARD_ASSIGN_OR_RETURN(
      scrubber_,
      Scrubber::Create({.store = store_.get(),
                        .replicas = replicas_.get(),
                        .read_tier_dir = JoinPath(store_->dir(), "read-tier"),
                        .state_path = JoinPath(options_.store_dir, "scrub.state"),
                        .interval = options_.scrub_interval,
                        .rate_bytes_per_s = options_.scrub_rate_bytes,
                        .busy = [this] { return DiskBusy(); },
                        .on_replica_lost = [this] { drainer_->RequestRebuild(); },
                        .logger = log,
                        .clock = options_.clock}));
  if (Result<DiskStats> d = DiskStats::Open(store_->dir()); d.ok()) disk_stats_ = *d;
  server_->Handle<proto::NodeStatus>([this](const proto::NodeStatus&, const proto::Envelope&, std::string*) {
    ChunkStore::Usage u = store_->usage();
    const NodeUsage kinds = usage();
    proto::NodeStatusReply r;
    r.node = proto::NodeInfo{.name = options_.name,
                             .endpoint = Advertised(),
                             .capacity_bytes = u.capacity_bytes,
                             .used_bytes = kinds.total(),
                             .chunks = u.chunks,
                             .used_dataset_bytes = kinds.dataset_bytes,
                             .used_read_tier_bytes = kinds.read_tier_bytes,
                             .used_checkpoint_bytes = kinds.checkpoint_bytes};
    r.counters = Counters();
    const Scrubber::Progress p = scrubber_->progress();
    r.scrub = proto::ScrubStatus{.pass = p.pass,
                                 .running = p.running,
                                 .files = p.pass_items,
                                 .files_done = p.pass_items_done,
                                 .bytes = p.pass_bytes,
                                 .bytes_done = p.pass_bytes_done,
                                 .started_unix = p.pass_started_unix,
                                 .last_pass_unix = p.last_pass_end_unix,
                                 .corrupt = p.corrupt_found + store_->corrupt_chunks()};
    r.node.scrub_last_pass_unix = r.scrub.last_pass_unix;
    r.node.scrub_corrupt = r.scrub.corrupt;
    r.node.build = proto::OwnBuild();
    return Result<proto::NodeStatusReply>(std::move(r));
  });
  server_->Handle<proto::Scrub>([this](const proto::Scrub&, const proto::Envelope&, std::string*) {
    return Result<proto::ScrubReply>(proto::ScrubReply{.pass = scrubber_->RequestPass()});
  });
  HOARD_RETURN_IF_ERROR(server_->Start());
  capacity_ = Capacity();
  // The control loop heartbeats again at its next tick: looking for a new
  // leader longer than one request's timeout would only delay its other work.
  coordinator_ = std::make_unique<proto::LeaderClient>(*options_.context, options_.coordinator,
                                                       proto::LeaderClient::Options{
                                                           .failover_wait = options_.coordinator_timeout});

  // Serve with the last map we saw until the coordinator answers.
  if (Status s = watcher_->LoadCached(); !s.ok() && s.code() != Code::kNotFound) {
    log->warn("saved cluster map not used: {}", s.ToString());
  }
  // The checkpoints and the read tier already on the disk count before the
  // first chunk is stored (the control thread measures every heartbeat).
  (void)MeasureUsage();
  warmer_->Start();
  drainer_->Start();
  scrubber_->Start();
  control_ = std::thread([this] { ControlLoop(); });
  janitor_ = std::thread([this] { JanitorLoop(); });
  ChunkStore::Usage u = store_->usage();
  log->info("node {} serving on {} (store {}: {} chunks, {} bytes used of {})", options_.name, Advertised(),
            store_->dir(), u.chunks, u.used_bytes, u.capacity_bytes == 0 ? std::string("unlimited")
                                                                        : std::to_string(u.capacity_bytes));
  if (!server_->data_endpoint().empty()) log->info("data channel on {}", server_->data_endpoint());
  return Status::Ok();
}

void NodeAgent::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  janitor_cv_.NotifyAll();
  if (control_.joinable()) control_.join();
  if (janitor_.joinable()) janitor_.join();
  if (scrubber_) scrubber_->Stop();
  if (drainer_) drainer_->Stop();
  if (warmer_) warmer_->Stop();
  if (server_) server_->Stop();
}

void NodeAgent::ControlLoop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    lock.Unlock();
    Status s = Tick();
    if (!s.ok()) options_.logger->debug("control round: {}", s.ToString());
    lock.Lock();
    const auto deadline = options_.clock->Now() + options_.heartbeat_interval;
    while (!stopping_ && !tick_now_) {
      if (!options_.clock->WaitUntil(&cv_, &mu_, deadline)) break;
    }
    tick_now_ = false;
  }
}

std::string NodeAgent::PeerEndpoint(const std::string& name) const {
  std::shared_ptr<const ClusterView> view = watcher_->Current();
  for (const proto::NodeInfo& n : view->map().nodes) {
    if (n.name == name) return n.up ? n.endpoint : std::string();
  }
  return "";
}

uint64_t NodeAgent::Capacity() const {
  if (options_.capacity_bytes != 0) return options_.capacity_bytes;
  // Unlimited: the store may fill its disk, so the disk's size is its share.
  struct statvfs st;
  if (::statvfs(store_->dir().c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
}

NodeUsage NodeAgent::usage() const {
  MutexLock lock(&mu_);
  return usage_;
}

NodeUsage NodeAgent::MeasureUsage() {
  NodeUsageRecord record;
  record.capacity_bytes = options_.capacity_bytes;
  record.usage.dataset_bytes = store_->usage().used_bytes;
  const ReplicaStore::Usage ckpt = replicas_->usage();
  record.usage.checkpoint_bytes = ckpt.chunk_bytes + ckpt.file_bytes;
  // The mount's tier, as it last said (absent: no mount has kept one here).
  ReadTierUsage tier;
  if (Result<ReadTierUsage> t = ReadReadTierUsage(ReadTierUsagePath(DefaultReadTierDir(store_->dir()))); t.ok()) {
    tier = *t;
  }
  record.usage.read_tier_bytes = tier.used_bytes;
  {
    MutexLock lock(&mu_);
    for (const auto& [uid, o] : owned_) {
      if (o.dataset->meta.warm) record.dataset_wanted_bytes += o.bytes;
    }
    usage_ = record.usage;
  }
  // Checkpoints always count (they are never refused); the tier counts up to
  // its allowance only: what it holds beyond that it gives back at its next
  // trim, and a warm-up must not wait for that.
  store_->SetOtherBytes(record.usage.checkpoint_bytes + std::min(tier.reserved_bytes, ReadTierAllowance(record)));
  if (Status s = WriteNodeUsage(NodeUsagePath(store_->dir()), record); !s.ok()) {
    if (!usage_write_failed_) {
      options_.logger->warn("cannot tell the mount what this node's disk holds (its read tier then ignores "
                            "--capacity): {}",
                            s.ToString());
    }
    usage_write_failed_ = true;
  } else {
    usage_write_failed_ = false;
  }
  return record.usage;
}

Status NodeAgent::RegisterSelf() {
  const NodeUsage kinds = MeasureUsage();
  Result<proto::RegisterNodeReply> r = coordinator_->Call(
      proto::RegisterNode{.name = options_.name,
                          .endpoint = Advertised(),
                          .capacity_bytes = capacity_,
                          .used_bytes = kinds.total(),
                          .build = proto::OwnBuild(),
                          .used_dataset_bytes = kinds.dataset_bytes,
                          .used_read_tier_bytes = kinds.read_tier_bytes,
                          .used_checkpoint_bytes = kinds.checkpoint_bytes},
      options_.coordinator_timeout);
  if (!r.ok()) return r.status().Annotate("register with " + options_.coordinator);
  registered_ = true;
  last_report_chunks_ = UINT64_MAX;  // the coordinator needs everything again
  options_.logger->info("registered with the coordinator at {} (epoch {})", coordinator_->endpoint(), r->epoch);
  return watcher_->Sync(r->epoch);
}

Status NodeAgent::Tick() {
  if (!registered_) HOARD_RETURN_IF_ERROR(RegisterSelf());
  const NodeUsage kinds = MeasureUsage();
  ChunkStore::Usage u = store_->usage();
  proto::Heartbeat hb{.name = options_.name,
                      .epoch = watcher_->Current()->epoch(),
                      .capacity_bytes = capacity_,
                      .used_bytes = kinds.total(),
                      .chunks = u.chunks,
                      .build = proto::OwnBuild(),
                      .used_dataset_bytes = kinds.dataset_bytes,
                      .used_read_tier_bytes = kinds.read_tier_bytes,
                      .used_checkpoint_bytes = kinds.checkpoint_bytes};
  // Reports cost a pass over the owned chunks: send them when what they say
  // may have changed (chunks stored or dropped, a new map, a new failure),
  // when the coordinator asks (it restarted), and every 30 s regardless.
  const uint64_t view_epoch = watcher_->Current()->epoch();
  const uint64_t failures = warmer_->failure_generation();
  const auto now = options_.clock->Now();
  if (u.chunks != last_report_chunks_ || view_epoch != last_report_epoch_ ||
      failures != last_report_failures_ || now - last_full_report_ > std::chrono::seconds(30)) {
    hb.datasets = BuildReports();
    hb.datasets_included = true;
    last_report_chunks_ = u.chunks;
    last_report_epoch_ = view_epoch;
    last_report_failures_ = failures;
    last_full_report_ = now;
  }
  hb.counters = Counters();
  const Scrubber::Progress scrub = scrubber_->progress();
  hb.scrub_last_pass_unix = scrub.last_pass_end_unix;
  // Corrupt files the scrubber found, and those readers found (Read).
  hb.scrub_corrupt = scrub.corrupt_found + store_->corrupt_chunks();
  Result<proto::HeartbeatReply> r = coordinator_->Call(hb, options_.coordinator_timeout);
  if (!r.ok()) {
    last_report_chunks_ = UINT64_MAX;  // resend once it answers
    return r.status().Annotate("heartbeat");
  }
  if (coordinator_->endpoint() != followed_) {
    // A takeover among several coordinators (or the first answer): say whom
    // this node now reports to.
    if (!followed_.empty()) options_.logger->info("now following the coordinator at {}", coordinator_->endpoint());
    followed_ = coordinator_->endpoint();
  }
  if (!r->registered) {
    options_.logger->warn("the coordinator does not know this node; registering again");
    registered_ = false;
    return RegisterSelf();
  }
  if (r->need_reports) last_report_chunks_ = UINT64_MAX;
  Status synced = r->epoch != watcher_->Current()->epoch() ? watcher_->Sync(r->epoch) : Status::Ok();
  if (!r->settled.empty()) {
    {
      MutexLock lock(&mu_);
      to_drop_ = r->settled;
    }
    janitor_cv_.NotifyAll();
  }
  return synced;
}

void NodeAgent::JanitorLoop() {
  MutexLock lock(&mu_);
  while (true) {
    janitor_cv_.Wait(&mu_, [this] {
      mu_.AssertHeld();
      return stopping_ || gc_view_ != nullptr || !to_drop_.empty() || !refetch_.empty();
    });
    if (stopping_) return;
    std::shared_ptr<const ClusterView> view = std::move(gc_view_);
    gc_view_.reset();
    std::vector<proto::SettledDataset> settled = std::move(to_drop_);
    to_drop_.clear();
    std::vector<std::pair<ChunkKey, uint64_t>> refetch = std::move(refetch_);
    refetch_.clear();
    lock.Unlock();
    if (view != nullptr) {
      CollectGarbage(*view);
      ReleaseDeferredTargets(*view);
    }
    if (!settled.empty()) DropUnownedCopies(settled);
    if (!refetch.empty()) Refetch(refetch);
    lock.Lock();
  }
}

void NodeAgent::Refetch(const std::vector<std::pair<ChunkKey, uint64_t>>& chunks) {
  for (const auto& [key, uid] : chunks) {
    std::shared_ptr<const DatasetView> dataset;
    std::shared_ptr<const std::vector<ChunkRef>> owned;
    {
      MutexLock lock(&mu_);
      auto it = owned_.find(uid);
      if (it == owned_.end()) continue;  // a copy of a dataset we no longer own any of
      dataset = it->second.dataset;
      owned = it->second.chunks;
    }
    if (store_->Contains(key)) continue;  // a reader already read it through again
    const ChunkRef* ref = nullptr;
    for (const ChunkRef& c : *owned) {
      if (dataset->manifest.chunk_key(c.entry, c.index) == key) {
        ref = &c;
        break;
      }
    }
    if (ref == nullptr) continue;  // not ours to keep: the owners hold it
    Result<ChunkFiller::FillResult> r =
        filler_->Fill(*dataset, *ref, /*cache=*/true, OriginGate::Priority::kWarm);
    if (r.ok() && r->cache_status.ok()) {
      options_.logger->info("chunk {} of {} fetched again after it was found corrupt", key.Name(),
                            dataset->meta.name);
    } else {
      options_.logger->warn("chunk {} of {}, found corrupt, could not be fetched again: {}", key.Name(),
                            dataset->meta.name, r.ok() ? r->cache_status.ToString() : r.status().ToString());
    }
  }
}

bool NodeAgent::DiskBusy() {
  if (service_->counters().in_flight.load(std::memory_order_relaxed) > 0) return true;
  if (!disk_stats_) return false;
  Result<uint64_t> read = disk_stats_->BytesRead();
  if (!read.ok()) return false;
  // What the disk read since the last sample beyond what the scrubber read
  // (more than a few blocks: metadata, the kernel's own).
  const uint64_t scrubbed = scrubber_->progress().bytes_scrubbed;
  const uint64_t disk = *read - std::min(*read, disk_read_at_);
  const uint64_t ours = scrubbed - std::min(scrubbed, scrubbed_at_);
  disk_read_at_ = *read;
  scrubbed_at_ = scrubbed;
  return disk > ours + (1u << 20);
}

void NodeAgent::DropUnownedCopies(const std::vector<proto::SettledDataset>& settled) {
  for (const proto::SettledDataset& d : settled) {
    std::shared_ptr<const std::vector<ChunkRef>> chunks;
    std::shared_ptr<const DatasetView> dataset;
    {
      MutexLock lock(&mu_);
      auto it = owned_.find(d.uid);
      // Only on the placement the coordinator judged: under any other, what
      // we own (and what the owners hold) may differ.
      if (it == owned_.end() || placement_epoch_ != d.placement_epoch ||
          it->second.dataset->meta.version != d.version) {
        continue;
      }
      auto done = dropped_at_.find(d.uid);
      if (done != dropped_at_.end() && done->second == d.placement_epoch) continue;
      dropped_at_[d.uid] = d.placement_epoch;
      chunks = it->second.chunks;
      dataset = it->second.dataset;
    }
    std::unordered_set<ChunkKey, ChunkKeyHash> keep;
    keep.reserve(chunks->size());
    for (const ChunkRef& c : *chunks) keep.insert(dataset->manifest.chunk_key(c.entry, c.index));
    std::vector<ChunkKey> drop;
    store_->ForEach([&](const ChunkKey& key, uint64_t uid, uint64_t) {
      if (uid == d.uid && !keep.count(key)) drop.push_back(key);
    });
    uint64_t dropped = 0;
    for (const ChunkKey& key : drop) {
      // Each removal under mu_ and on the judged placement: a view change
      // (a node died, another joined) may make this node an owner of the
      // chunk again. Either the removal comes first, and OnViewChange then
      // hands the warmer a fresh scan that refills it, or it sees the new
      // placement and stops.
      MutexLock lock(&mu_);
      if (placement_epoch_ != d.placement_epoch) break;
      if (Status s = store_->Remove(key); s.ok()) {
        ++dropped;
      } else {
        options_.logger->warn("cannot drop chunk {}: {}", key.Name(), s.ToString());
      }
    }
    if (dropped > 0) {
      options_.logger->info("dataset {}: dropped {} chunks this node no longer owns (every chunk is on its owners)",
                            dataset->meta.name, dropped);
    }
  }
}

void NodeAgent::ReleaseDeferredTargets(const ClusterView& view) {
  MutexLock targets_lock(&targets_mu_);
  std::vector<Warmer::Target> targets;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, ds] : view.datasets()) {
      if (!ds->meta.resident) evicted_dropped_.insert(ds->meta.uid);
    }
    if (deferred_view_ != &view) return;
    deferred_view_ = nullptr;
    targets = std::move(deferred_targets_);
    deferred_targets_.clear();
  }
  warmer_->SetTargets(std::move(targets));
}

void NodeAgent::OnViewChange(const std::shared_ptr<const ClusterView>& view) {
  peer_source_->OnView(view);
  const OriginGate::Limits limits =
      NodeShareOfOriginLimits(view->map(), options_.name, std::max(1, options_.origin_connections));
  if (!(limits == gate_->limits())) {
    options_.logger->info("origin limits for this node: {} reads in flight, {}", limits.connections,
                          limits.bytes_per_s > 0 ? std::to_string(uint64_t(limits.bytes_per_s)) + " bytes/s"
                                                 : std::string("no byte rate limit"));
    gate_->SetLimits(limits);
  }
  std::vector<Warmer::Target> targets;
  MutexLock targets_lock(&targets_mu_);
  bool defer = false;
  {
    MutexLock lock(&mu_);
    std::map<uint64_t, Owned> owned;
    for (const auto& [name, ds] : view->datasets()) {
      if (view->self_index() < 0) continue;
      auto old = owned_.find(ds->meta.uid);
      Owned o;
      if (old != owned_.end() && old->second.dataset->meta.version == ds->meta.version &&
          placement_epoch_ == view->map().placement_epoch) {
        o = old->second;  // same manifest, same placement: same chunks
        o.dataset = ds;
      } else {
        auto chunks = std::make_shared<std::vector<ChunkRef>>(OwnedChunks(
            ds->manifest, view->placement(), static_cast<int>(ds->meta.replicas), uint32_t(view->self_index())));
        for (const auto& c : *chunks) o.bytes += c.length;
        o.dataset = ds;
        o.chunks = std::move(chunks);
      }
      if (ds->meta.warm && ds->meta.resident) targets.push_back({o.dataset, o.chunks});
      owned.emplace(ds->meta.uid, std::move(o));
    }
    owned_ = std::move(owned);
    placement_epoch_ = view->map().placement_epoch;
    // Newly evicted datasets: their chunks go first (the janitor), then the
    // warm-ups start (ReleaseDeferredTargets). Only on a coordinator's view,
    // the only kind the janitor collects against.
    std::set<uint64_t> evicted;
    for (const auto& [name, ds] : view->datasets()) {
      if (!ds->meta.resident) evicted.insert(ds->meta.uid);
    }
    std::erase_if(evicted_dropped_, [&](uint64_t uid) { return !evicted.count(uid); });
    // A loop, not std::any_of: clang's lock analysis does not see mu_ held
    // inside a lambda.
    for (uint64_t uid : evicted) {
      if (view->epoch() != 0 && !evicted_dropped_.count(uid)) defer = true;
    }
    deferred_view_ = defer ? view.get() : nullptr;
    deferred_targets_.clear();
    if (defer) deferred_targets_ = std::move(targets);
  }
  // Deferred: no warm-up at all meanwhile, so none stores a chunk of the
  // evicted dataset behind the janitor's back, nor takes the room it frees.
  warmer_->SetTargets(defer ? std::vector<Warmer::Target>{} : std::move(targets));
  // Only trust a view that came from the coordinator (epoch != 0), never the
  // empty or saved one, nor one missing a dataset it could not load.
  if (view->epoch() != 0) {
    {
      MutexLock lock(&mu_);
      gc_view_ = view;
    }
    janitor_cv_.NotifyAll();
  }
}

void NodeAgent::CollectGarbage(const ClusterView& view) {
  std::map<uint64_t, const DatasetView*> live;  // by uid
  std::set<uint64_t> evicted;                    // not resident: its chunks go, as a removed dataset's
  for (const auto& [name, ds] : view.datasets()) {
    live.emplace(ds->meta.uid, ds.get());
    if (!ds->meta.resident) evicted.insert(ds->meta.uid);
  }
  std::set<uint64_t> removed;
  // Chunks of versions not checked yet: a dataset refreshed since we last
  // looked (or since this process started).
  std::map<uint64_t, std::vector<ChunkKey>> unchecked;
  store_->ForEach([&](const ChunkKey& key, uint64_t uid, uint64_t) {
    auto it = live.find(uid);
    if (it == live.end() || evicted.count(uid)) {
      removed.insert(uid);
      return;
    }
    auto done = collected_.find(uid);
    if (done == collected_.end() || done->second != it->second->meta.version) unchecked[uid].push_back(key);
  });
  for (uint64_t uid : removed) {
    size_t n = store_->RemoveDataset(uid);
    if (evicted.count(uid)) {
      options_.logger->info("dataset {}: evicted, removed its {} chunks", live.at(uid)->meta.name, n);
    } else {
      options_.logger->info("removed {} chunks of a removed dataset (uid {:016x})", n, uid);
    }
  }
  // A chunk whose file key the current version does not have belongs to a
  // file that changed or was removed at the origin: no reader of this
  // version can ask for it (its bytes could only serve a file still open
  // from the previous version, which then reads EIO, never other bytes).
  // The version is adopted by now: owned_ and the warmer work on it.
  for (const auto& [uid, keys] : unchecked) {
    const DatasetView& ds = *live.at(uid);
    std::vector<FileKey> files;
    files.reserve(ds.manifest.file_count());
    for (uint32_t e = 0; e < ds.manifest.entry_count(); ++e) {
      if (ds.manifest.entry(e).is_file()) files.push_back(ds.manifest.entry(e).file_key());
    }
    std::sort(files.begin(), files.end());
    uint64_t dropped = 0;
    for (const ChunkKey& key : keys) {
      if (std::binary_search(files.begin(), files.end(), key.file)) continue;
      if (Status s = store_->Remove(key); s.ok()) {
        ++dropped;
      } else {
        options_.logger->warn("cannot drop chunk {}: {}", key.Name(), s.ToString());
      }
    }
    if (dropped > 0) {
      options_.logger->info("dataset {} version {}: dropped {} chunks of files that changed or were removed at the "
                            "origin",
                            ds.meta.name, ds.meta.version, dropped);
    }
  }
  std::map<uint64_t, uint32_t> collected;
  for (const auto& [uid, ds] : live) collected.emplace(uid, ds->meta.version);
  collected_ = std::move(collected);
}

std::vector<proto::DatasetReport> NodeAgent::BuildReports() {
  std::map<uint64_t, Owned> owned;
  uint64_t placement_epoch;
  {
    MutexLock lock(&mu_);
    owned = owned_;
    placement_epoch = placement_epoch_;
  }
  std::vector<proto::DatasetReport> reports;
  for (const auto& [uid, o] : owned) {
    proto::DatasetReport r;
    r.uid = uid;
    r.version = o.dataset->meta.version;
    r.placement_epoch = placement_epoch;
    r.owned_chunks = o.chunks->size();
    r.owned_bytes = o.bytes;
    proto::OrdinalEncoder cached;
    const Manifest& m = o.dataset->manifest;
    for (const ChunkRef& c : *o.chunks) {  // in ordinal order
      if (store_->Contains(m.chunk_key(c.entry, c.index))) {
        cached.Add(c.ordinal);
        r.cached_bytes += c.length;
      }
    }
    r.cached_chunks = cached.count();
    r.cached_ordinals = cached.Finish();
    r.failures = warmer_->Failures(uid);
    reports.push_back(std::move(r));
  }
  return reports;
}

std::map<std::string, uint64_t> NodeAgent::Counters() const {
  const ChunkService::Counters& c = service_->counters();
  const Drainer::Counters& d = drainer_->counters();
  const ReplicaStore::Usage ckpt = replicas_->usage();
  return {{"ckpt_drained_bytes", d.drained_bytes.load()},
          {"ckpt_drained_files", d.drained_files.load()},
          {"ckpt_drain_failures", d.failures.load()},
          {"ckpt_rebuilt_chunks", d.rebuilt_chunks.load()},
          {"ckpt_evicted_files", d.evicted_files.load()},
          {"ckpt_dropped_copies", d.dropped_copies.load()},
          {"ckpt_repeated_uploads", d.repeated_uploads.load()},
          {"ckpt_replica_bytes", ckpt.chunk_bytes},
          {"ckpt_file_bytes", ckpt.file_bytes},
          {"chunk_requests", c.requests.load()},
          {"chunk_cache_hits", c.cache_hits.load()},
          {"served_from_cache_bytes", c.cache_bytes.load()},
          {"served_from_origin_bytes", c.origin_bytes.load()},
          {"origin_range_reads", c.range_reads.load()},
          {"chunk_errors", c.errors.load()},
          {"origin_read_bytes", filler_->origin_bytes()},
          {"origin_reads", filler_->origin_reads()},
          {"peer_fill_bytes", filler_->peer_bytes()},
          {"warm_fetched_chunks", warmer_->fetched_chunks()},
          {"warm_fetched_bytes", warmer_->fetched_bytes()}};
}

}  // namespace hoard
