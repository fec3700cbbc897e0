#include "coordinator/service.h"

#include "coordinator/audit.h"
#include "proto/access.h"

namespace hoard {

using proto::Envelope;

namespace {

// Logs one audit line for a state-changing request and passes its answer on.
template <typename R>
R Audited(spdlog::logger& log, const Envelope& env, std::string_view target, const proto::Caller* caller, R answer) {
  Status outcome = answer.ok() ? Status::Ok() : answer.status();
  log.info("{}", AuditLine(env.key_class, proto::TypeName(env.type), target, caller, outcome));
  return answer;
}

// The checkpoint table answers with entries; the wire wraps them.
Result<proto::CkptEntryReply> EntryReply(Result<proto::CkptEntry> e) {
  if (!e.ok()) return e.status();
  return proto::CkptEntryReply{.entry = std::move(*e)};
}

}  // namespace

CoordinatorService::CoordinatorService(Coordinator* coordinator, Options options)
    : coordinator_(coordinator),
      options_(std::move(options)),
      server_({.endpoint = options_.endpoint,
               .name = "coordinator",
               .workers = options_.workers,
               .logger = options_.logger,
               .context = options_.context}) {
  if (!options_.audit_logger) {
    const auto& sinks = options_.logger->sinks();
    options_.audit_logger = std::make_shared<spdlog::logger>("audit", sinks.begin(), sinks.end());
    // The sinks carry the daemon's pattern ("... info audit[PID]: key=...");
    // flushing is the logger's, so it is set here too.
    options_.audit_logger->set_level(spdlog::level::info);
    options_.audit_logger->flush_on(spdlog::level::info);
  }
  RegisterHandlers();
  if (options_.standby) {
    server_.SetGate([standby = options_.standby](uint16_t) -> Status {
      std::optional<std::string> leader = standby();
      return leader ? Status::NotLeader(std::move(*leader)) : Status::Ok();
    });
  }
}

CoordinatorService::~CoordinatorService() { Stop(); }

void CoordinatorService::RegisterHandlers() {
  Coordinator* c = coordinator_;
  spdlog::logger* audit = options_.audit_logger.get();
  server_.Handle<proto::Ping>([c](const proto::Ping& r, const Envelope&, std::string*) {
    c->HeardMount(r.mount);
    c->DatasetsRead(r.read_datasets);
    return Result<proto::Pong>(proto::Pong{.role = "coordinator", .name = "coordinator", .epoch = c->epoch()});
  });
  server_.Handle<proto::RegisterNode>([c, audit](const proto::RegisterNode& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name, nullptr, c->RegisterNode(r));
  });
  server_.Handle<proto::Heartbeat>(
      [c](const proto::Heartbeat& r, const Envelope&, std::string*) { return c->Heartbeat(r); });
  server_.Handle<proto::GetClusterMap>([c](const proto::GetClusterMap&, const Envelope&, std::string*) {
    return Result<proto::ClusterMap>(c->GetClusterMap());
  });
  server_.Handle<proto::GetManifest>(
      [c](const proto::GetManifest& r, const Envelope&, std::string* payload) { return c->GetManifest(r, payload); });
  server_.Handle<proto::ClusterStatus>(
      [c, ha = options_.ha_status](const proto::ClusterStatus& r, const Envelope&,
                                   std::string*) -> Result<proto::ClusterStatusReply> {
        HOARD_ASSIGN_OR_RETURN(proto::ClusterStatusReply reply, c->GetStatus(r.dataset));
        if (ha) reply.ha = ha();
        return reply;
      });
  server_.Handle<proto::DatasetAdd>([c, audit](const proto::DatasetAdd& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name, nullptr, c->AddDataset(r));
  });
  server_.Handle<proto::DatasetRefresh>([c, audit](const proto::DatasetRefresh& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name, nullptr, c->RefreshDataset(r.name));
  });
  server_.Handle<proto::DatasetList>([c](const proto::DatasetList&, const Envelope&, std::string*) {
    return Result<proto::DatasetListReply>(c->ListDatasets());
  });
  server_.Handle<proto::DatasetRemove>([c, audit](const proto::DatasetRemove& r, const Envelope& env,
                                                  std::string*) -> Result<proto::DatasetRemoveReply> {
    Status s = c->RemoveDataset(r.name);
    // A resend whose first attempt was applied (proto/message_types.h).
    if (r.retry && s.code() == Code::kNotFound) s = Status::Ok();
    Result<proto::DatasetRemoveReply> answer = s.ok() ? Result<proto::DatasetRemoveReply>(proto::DatasetRemoveReply{})
                                                      : Result<proto::DatasetRemoveReply>(s);
    return Audited(*audit, env, r.name, nullptr, std::move(answer));
  });
  server_.Handle<proto::NodeDrain>([c, audit](const proto::NodeDrain& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name + (r.drain ? "" : " (undrain)"), nullptr, c->SetDraining(r.name, r.drain));
  });
  server_.Handle<proto::NodeRemove>([c, audit](const proto::NodeRemove& r, const Envelope& env,
                                               std::string*) -> Result<proto::NodeRemoveReply> {
    Result<proto::NodeRemoveReply> removed = c->RemoveNode(r.name, r.force);
    // A resend whose first attempt was applied (proto/message_types.h).
    if (r.retry && removed.status().code() == Code::kNotFound) removed = proto::NodeRemoveReply{};
    return Audited(*audit, env, r.name, nullptr, std::move(removed));
  });
  server_.Handle<proto::Warm>([c, audit](const proto::Warm& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name, &r.caller, c->Warm(r.name));
  });
  server_.Handle<proto::LeaseTake>([c, audit](const proto::LeaseTake& r, const Envelope& env, std::string*) {
    proto::Caller who = r.caller;
    who.job = r.job;  // the lease's job, whatever the caller's own claim
    return Audited(*audit, env, r.dataset, &who, c->TakeLease(r, proto::KeyClassName(env.key_class)));
  });
  server_.Handle<proto::LeaseRelease>([c, audit](const proto::LeaseRelease& r, const Envelope& env, std::string*) {
    proto::Caller who = r.caller;
    who.job = r.job;
    return Audited(*audit, env, r.dataset.empty() ? "*" : r.dataset, &who, c->ReleaseLease(r));
  });
  server_.Handle<proto::LeaseList>([c](const proto::LeaseList&, const Envelope&, std::string*) {
    return Result<proto::LeaseListReply>(c->ListLeases());
  });
  server_.Handle<proto::DatasetSet>([c, audit](const proto::DatasetSet& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.name, nullptr, c->SetDataset(r));
  });
  server_.Handle<proto::QuotaSet>([c, audit](const proto::QuotaSet& r, const Envelope& env, std::string*) {
    return Audited(*audit, env, r.tenant, nullptr, c->SetQuota(r.tenant, r.bytes));
  });
  server_.Handle<proto::QuotaList>([c](const proto::QuotaList&, const Envelope&, std::string*) {
    return Result<proto::QuotaListReply>(c->ListQuotas());
  });
  RegisterCheckpointHandlers();
}

