#include "coordinator/service.h"

namespace hoard {

using proto::Envelope;

CoordinatorService::CoordinatorService(Coordinator* coordinator, Options options)
    : coordinator_(coordinator),
      options_(std::move(options)),
      server_({.endpoint = options_.endpoint,
               .name = "coordinator",
               .workers = options_.workers,
               .logger = options_.logger,
               .context = options_.context}) {
  RegisterHandlers();
}

CoordinatorService::~CoordinatorService() { Stop(); }

void CoordinatorService::RegisterHandlers() {
  Coordinator* c = coordinator_;
  server_.Handle<proto::Ping>([c](const proto::Ping&, const Envelope&, std::string*) {
    return Result<proto::Pong>(proto::Pong{.role = "coordinator", .name = "coordinator", .epoch = c->epoch()});
  });
  server_.Handle<proto::RegisterNode>(
      [c](const proto::RegisterNode& r, const Envelope&, std::string*) { return c->RegisterNode(r); });
  server_.Handle<proto::Heartbeat>(
      [c](const proto::Heartbeat& r, const Envelope&, std::string*) { return c->Heartbeat(r); });
  server_.Handle<proto::GetClusterMap>([c](const proto::GetClusterMap&, const Envelope&, std::string*) {
    return Result<proto::ClusterMap>(c->GetClusterMap());
  });
  server_.Handle<proto::GetManifest>(
      [c](const proto::GetManifest& r, const Envelope&, std::string* payload) { return c->GetManifest(r, payload); });
  server_.Handle<proto::ClusterStatus>(
      [c](const proto::ClusterStatus& r, const Envelope&, std::string*) { return c->GetStatus(r.dataset); });
  server_.Handle<proto::DatasetAdd>(
      [c](const proto::DatasetAdd& r, const Envelope&, std::string*) { return c->AddDataset(r); });
  server_.Handle<proto::DatasetRefresh>(
      [c](const proto::DatasetRefresh& r, const Envelope&, std::string*) { return c->RefreshDataset(r.name); });
  server_.Handle<proto::DatasetList>([c](const proto::DatasetList&, const Envelope&, std::string*) {
    return Result<proto::DatasetListReply>(c->ListDatasets());
  });
  server_.Handle<proto::DatasetRemove>(
      [c](const proto::DatasetRemove& r, const Envelope&, std::string*) -> Result<proto::DatasetRemoveReply> {
        HOARD_RETURN_IF_ERROR(c->RemoveDataset(r.name));
        return proto::DatasetRemoveReply{};
      });
  server_.Handle<proto::NodeDrain>([c](const proto::NodeDrain& r, const Envelope&, std::string*) {
    return c->SetDraining(r.name, r.drain);
  });
  server_.Handle<proto::NodeRemove>([c](const proto::NodeRemove& r, const Envelope&, std::string*) {
    return c->RemoveNode(r.name, r.force);
  });
  server_.Handle<proto::Warm>([c](const proto::Warm& r, const Envelope&, std::string*) { return c->Warm(r.name); });
}

Status CoordinatorService::Start() {
  HOARD_RETURN_IF_ERROR(server_.Start());
  liveness_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, options_.liveness_interval, [this] { return stopping_; })) {
      lock.unlock();
      coordinator_->CheckLiveness();
      lock.lock();
    }
  });
  return Status::Ok();
}

void CoordinatorService::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  coordinator_->Shutdown();
  cv_.notify_all();
  if (liveness_.joinable()) liveness_.join();
  server_.Stop();
}

}  // namespace hoard
