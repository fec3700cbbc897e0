// hoard-node: the node agent (chunk store, warm-up, peer chunk service).
#include <algorithm>

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
  std::string name, listen = "tcp://127.0.0.1:7101", advertise, coordinator = "tcp://127.0.0.1:7100", store_dir,
              capacity = "0", log_level = "info", ckpt_origin;
  int data_port = 0;
  int fetch_threads = 16, origin_connections = 16, origin_timeout_ms = 10000, serve_threads = 8, heartbeat_ms = 1000;
  app.add_option("--name", name, "Unique node name")->required();
  app.add_option("--listen", listen, "ZeroMQ endpoint for mounts and peers")->capture_default_str();
  app.add_option("--advertise", advertise, "Endpoint peers dial, if not the listen one");
  app.add_option("--data-port", data_port,
                 "Port of the data channel (chunks sealed with AES-GCM beside CURVE) on --listen's address: "
                 "0 any free port, -1 none (chunks then go over CURVE)")
      ->capture_default_str();
  app.add_option("--coordinator", coordinator, "Coordinator endpoint")->capture_default_str();
  app.add_option("--store", store_dir, "Chunk store directory (the node's cache disk)")->required();
  app.add_option("--capacity", capacity, "Cache size limit, e.g. 500G; 0 = the disk's size")
      ->capture_default_str()->check(hoard::ByteSize());
  app.add_option("--fetch-threads", fetch_threads, "Warm-up workers (chunks fetched at once)")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--origin-connections", origin_connections,
                 "Origin reads in flight from this node at most; the coordinator's --origin-max-connections may "
                 "allow fewer")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--origin-timeout-ms", origin_timeout_ms,
                 "An origin (NFS) call that takes longer fails as unavailable and is retried with backoff")
      ->capture_default_str()->check(hoard::Positive());
  app.add_option("--serve-threads", serve_threads, "Threads serving chunk requests")->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms, "Heartbeat interval")->capture_default_str();
  std::string scrub_interval = "7d", scrub_rate = "64M";
  app.add_option("--scrub-interval", scrub_interval,
                 "A full scrub pass (every chunk file read back from the disk and checked) this often; "
                 "0 = only on `hoard scrub`")
      ->capture_default_str()->check(hoard::Duration());
  app.add_option("--scrub-rate", scrub_rate,
                 "Bytes a second the scrubber reads at most (it also waits while others read the disk)")
      ->capture_default_str()->check(hoard::ByteSize());
  app.add_option("--ckpt-origin", ckpt_origin,
                 "Checkpoint origin this node drains checkpoints to: nfs://host/export/path or a local directory");
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "STORE");
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "node", argc, argv)) return *exit_code;

  hoard::BlockTerminationSignals();
  auto log = hoard::MakeLogger("node", log_level);
  hoard::KeepFreedBuffers();
  const uint64_t files = hoard::RaiseFileLimit();
  hoard::Result<uint64_t> cap = hoard::ParseBytes(capacity);
  if (!cap.ok()) {
    log->critical("--capacity: {}", cap.status().message());
    return 2;
  }
  zmq::context_t context;
  // ZeroMQ's default is 1,023 sockets; each peer client takes up to two.
  context.set(zmq::ctxopt::max_sockets, static_cast<int>(std::clamp<uint64_t>(files / 4, 1024, 16384)));
  auto security = hoard::proto::DaemonSecurity(context, security_flags.keys_dir, security_flags.insecure, log);
  if (!security.ok()) {
    log->critical("cannot start: {}", security.status().message());
    return 2;
  }
  auto agent = hoard::NodeAgent::Start({.name = name,
                                        .listen = listen,
                                        .advertise = advertise,
                                        .data_port = data_port,
                                        .coordinator = coordinator,
                                        .store_dir = store_dir,
                                        .capacity_bytes = *cap,
                                        .fetch_threads = fetch_threads,
                                        .origin_connections = origin_connections,
                                        .serve_threads = serve_threads,
                                        .heartbeat_interval = std::chrono::milliseconds(heartbeat_ms),
                                        .origin = {.timeout_ms = origin_timeout_ms},
                                        .logger = log,
                                        .context = &context,
                                        .ckpt_origin = ckpt_origin,
                                        .open_ckpt_origin =
                                            [](const std::string& source) { return hoard::OpenCkptOrigin(source); },
                                        .scrub_interval = std::chrono::seconds(*hoard::ParseDurationSeconds(scrub_interval)),
                                        .scrub_rate_bytes = *hoard::ParseBytes(scrub_rate)});
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
