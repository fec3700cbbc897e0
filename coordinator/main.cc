// hoard-coordinator: the cluster's membership and dataset registry.
#include <CLI/CLI.hpp>

#include "origin/ckpt_origin.h"
#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/units.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "proto/curve.h"

int main(int argc, char** argv) {
  CLI::App app{"hoard-coordinator: keeps hoard's members, datasets and stripe assignment"};
  std::string listen = "tcp://127.0.0.1:7100", data_dir, log_level = "info";
  int down_after_ms = 5000;
  uint32_t origin_connections = 0;
  std::string origin_rate = "0";
  app.add_option("--listen", listen, "ZeroMQ endpoint to serve on")->capture_default_str();
  app.add_option("--data-dir", data_dir, "Directory for the durable state and manifests")->required();
  app.add_option("--down-after-ms", down_after_ms, "Mark a node down after this much silence")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--origin-max-connections", origin_connections,
                 "Origin reads in flight, all nodes together (shared by weight, at least 1 per node); 0 = each "
                 "node's own --origin-connections")
      ->capture_default_str();
  app.add_option("--origin-max-rate", origin_rate,
                 "Bytes per second read from the origin, all nodes together, e.g. 800M; 0 = unlimited")
      ->capture_default_str()->check(hoard::ByteSize());
  hoard::Coordinator::Options::Checkpoints ckpt;
  uint64_t ckpt_deadline_s = 600;
  std::string ckpt_rate = "0";
  app.add_option("--ckpt-origin", ckpt.origin,
                 "Checkpoint origin: nfs://host/export/path or an absolute directory; default DATA/ckpt-origin");
  app.add_option("--ckpt-replicas", ckpt.replicas, "Nodes each committed checkpoint chunk is on (K), writer included")
      ->capture_default_str()->check(CLI::Range(1, 16));
  app.add_option("--ckpt-drain-deadline-s", ckpt_deadline_s,
                 "A checkpoint file not on the origin this long after its commit counts as overdue")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--ckpt-drain-max-rate", ckpt_rate,
                 "Bytes per second uploaded to the checkpoint origin, all nodes together, e.g. 100M; 0 = unlimited")
      ->capture_default_str()->check(hoard::ByteSize());
  app.add_option("--ckpt-drain-share", ckpt.drain_share,
                 "While datasets are being filled from the origin, the share of origin traffic the checkpoint drain "
                 "may take (the rest is left to dataset reads); 1 = no share, only --ckpt-drain-max-rate")
      ->capture_default_str()->check(CLI::Range(0.01, 1.0));
  std::string ckpt_min_rate = "16M";
  app.add_option("--ckpt-drain-min-rate", ckpt_min_rate,
                 "The drain's floor while it shares the origin with dataset reads, bytes/s, e.g. 16M")
      ->capture_default_str()->check(hoard::ByteSize());
  uint64_t ckpt_lost_after_s = 120;
  app.add_option("--ckpt-lost-after-s", ckpt_lost_after_s,
                 "A node silent this long is lost: the checkpoint chunks it held that are not on the origin yet "
                 "are copied to other nodes (0 = never)")
      ->capture_default_str();
  uint64_t ckpt_session_timeout_s = 10, ckpt_retire_grace_s = 15;
  app.add_option("--ckpt-session-timeout-s", ckpt_session_timeout_s,
                 "A mount not heard from this long loses its checkpoint locks, and its open files stop keeping old "
                 "generations")
      ->capture_default_str()->check(CLI::Range(uint64_t(4), uint64_t(3600)));
  app.add_option("--ckpt-retire-grace-s", ckpt_retire_grace_s,
                 "A rewritten or removed checkpoint generation is kept at least this long for readers that may have "
                 "it open")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(86400)));
  app.add_option("--ckpt-keep-last", ckpt.keep_last,
                 "Checkpoints per job whose local copies stay after they reach the origin")
      ->capture_default_str();
  app.add_option("--ckpt-commit-markers", ckpt.commit_markers,
                 "File names published only after the rest of their directory (comma-separated)")
      ->delimiter(',')->capture_default_str();
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "DATA_DIR");
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "coordinator", argc, argv)) return *exit_code;
  hoard::Result<uint64_t> rate = hoard::ParseBytes(origin_rate);
  if (!rate.ok()) {
    std::fprintf(stderr, "hoard-coordinator: --origin-max-rate: %s\n", rate.status().message().c_str());
    return 2;
  }

  hoard::Result<uint64_t> ckpt_rate_bytes = hoard::ParseBytes(ckpt_rate);
  if (!ckpt_rate_bytes.ok()) {
    std::fprintf(stderr, "hoard-coordinator: --ckpt-drain-max-rate: %s\n", ckpt_rate_bytes.status().message().c_str());
    return 2;
  }
  ckpt.drain_max_bytes_per_s = *ckpt_rate_bytes;
  hoard::Result<uint64_t> ckpt_min_bytes = hoard::ParseBytes(ckpt_min_rate);
  if (!ckpt_min_bytes.ok()) {
    std::fprintf(stderr, "hoard-coordinator: --ckpt-drain-min-rate: %s\n", ckpt_min_bytes.status().message().c_str());
    return 2;
  }
  ckpt.drain_min_bytes_per_s = *ckpt_min_bytes;
  ckpt.drain_deadline = std::chrono::seconds(ckpt_deadline_s);
  ckpt.lost_after = std::chrono::seconds(ckpt_lost_after_s);
  ckpt.session_timeout = std::chrono::seconds(ckpt_session_timeout_s);
  ckpt.retire_grace = std::chrono::seconds(ckpt_retire_grace_s);
  ckpt.open_origin = [](const std::string& source) { return hoard::OpenCkptOrigin(source); };

  hoard::BlockTerminationSignals();
  auto log = hoard::MakeLogger("coordinator", log_level);
  zmq::context_t context;
  auto security = hoard::proto::DaemonSecurity(context, security_flags.keys_dir, security_flags.insecure, log);
  if (!security.ok()) {
    log->critical("cannot start: {}", security.status().message());
    return 2;
  }
  auto coordinator = hoard::Coordinator::Open({.data_dir = data_dir,
                                               .down_after = std::chrono::milliseconds(down_after_ms),
                                               .logger = log,
                                               .origin_limits = {.max_connections = origin_connections,
                                                                 .max_bytes_per_s = *rate},
                                               .ckpt = ckpt});
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
