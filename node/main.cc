// hoard-node: the node agent (chunk store, warm-up, peer chunk service).
#include <algorithm>

#include <cstdio>

#include <CLI/CLI.hpp>

#include "origin/ckpt_origin.h"
#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/units.h"
#include "node/node_agent.h"
#include "proto/curve.h"

int main(int argc, char** argv) {
  CLI::App app{"hoard-node: caches its share of every dataset on this node's disk and serves it to peers"};
  // Flags bind straight into the agent's options: their initializers
  // (node/node_agent.h) are the defaults, here and in --help.
  hoard::NodeAgent::Options o;
  o.listen = "tcp://127.0.0.1:7101";
  o.coordinator = "tcp://127.0.0.1:7100";
  app.add_option("--name", o.name, "Unique node name")->required();
  app.add_option("--listen", o.listen, "ZeroMQ endpoint for mounts and peers")->capture_default_str();
  app.add_option("--advertise", o.advertise, "Endpoint peers dial, if not the listen one");
  app.add_option("--data-port", o.data_port,
                 "Port of the data channel (chunks sealed with AES-GCM beside CURVE) on --listen's address: "
                 "0 any free port, -1 none (chunks then go over CURVE)")
      ->capture_default_str();
  app.add_option("--coordinator", o.coordinator,
                 "Coordinator endpoint, or the coordinators of an HA cluster separated by commas (calls follow the "
                 "leader)")->capture_default_str();
  app.add_option("--store", o.store_dir, "Chunk store directory (the node's cache disk)")->required();
  hoard::AddBytesOption(app, "--capacity", &o.capacity_bytes, "The most hoard keeps on this node's disk (dataset chunks, checkpoint copies and the mount's read tier together), e.g. 500G; 0 = the size of the store's disk (no limit but the disk)");
  app.add_option("--fetch-threads", o.fetch_threads, "Warm-up workers (chunks fetched at once)")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--origin-connections", o.origin_connections,
                 "Origin reads in flight from this node at most; the coordinator's --origin-max-connections may "
                 "allow fewer")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--origin-timeout-ms", o.origin.timeout_ms,
                 "An origin (NFS) call that takes longer fails as unavailable and is retried with backoff")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--serve-threads", o.serve_threads, "Threads serving chunk requests")->capture_default_str();
  hoard::AddCountOption<std::chrono::milliseconds>(app, "--heartbeat-ms", &o.heartbeat_interval, "Heartbeat interval");
  hoard::AddDurationOption(app, "--scrub-interval", &o.scrub_interval,
                           "A full scrub pass (every chunk file read back from the disk and checked) this often; "
                           "0 = only on `hoard scrub`");
  hoard::AddBytesOption(app, "--scrub-rate", &o.scrub_rate_bytes,
                        "Bytes a second the scrubber reads at most (it also waits while others read the disk)");
  app.add_option("--ckpt-origin", o.ckpt_origin,
                 "Checkpoint origin this node drains checkpoints to: nfs://host/export/path or a local directory");
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "STORE");
  hoard::LogOptions log_options;
  hoard::AddLogFlags(app, &log_options);
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "node", argc, argv)) return *exit_code;

  hoard::BlockTerminationSignals();
  auto made_log = hoard::MakeLogger("node", log_options);
  if (!made_log.ok()) {
    std::fprintf(stderr, "hoard-node: cannot start: %s\n", made_log.status().message().c_str());
    return 2;
  }
  auto log = *made_log;
  hoard::KeepFreedBuffers();
  const uint64_t files = hoard::RaiseFileLimit();
  zmq::context_t context;
  // ZeroMQ's default is 1,023 sockets; each peer client takes up to two.
  context.set(zmq::ctxopt::max_sockets, static_cast<int>(std::clamp<uint64_t>(files / 4, 1024, 16384)));
  auto security = hoard::proto::DaemonSecurity(context, security_flags.keys_dir, security_flags.insecure, log);
  if (!security.ok()) {
    log->critical("cannot start: {}", security.status().message());
    return 2;
  }
  o.logger = log;
  o.context = &context;
  o.open_ckpt_origin = [](const std::string& source) { return hoard::OpenCkptOrigin(source); };
  const std::string store_dir = o.store_dir;
  auto agent = hoard::NodeAgent::Start(std::move(o));
  if (!agent.ok()) {
    log->critical("cannot start: {}", agent.status().ToString());
    return 1;
  }
  hoard::metrics::Registry registry;
  (*agent)->RegisterMetrics(&registry);
  auto metrics = hoard::metrics::ServeMetrics(metrics_addr, &registry, log, hoard::JoinPath(store_dir, "metrics.addr"));
  if (!metrics.ok()) {
    log->critical("cannot start: --metrics-addr: {}", metrics.status().ToString());
    (*agent)->Stop();
    return 1;
  }
  int sig = hoard::WaitForTermination();
  log->info("signal {}: stopping", sig);
  metrics->reset();  // its scrapes read the agent
  (*agent)->Stop();
  return 0;
}
