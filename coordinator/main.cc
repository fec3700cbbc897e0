// hoard-coordinator: the cluster's membership and dataset registry.
#include <CLI/CLI.hpp>

#include "common/daemon.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"

int main(int argc, char** argv) {
  CLI::App app{"hoard-coordinator: keeps hoard's members, datasets and stripe assignment"};
  std::string listen = "tcp://127.0.0.1:7100", data_dir, log_level = "info";
  int down_after_ms = 5000;
  app.add_option("--listen", listen, "ZeroMQ endpoint to serve on")->capture_default_str();
  app.add_option("--data-dir", data_dir, "Directory for the durable state and manifests")->required();
  app.add_option("--down-after-ms", down_after_ms, "Mark a node down after this much silence")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  hoard::BlockTerminationSignals();
  auto log = hoard::MakeLogger("coordinator", log_level);
  auto coordinator = hoard::Coordinator::Open({.data_dir = data_dir,
                                               .down_after = std::chrono::milliseconds(down_after_ms),
                                               .logger = log});
  if (!coordinator.ok()) {
    log->critical("cannot start: {}", coordinator.status().ToString());
    return 1;
  }
  zmq::context_t context;
  hoard::CoordinatorService service(coordinator->get(), {.endpoint = listen, .logger = log, .context = &context});
  if (hoard::Status s = service.Start(); !s.ok()) {
    log->critical("cannot start: {}", s.ToString());
    return 1;
  }
  log->info("coordinator serving on {} (data in {})", service.endpoint(), data_dir);
  int sig = hoard::WaitForTermination();
  log->info("signal {}: stopping", sig);
  service.Stop();
  return 0;
}
