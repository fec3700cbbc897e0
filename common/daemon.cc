#include "common/daemon.h"

#include <signal.h>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace hoard {

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const std::string& level) {
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_level(spdlog::level::from_str(level));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %n[%P]: %v");
  logger->flush_on(spdlog::level::info);
  return logger;
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int WaitForTermination() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace hoard
