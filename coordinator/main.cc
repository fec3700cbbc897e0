// hoard-coordinator: the cluster's membership and dataset registry.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "origin/ckpt_origin.h"
#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/units.h"
#include "consensus/etcd_kv.h"
#include "consensus/timed_kv.h"
#include "coordinator/coordinator.h"
#include "coordinator/ha_coordinator.h"
#include "coordinator/service.h"
#include "proto/curve.h"

int main(int argc, char** argv) {
  CLI::App app{"hoard-coordinator: keeps hoard's members, datasets and stripe assignment"};
  // Flags bind straight into the coordinator's options: their initializers
  // (coordinator/coordinator.h) are the defaults, here and in --help.
  hoard::Coordinator::Options o;
  hoard::Coordinator::Options::Checkpoints& ckpt = o.ckpt;
  std::string listen = "tcp://127.0.0.1:7100";
  app.add_option("--listen", listen, "ZeroMQ endpoint to serve on")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Directory for the durable state and manifests")->required();
  hoard::AddCountOption<std::chrono::milliseconds>(app, "--down-after-ms", &o.down_after,
                                                   "Mark a node down after this much silence")
      ->check(hoard::Positive());
  hoard::AddDurationOption(app, "--out-after", &o.out_after,
                           "A node down this long is out: its chunks get new owners (until then it keeps its "
                           "placement and readers skip it, so a reboot moves nothing), e.g. 5m, 90s; 0 = out as "
                           "soon as down");
  app.add_option("--origin-max-connections", o.origin_limits.max_connections,
                 "Origin reads in flight, all nodes together (shared by weight, at least 1 per node); 0 = each "
                 "node's own --origin-connections")
      ->capture_default_str();
  hoard::AddBytesOption(app, "--origin-max-rate", &o.origin_limits.max_bytes_per_s,
                        "Bytes per second read from the origin, all nodes together, e.g. 800M; 0 = unlimited");
  std::string quota_policy = "evict";
  app.add_option("--quota-policy", quota_policy,
                 "At a tenant's quota, a warm-up evicts the tenant's own datasets (evict) or fails at once (reject)")
      ->check(CLI::IsMember({"evict", "reject"}))
      ->capture_default_str();
  app.add_option("--ckpt-origin", ckpt.origin,
                 "Checkpoint origin: nfs://host/export/path or an absolute directory; default DATA/ckpt-origin");
  app.add_option("--ckpt-replicas", ckpt.replicas, "Nodes each committed checkpoint chunk is on (K), writer included")
      ->capture_default_str()->check(CLI::Range(1, 16));
  hoard::AddCountOption<std::chrono::seconds>(app, "--ckpt-drain-deadline-s", &ckpt.drain_deadline,
                                              "A checkpoint file not on the origin this long after its commit counts "
                                              "as overdue")
      ->check(hoard::Positive());
  hoard::AddBytesOption(app, "--ckpt-drain-max-rate", &ckpt.drain_max_bytes_per_s,
                        "Bytes per second uploaded to the checkpoint origin, all nodes together, e.g. 100M; 0 = "
                        "unlimited");
  app.add_option("--ckpt-drain-share", ckpt.drain_share,
                 "While datasets are being filled from the origin, the share of origin traffic the checkpoint drain "
                 "may take (the rest is left to dataset reads); 1 = no share, only --ckpt-drain-max-rate")
      ->capture_default_str()->check(CLI::Range(0.01, 1.0));
  hoard::AddBytesOption(app, "--ckpt-drain-min-rate", &ckpt.drain_min_bytes_per_s,
                        "The drain's floor while it shares the origin with dataset reads, bytes/s, e.g. 16M");
  hoard::AddCountOption<std::chrono::seconds>(app, "--ckpt-lost-after-s", &ckpt.lost_after,
                                              "A node silent this long is lost: the checkpoint chunks it held that are "
                                              "not on the origin yet are copied to other nodes (0 = never)");
  hoard::AddCountOption<std::chrono::seconds>(app, "--ckpt-session-timeout-s", &ckpt.session_timeout,
                                              "A mount not heard from this long loses its checkpoint locks, and its "
                                              "open files stop keeping old generations")
      ->check(CLI::Range(4, 3600));
  hoard::AddCountOption<std::chrono::seconds>(app, "--ckpt-retire-grace-s", &ckpt.retire_grace,
                                              "A rewritten or removed checkpoint generation is kept at least this "
                                              "long for readers that may have it open")
      ->check(CLI::Range(0, 86400));
  app.add_option("--ckpt-keep-last", ckpt.keep_last,
                 "Checkpoints per job whose local copies stay after they reach the origin")
      ->capture_default_str();
  app.add_option("--ckpt-commit-markers", ckpt.commit_markers,
                 "File names published only after the rest of their directory (comma-separated)")
      ->delimiter(',')->capture_default_str();
  // High availability (issue 32): with --etcd, this is one of several
  // coordinators; etcd elects the leader and keeps the state.
  std::string etcd;
  std::string etcd_prefix = "/hoard/default/";
  std::string advertise;
  int lease_ttl_s = 3;
  auto* ha = app.add_option_group("High availability");
  ha->add_option("--etcd", etcd,
                 "etcd client URLs, comma-separated (http://host:2379,...): run as one of several coordinators, "
                 "with the state in etcd and the leader elected there; empty: the state in DATA_DIR, one "
                 "coordinator");
  ha->add_option("--etcd-prefix", etcd_prefix, "Key prefix of this cluster in etcd (one etcd can serve several)")
      ->capture_default_str();
  ha->add_option("--advertise", advertise,
                 "Endpoint clients are told to dial when this coordinator leads; default: --listen");
  ha->add_option("--lease-ttl", lease_ttl_s,
                 "Seconds of silence after which a leader's term ends and a standby takes over")
      ->check(CLI::Range(1, 60))
      ->capture_default_str();
  ha->add_option("--shared-store", o.shared_store,
                 "Where coordinators keep manifests for each other (nfs://host/export/path or an absolute "
                 "directory every coordinator reaches); required with --etcd");
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "DATA_DIR");
  hoard::LogOptions log_options;
  hoard::AddLogFlags(app, &log_options);
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "coordinator", argc, argv)) return *exit_code;
  ckpt.open_origin = [](const std::string& source) { return hoard::OpenCkptOrigin(source); };
  o.quota_policy = *hoard::eviction::ParseQuotaPolicy(quota_policy);  // checked by IsMember

  hoard::BlockTerminationSignals();
  auto made_log = hoard::MakeLogger("coordinator", log_options);
  if (!made_log.ok()) {
    std::fprintf(stderr, "hoard-coordinator: cannot start: %s\n", made_log.status().message().c_str());
    return 2;
  }
  auto log = *made_log;
  zmq::context_t context;
  auto security = hoard::proto::DaemonSecurity(context, security_flags.keys_dir, security_flags.insecure, log);
  if (!security.ok()) {
    log->critical("cannot start: {}", security.status().message());
    return 2;
  }
  o.logger = log;
  const std::string data_dir = o.data_dir;
  if (!etcd.empty()) {
    if (o.shared_store.empty()) {
      log->critical("cannot start: --etcd needs --shared-store, where every coordinator finds the manifests");
      return 2;
    }
    if (etcd_prefix.empty() || etcd_prefix.back() != '/') etcd_prefix += '/';
    // A standby opens no store, but keeps its metrics address there.
    if (hoard::Status s = hoard::MakeDirs(data_dir); !s.ok()) {
      log->critical("cannot start: --data-dir: {}", s.ToString());
      return 2;
    }
    auto kv = hoard::EtcdKv::Open({.endpoints = hoard::EtcdKv::SplitEndpoints(etcd)});
    if (!kv.ok()) {
      log->critical("cannot start: --etcd: {}", kv.status().ToString());
      return 2;
    }
    hoard::TimedKv timed_kv(kv->get());  // hoard_etcd_request_seconds
    hoard::HaCoordinator ha_coordinator({.coordinator = std::move(o),
                                         .listen = listen,
                                         .advertise = advertise.empty() ? listen : advertise,
                                         .prefix = etcd_prefix,
                                         .lease_ttl = std::chrono::seconds(lease_ttl_s),
                                         .kv = &timed_kv,
                                         .context = &context,
                                         .logger = log});
    if (hoard::Status s = ha_coordinator.Start(); !s.ok()) {
      log->critical("cannot start: {}", s.ToString());
      return 1;
    }
    hoard::metrics::Registry registry;
    ha_coordinator.RegisterMetrics(&registry);
    timed_kv.RegisterMetrics(&registry);
    auto metrics =
        hoard::metrics::ServeMetrics(metrics_addr, &registry, log, hoard::JoinPath(data_dir, "metrics.addr"));
    if (!metrics.ok()) {
      log->critical("cannot start: --metrics-addr: {}", metrics.status().ToString());
      return 1;
    }
    int sig = hoard::WaitForTermination();
    log->info("signal {}: stopping (resigning if leading)", sig);
    metrics->reset();
    ha_coordinator.Stop();
    return 0;
  }
  auto coordinator = hoard::Coordinator::Open(std::move(o));
  if (!coordinator.ok()) {
    log->critical("cannot start: {}", coordinator.status().ToString());
    return 1;
  }
  hoard::CoordinatorService service(coordinator->get(), {.endpoint = listen, .logger = log, .context = &context});
  if (hoard::Status s = service.Start(); !s.ok()) {
    log->critical("cannot start: {}", s.ToString());
    return 1;
  }
  log->info("coordinator serving on {} (data in {})", service.endpoint(), data_dir);
  hoard::metrics::Registry registry;
  (*coordinator)->RegisterMetrics(&registry);
  auto metrics = hoard::metrics::ServeMetrics(metrics_addr, &registry, log, hoard::JoinPath(data_dir, "metrics.addr"));
  if (!metrics.ok()) {
    log->critical("cannot start: --metrics-addr: {}", metrics.status().ToString());
    service.Stop();
    return 1;
  }
  int sig = hoard::WaitForTermination();
  log->info("signal {}: stopping", sig);
  metrics->reset();
  service.Stop();
  return 0;
}
