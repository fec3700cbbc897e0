#include "common/daemon.h"

#include <signal.h>
#include <sys/resource.h>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace hoard {

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const std::string& level) {
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_level(spdlog::level::from_str(level));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %n[%P]: %v");
  logger->flush_on(spdlog::level::info);
  return logger;
}

uint64_t RaiseFileLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
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
