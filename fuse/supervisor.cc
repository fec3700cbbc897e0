#include "fuse/supervisor.h"

#define FUSE_USE_VERSION 312  // as fuse/hoard_fs.h
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <deque>

#include "common/file_util.h"
#include "fuse/systemd_fdstore.h"

namespace hoard::fuse {
namespace {

using Clock = std::chrono::steady_clock;

// Starts a child running `binary` with `args` plus the serving flags; the
// child inherits `fd` (the supervisor cleared its close-on-exec flag).
pid_t StartChild(const SupervisorOptions& o, int fd, uint64_t generation, bool takeover, bool fd_in_systemd,
                 const sigset_t& old_mask) {
  std::vector<std::string> args = {o.binary};
  args.insert(args.end(), o.args.begin(), o.args.end());
  args.push_back("--serve-fd=" + std::to_string(fd));
  args.push_back("--generation=" + std::to_string(generation));
  args.push_back("--supervisor-pid=" + std::to_string(::getpid()));
  if (takeover) args.push_back("--takeover");
  if (fd_in_systemd) args.push_back("--fd-stored");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child: the supervisor's death reaches it as kSupervisorGone.
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::prctl(PR_SET_PDEATHSIG, kSupervisorGone);
  if (::getppid() != parent) ::_exit(1);
  ::execv(argv[0], argv.data());
  // The binary's path is gone or broken: the running binary still exists.
  ::execv("/proc/self/exe", argv.data());
  ::_exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = ::sigabbrev_np(WTERMSIG(status));
    return std::string("was killed by SIG") + (name != nullptr ? name : std::to_string(WTERMSIG(status)));
  }
  return "stopped";
}

// Waits up to `timeout` for a signal of `set`; 0 if none came.
int WaitSignal(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{.tv_sec = timeout.count() / 1000, .tv_nsec = (timeout.count() % 1000) * 1'000'000};
  for (;;) {
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
    if (errno != EINTR) return 0;
  }
}

}  // namespace

std::string BinaryPath(const char* argv0) {
  const std::string name = argv0;
  if (name.starts_with("/")) return name;
  if (name.find('/') != std::string::npos) {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) != nullptr) return JoinPath(cwd, name);
  }
  const char* path = ::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string candidate = JoinPath(dirs.substr(0, colon), name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return "/proc/self/exe";
}

std::vector<std::string> ArgsWithoutSupervisorFlags(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    bool ours = false;
    for (const char* flag : kSupervisorFlags) ours = ours || a.starts_with(flag);
    if (!ours) args.emplace_back(a);
  }
  return args;
}

Status Unmount(const std::string& mountpoint) {
  if (::geteuid() == 0) {
    if (::umount2(mountpoint.c_str(), MNT_DETACH) == 0) return Status::Ok();
    return Status::FromErrno(errno, "unmount " + mountpoint);
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", "-u", "-q", "-z", "--", mountpoint.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IoError("fusermount3 -u " + mountpoint + " failed");
  }
  return Status::Ok();
}

