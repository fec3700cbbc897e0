#include "coordinator/ha_coordinator.h"

#include <utility>

namespace hoard {

namespace {
// Binding the endpoint right after the other server on it closed can race
// the close; tried this often, this far apart.
constexpr int kBindTries = 50;
constexpr std::chrono::milliseconds kBindPause{100};
// How long one look for the leader's new records lasts (per journal).
constexpr std::chrono::milliseconds kFollowWait{200};
}  // namespace

HaCoordinator::HaCoordinator(Options options)
    : options_(std::move(options)),
      election_(options_.kv, LeaderElection::Options{.key = options_.prefix + "leader",
                                                     .value = options_.advertise,
                                                     .ttl = options_.lease_ttl,
                                                     .clock = options_.clock,
                                                     .logger = options_.logger}) {}

HaCoordinator::~HaCoordinator() { Stop(); }

std::shared_ptr<EtcdJournal> HaCoordinator::NewJournal(const std::string& what) {
  return std::make_shared<EtcdJournal>(
      options_.kv, EtcdJournal::Options{.prefix = options_.prefix + what + "/",
                                        .clock = options_.clock,
                                        .on_lost = [this](const std::string& why) {
                                          // This process's memory may now differ from etcd: end
                                          // the term; the next one loads from etcd.
                                          options_.logger->error("ending the term: a write to etcd failed: {}",
                                                                 why);
                                          election_.Resign();
                                        }});
}

Status HaCoordinator::StartStandbyService() {
  Status last;
  for (int i = 0; i < kBindTries && !stopping_; ++i) {
    auto service = std::make_unique<CoordinatorService>(
        nullptr, CoordinatorService::Options{.endpoint = options_.listen,
                                             .logger = options_.logger,
                                             .context = options_.context,
                                             .clock = options_.clock,
                                             .standby = [this]() -> std::optional<std::string> {
                                               return election_.leader();
                                             }});
    last = service->Start();
    if (last.ok()) {
      standby_service_ = std::move(service);
      return Status::Ok();
    }
    options_.clock->SleepFor(kBindPause);
  }
  return last;
}

Status HaCoordinator::Start() {
  state_journal_ = NewJournal("state");
  ckpt_journal_ = NewJournal("ckpt");
  HOARD_RETURN_IF_ERROR(StartStandbyService());
  options_.logger->info("coordinator standing by on {} (advertised as {}); etcd keys under {}", options_.listen,
                        options_.advertise, options_.prefix);
  following_ = true;
  follower_ = std::thread([this] { Follow(); });
  loop_ = std::thread([this] { TermLoop(); });
  return Status::Ok();
}

void HaCoordinator::Stop() {
  if (stopping_.exchange(true)) return;
  election_.Stop();  // ends a Campaign, and a term (WaitLost returns)
  if (loop_.joinable()) loop_.join();
  following_ = false;
  if (follower_.joinable()) follower_.join();
  if (standby_service_) standby_service_->Stop();
}

void HaCoordinator::Follow() {
  bool warned = false;
  while (following_) {
    Result<Journal::Loaded> a = state_journal_->Follow(kFollowWait);
    Result<Journal::Loaded> b = ckpt_journal_->Follow(kFollowWait);
    if (a.ok() && b.ok()) {
      warned = false;
      continue;
    }
    if (!warned) {
      options_.logger->warn("standby cannot follow the leader's journal (will retry): {}",
                            (a.ok() ? b.status() : a.status()).ToString());
      warned = true;
    }
    options_.clock->SleepFor(kFollowWait);
  }
}

void HaCoordinator::TermLoop() {
  while (!stopping_) {
    Result<Fence> fence = election_.Campaign();
    if (!fence.ok()) return;  // stopping
    Lead(*fence);
  }
}

void HaCoordinator::Lead(const Fence& fence) {
  const auto began = options_.clock->Now();
  following_ = false;
  if (follower_.joinable()) follower_.join();
  state_journal_->SetFence(fence);
  ckpt_journal_->SetFence(fence);

  Coordinator::Options co = options_.coordinator;
  co.state_journal = state_journal_;
  co.ckpt_journal = ckpt_journal_;
  std::shared_ptr<Coordinator> coordinator;
  std::unique_ptr<CoordinatorService> service;
  Result<std::unique_ptr<Coordinator>> opened = Coordinator::Open(std::move(co));
  if (!opened.ok()) {
    options_.logger->error("elected, but cannot load the cluster's state (resigning): {}",
                           opened.status().ToString());
  } else {
    coordinator = std::move(*opened);
    if (standby_service_) standby_service_->Stop();
    standby_service_.reset();
    Status bound;
    for (int i = 0; i < kBindTries && election_.Leading(); ++i) {
      service = std::make_unique<CoordinatorService>(
          coordinator.get(), CoordinatorService::Options{.endpoint = options_.listen,
                                                         .logger = options_.logger,
                                                         .context = options_.context,
                                                         .clock = options_.clock,
                                                         .ha_status = [this, term = fence.create_revision] {
                                                           return Describe(term);
                                                         }});
      bound = service->Start();
      if (bound.ok()) break;
      service.reset();
      options_.clock->SleepFor(kBindPause);
    }
    if (service == nullptr) {
      options_.logger->error("elected, but cannot serve on {} (resigning): {}", options_.listen, bound.ToString());
    }
  }
  if (service != nullptr) {
    const double took = std::chrono::duration<double>(options_.clock->Now() - began).count();
    {
      MutexLock lock(&mu_);
      current_ = coordinator;
      term_metrics_ = std::make_unique<metrics::Registry>();
      coordinator->RegisterMetrics(term_metrics_.get());
      last_takeover_seconds_ = took;
    }
    options_.logger->info("leading the cluster from {} (term {}; state loaded and serving in {:.3f} s)",
                          options_.advertise, fence.create_revision, took);
    Status why = election_.WaitLost();
    options_.logger->warn("term {} over: {}", fence.create_revision, why.ToString());
  } else {
    election_.Resign();
  }
  {
    MutexLock lock(&mu_);
    current_.reset();
    term_metrics_.reset();
  }
  if (coordinator) coordinator->Shutdown();
  if (service) service->Stop();
  service.reset();
  coordinator.reset();  // stops its threads; nothing of its memory is kept

  state_journal_ = NewJournal("state");
  ckpt_journal_ = NewJournal("ckpt");
  if (stopping_) return;
  if (standby_service_ == nullptr) {
    if (Status s = StartStandbyService(); !s.ok()) {
      options_.logger->error("cannot serve as a standby on {}: {}", options_.listen, s.ToString());
    }
  }
  following_ = true;
  follower_ = std::thread([this] { Follow(); });
  if (service == nullptr) {
    // This term failed before it served: give the others one lease's time to
    // win before campaigning again, rather than winning and failing in a loop.
    options_.clock->SleepFor(options_.lease_ttl);
  }
}

bool HaCoordinator::leading() const {
  MutexLock lock(&mu_);
  return current_ != nullptr;
}

std::shared_ptr<Coordinator> HaCoordinator::TEST_current() const {
  MutexLock lock(&mu_);
  return current_;
}

proto::HaStatus HaCoordinator::Describe(int64_t term) const {
  proto::HaStatus s{.leader = options_.advertise, .term = term};
  Result<std::vector<KvMember>> members = options_.kv->Members();
  if (!members.ok()) {
    s.etcd_error = members.status().ToString();
    return s;
  }
  for (const KvMember& m : *members) {
    s.etcd.push_back({.name = m.name, .endpoint = m.endpoint, .healthy = m.healthy, .leader = m.leader,
                      .db_size_bytes = m.db_size_bytes, .error = m.error});
  }
  return s;
}

void HaCoordinator::RegisterMetrics(metrics::Registry* registry) {
  registry->AddGauge("hoard_coordinator_leader", "1 while this coordinator leads the cluster, 0 while it stands by",
                     {}, [this] { return leading() ? 1.0 : 0.0; });
  registry->AddCounter("hoard_coordinator_terms_total", "Terms this coordinator has led (elections it won)", {},
                       [this] { return double(election_.terms()); });
  registry->AddGauge("hoard_coordinator_takeover_seconds",
                     "How long this coordinator's last takeover took, from election to serving", {}, [this] {
                       MutexLock lock(&mu_);
                       return last_takeover_seconds_;
                     });
  registry->AddRendered([this] {
    // Held while rendering, so the term's coordinator outlives the render.
    MutexLock lock(&mu_);
    return term_metrics_ ? term_metrics_->Render() : std::string();
  });
}

}  // namespace hoard
