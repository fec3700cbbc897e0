#include "common/daemon.h"

#include <algorithm>

#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace hoard {

Result<std::shared_ptr<spdlog::logger>> MakeLogger(const std::string& name, const LogOptions& o) {
  // from_str answers "off" for any word it does not know: a typo would
  // silence the daemon.
  const spdlog::level::level_enum level = spdlog::level::from_str(o.level);
  if (level == spdlog::level::off && o.level != "off") {
    return Status::InvalidArgument("unknown log level '" + o.level + "' (debug, info, warn or error)");
  }
  std::shared_ptr<spdlog::logger> logger;
  if (o.file.empty()) {
    logger = spdlog::stderr_color_mt(name);
  } else {
    try {
      // Opening appends: a restart continues the current file.
      auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(o.file, std::max<uint64_t>(o.max_bytes, 1),
                                                                         o.keep);
      logger = std::make_shared<spdlog::logger>(name, std::move(sink));
      spdlog::register_logger(logger);
    } catch (const spdlog::spdlog_ex& e) {
      return Status::InvalidArgument("cannot log to " + o.file + ": " + e.what());
    }
  }
  logger->set_level(level);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %n[%P]: %v");
  logger->flush_on(spdlog::level::info);
  return logger;
}

void KeepFreedBuffers() {
  // 32 MiB is the largest threshold glibc accepts (half its heap size); a
  // chunk (4 MiB by default) and its message fit well below it. Setting
  // either value also turns off glibc's adaptive thresholds.
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 256 << 20);
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
