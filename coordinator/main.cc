// hoard-coordinator: the cluster's membership and dataset registry.
#include <cstdio>

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
  app.add_option("--origin-max-connections", o.origin_limits.max_connections,
                 "Origin reads in flight, all nodes together (shared by weight, at least 1 per node); 0 = each "
                 "node's own --origin-connections")
      ->capture_default_str();
  hoard::AddBytesOption(app, "--origin-max-rate", &o.origin_limits.max_bytes_per_s,
                        "Bytes per second read from the origin, all nodes together, e.g. 800M; 0 = unlimited");
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
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "DATA_DIR");
  hoard::LogOptions log_options;
  hoard::AddLogFlags(app, &log_options);
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "coordinator", argc, argv)) return *exit_code;
  ckpt.open_origin = [](const std::string& source) { return hoard::OpenCkptOrigin(source); };

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