void CoordinatorService::RegisterCheckpointHandlers() {
  Coordinator* c = coordinator_;
  server_.Handle<proto::CkptLookup>([c](const proto::CkptLookup& r, const Envelope&, std::string*) {
    return EntryReply(r.touch_atime ? c->checkpoints().LookupForRead(r.path) : c->checkpoints().Lookup(r.path));
  });
  server_.Handle<proto::CkptList>(
      [c](const proto::CkptList& r, const Envelope&, std::string*) { return c->checkpoints().List(r.path); });
  server_.Handle<proto::CkptCreate>(
      [c](const proto::CkptCreate& r, const Envelope&, std::string*) { return EntryReply(c->checkpoints().Create(r)); });
  server_.Handle<proto::CkptRename>(
      [c](const proto::CkptRename& r, const Envelope&, std::string*) -> Result<proto::CkptRenameReply> {
        HOARD_ASSIGN_OR_RETURN(proto::CkptEntry e, c->checkpoints().Rename(r));
        return proto::CkptRenameReply{.entry = std::move(e)};
      });
  server_.Handle<proto::CkptRemove>(
      [c](const proto::CkptRemove& r, const Envelope&, std::string*) -> Result<proto::CkptRemoveReply> {
        HOARD_ASSIGN_OR_RETURN(uint64_t id, c->checkpoints().Remove(r));
        return proto::CkptRemoveReply{.id = id};
      });
  server_.Handle<proto::CkptCommit>(
      [c](const proto::CkptCommit& r, const Envelope&, std::string*) { return EntryReply(c->checkpoints().Commit(r)); });
  server_.Handle<proto::CkptSetAttr>([c](const proto::CkptSetAttr& r, const Envelope&, std::string*) {
    return EntryReply(c->checkpoints().SetAttr(r));
  });
  server_.Handle<proto::CkptStatus>(
      [c](const proto::CkptStatus& r, const Envelope&, std::string*) { return c->CkptStatus(r); });
  server_.Handle<proto::CkptFlush>(
      [c](const proto::CkptFlush& r, const Envelope&, std::string*) -> Result<proto::CkptFlushReply> {
        HOARD_ASSIGN_OR_RETURN(proto::CkptJobStatus s, c->checkpoints().Flush(r.job));
        return proto::CkptFlushReply{.status = std::move(s)};
      });
  server_.Handle<proto::CkptWork>([c](const proto::CkptWork& r, const Envelope&, std::string*) {
    return c->CkptWork(r.node, r.rebuild, r.rebuilt, r.dropped);
  });
  server_.Handle<proto::CkptDrained>(
      [c](const proto::CkptDrained& r, const Envelope&, std::string*) { return c->checkpoints().Drained(r); });
  server_.Handle<proto::CkptSession>([c](const proto::CkptSession& r, const Envelope&, std::string*) {
    return Result<proto::CkptSessionReply>(c->ckpt_sessions().Update(r));
  });
  server_.Handle<proto::CkptLock>(
      [c](const proto::CkptLock& r, const Envelope&, std::string*) { return c->ckpt_sessions().Lock(r); });
}

Status CoordinatorService::Start() {
  HOARD_RETURN_IF_ERROR(server_.Start());
  liveness_ = std::thread([this] {
    MutexLock lock(&mu_);
    while (true) {
      const auto deadline = options_.clock->Now() + options_.liveness_interval;
      while (!stopping_) {
        if (!options_.clock->WaitUntil(&cv_, &mu_, deadline)) break;
      }
      if (stopping_) return;
      if (IsStandby()) continue;  // the leader marks nodes down, not us
      lock.Unlock();
      coordinator_->CheckLiveness();
      lock.Lock();
    }
  });
  return Status::Ok();
}

void CoordinatorService::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // Walks in progress give up; not for a service that never started (its
  // coordinator may be served by the next one: HaCoordinator retries a bind)
  // nor for a standby's, which has none.
  if (coordinator_ != nullptr && liveness_.joinable()) coordinator_->Shutdown();
  cv_.NotifyAll();
  if (liveness_.joinable()) liveness_.join();
  server_.Stop();
}

}  // namespace hoard