Status AbortConnection(const std::string& dev) {
  const size_t colon = dev.find(':');
  if (colon == std::string::npos) return Status::InvalidArgument("not a device: " + dev);
  const std::string dir = "/sys/fs/fuse/connections";
  (void)::mount("fusectl", dir.c_str(), "fusectl", 0, nullptr);  // EBUSY when it is there already
  const std::string abort = dir + "/" + dev.substr(colon + 1) + "/abort";
  UniqueFd fd(::open(abort.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid() || ::write(fd.get(), "1", 1) != 1) return Status::FromErrno(errno, "abort the connection: " + abort);
  return Status::Ok();
}

Status WriteServerState(const std::string& path, const ServerState& s) {
  const std::string json = "{\"pid\": " + std::to_string(s.pid) + ", \"supervisor_pid\": " +
                           std::to_string(s.supervisor_pid) + ", \"generation\": " + std::to_string(s.generation) +
                           ", \"took_over\": " + (s.took_over ? "true" : "false") + ", \"version\": \"" + s.version +
                           "\", \"commit\": \"" + s.commit + "\"}\n";
  return WriteFileAtomic(path, json);
}

uint64_t ServingGeneration(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  constexpr std::string_view kKey = "\"generation\": ";
  const size_t at = text.ok() ? text->find(kKey) : std::string::npos;
  if (at == std::string::npos) return 0;
  return std::strtoull(text->c_str() + at + kKey.size(), nullptr, 10);
}

int RunSupervisor(SupervisorOptions o) {
  auto& log = o.logger;
  // Signals are taken synchronously: blocked here, waited for below, and
  // unblocked in each child before it executes.
  sigset_t set, old_mask;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  ::sigprocmask(SIG_BLOCK, &set, &old_mask);

  int fd = o.adopt_fd;
  bool fd_in_systemd = o.fd_in_systemd;
  uint64_t generation = o.generation;
  if (fd < 0) {
    // systemd kept the descriptor when the last supervisor died.
    fd = FdFromSystemd(kFuseFdName);
    if (fd >= 0) {
      fd_in_systemd = true;
      generation = ServingGeneration(o.state_file);
      log->info("took the mount's FUSE connection back from systemd's descriptor store");
    }
    for (const char* var : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}) ::unsetenv(var);
  }
  bool takeover = fd >= 0;
  if (fd < 0) {
    // A fresh mount: nothing a successor could take over yet. libfuse makes
    // the mount (directly as root, through fusermount3 otherwise); its
    // session object only carries the descriptor, which this process keeps.
    (void)::unlink(JoinPath(o.session_dir, "init").c_str());
    std::string prog = o.binary;
    std::string dash_o = "-o";
    std::vector<char*> argv = {prog.data(), dash_o.data(), o.fuse_options.data()};
    fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
    static const fuse_lowlevel_ops kNoOps{};
    fuse_session* se = fuse_session_new(&args, &kNoOps, sizeof(kNoOps), nullptr);
    if (se == nullptr || fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
      log->critical("cannot mount on {}", o.mountpoint);
      return 1;
    }
    fd = fuse_session_fd(se);  // the session object is never destroyed: it would close fd
    Result<bool> stored = StoreFdInSystemd(fd, kFuseFdName);
    if (!stored.ok()) log->warn("systemd's descriptor store: {}", stored.status().ToString());
    fd_in_systemd = stored.ok() && *stored;
  }
  if (::fcntl(fd, F_SETFD, 0) != 0) {
    log->critical("cannot keep the FUSE descriptor across exec: {}", std::strerror(errno));
    (void)Unmount(o.mountpoint);
    return 1;
  }
  std::deque<Clock::time_point> crashes;
  int early_deaths = 0;  // in a row, before serving
  bool stopping = false, restarting = false;
  // A child told to stop that has not within this is killed: a stop must
  // end, and a restart's successor gets what it left unanswered resent.
  constexpr auto kStopGrace = std::chrono::seconds(15);
  Clock::time_point kill_at = Clock::time_point::max();
  int exit_code = 0;
  pid_t child = StartChild(o, fd, ++generation, takeover, fd_in_systemd, old_mask);
  if (child < 0) {
    log->critical("cannot start the serving process: {}", std::strerror(errno));
    (void)Unmount(o.mountpoint);
    return 1;
  }
  log->info("supervising the mount on {} (serving process {}, generation {}{})", o.mountpoint, child, generation,
            takeover ? ", taking over" : "");
  takeover = true;  // every later child's connection has had its INIT
  for (;;) {
    const auto wait = kill_at == Clock::time_point::max()
                          ? std::chrono::milliseconds(60'000)
                          : std::max(std::chrono::milliseconds(1),
                                     std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()));
    const int sig = WaitSignal(set, wait);
    if (child > 0 && Clock::now() >= kill_at) {
      log->warn("the serving process {} did not stop within {} s: killing it", child, kStopGrace.count());
      ::kill(child, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      if (!stopping && !restarting) {
        (sig == SIGHUP ? restarting : stopping) = true;
        log->info("{}: stopping the serving process {}", sig == SIGHUP ? "restart in place" : "stop", child);
        // SIGHUP tells the child a successor takes over (it keeps the
        // checkpoint session open); SIGTERM that the mount ends.
        if (child > 0) ::kill(child, sig == SIGHUP ? SIGHUP : SIGTERM);
        kill_at = Clock::now() + kStopGrace;
      } else if (sig != SIGHUP) {
        stopping = true;  // a stop during a restart wins
        restarting = false;
      }
      if (child > 0) continue;
    }
    int status = 0;
    if (child > 0) {
      const pid_t done = ::waitpid(child, &status, WNOHANG);
      if (done == 0) continue;  // another child of ours (none), or a spurious wake
      if (done < 0 && errno != ECHILD) continue;
      child = 0;
      kill_at = Clock::time_point::max();
    }
    if (stopping) break;
    if (restarting) {
      // Executes the binary at its path again: a new one there takes over.
      std::vector<std::string> args = {o.binary};
      args.insert(args.end(), o.args.begin(), o.args.end());
      args.push_back("--adopt-fd=" + std::to_string(fd));
      args.push_back("--generation=" + std::to_string(generation));
      if (fd_in_systemd) args.push_back("--fd-stored");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      log->info("restart in place: executing {}", o.binary);
      log->flush();
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      ::execv(argv[0], argv.data());
      ::sigprocmask(SIG_BLOCK, &set, nullptr);
      log->error("cannot execute {} ({}): the running binary goes on", o.binary, std::strerror(errno));
      restarting = false;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      // Not asked to stop: the kernel ended the connection (an unmount by
      // someone else).
      log->info("the serving process ended with the mount");
      break;
    } else {
      const auto now = Clock::now();
      crashes.push_back(now);
      const bool served = ServingGeneration(o.state_file) >= generation;
      early_deaths = served ? 0 : early_deaths + 1;
      while (!crashes.empty() && now - crashes.front() > std::chrono::minutes(1)) crashes.pop_front();
      log->error("the serving process {} {}; {} in the last minute", Describe(status),
                 served ? "while serving" : "before it served", crashes.size());
      if (crashes.size() >= size_t(kMaxCrashes)) {
        log->critical("giving up after {} crashes in a minute: unmounting {} so that readers get an error rather "
                      "than wait",
                      crashes.size(), o.mountpoint);
        exit_code = 1;
        break;
      }
      // Readers wait while no child serves: replace one that served at once.
      // One that died before serving may do so again at once: a pause that
      // grows with each such death in a row keeps it from spinning.
      const auto pause = std::chrono::milliseconds(early_deaths <= 1 ? 0 : 250 << std::min(early_deaths - 2, 3));
      if (pause.count() > 0) {
        if (const int s = WaitSignal(set, pause); s == SIGTERM || s == SIGINT) break;
      }
    }
    child = StartChild(o, fd, ++generation, takeover, fd_in_systemd, old_mask);
    if (child < 0) {
      log->critical("cannot start the serving process: {}", std::strerror(errno));
      exit_code = 1;
      break;
    }
    log->info("serving process {} started (generation {})", child, generation);
  }
  if (child > 0) {
    // Stopping with a child left (a stop during a pause cannot leave one,
    // but a give-up can): it must not serve a connection about to end.
    ::kill(child, SIGKILL);
    (void)::waitpid(child, nullptr, 0);
  }
  if (fd_in_systemd) {
    if (Status s = RemoveFdFromSystemd(kFuseFdName); !s.ok()) log->warn("systemd's descriptor store: {}", s.ToString());
  }
  if (Status s = Unmount(o.mountpoint); !s.ok()) log->warn("{}", s.ToString());
  ::close(fd);
  log->info("unmounted {}", o.mountpoint);
  return exit_code;
}

}  // namespace hoard::fuse
