#include "cli/process.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/file_util.h"

namespace hoard::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// SIGTERM, then this long for a clean exit (a node flushes its reports, the
// coordinator its state), then SIGKILL.
constexpr auto kStopGrace = 5s;
// After SIGKILL, this long before giving up on a process: one stuck in the
// kernel (state D) may never go, and `down` must not hang on it.
constexpr auto kKillWait = 5s;

// The fields of /proc/PID/stat after the command name, which may itself hold
// spaces and parentheses; fields[0] is field 3 (the state).
std::vector<std::string> StatFields(pid_t pid) {
  std::vector<std::string> fields;
  Result<std::string> stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return fields;
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return fields;
  std::string_view rest(*stat);
  rest.remove_prefix(close + 1);
  while (!rest.empty()) {
    size_t b = rest.find_first_not_of(" \n");
    if (b == std::string_view::npos) break;
    rest.remove_prefix(b);
    size_t e = rest.find_first_of(" \n");
    fields.emplace_back(rest.substr(0, e));
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
  }
  return fields;
}

// True if `pid` runs a program whose name starts with `binary`: the weaker
// check, for records written before start times were.
bool RunsBinary(pid_t pid, const std::string& binary) {
  Result<std::string> cmd = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  if (!cmd.ok() || cmd->empty()) return false;
  std::string argv0 = cmd->substr(0, cmd->find('\0'));
  std::string base = argv0.substr(argv0.find_last_of('/') + 1);
  return base.rfind(binary, 0) == 0;
}

// Reads exactly one value from a pipe; false on EOF or error.
template <typename T>
bool ReadOne(int fd, T* out) {
  ssize_t n;
  do {
    n = ::read(fd, out, sizeof *out);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof *out);
}

}  // namespace

SignalBlock::SignalBlock() {
  ::sigemptyset(&set_);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaddset(&set_, s);
  ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
}

SignalBlock::~SignalBlock() {
  while (Take() > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

int SignalBlock::Received() {
  if (got_ == 0) {
    int s = Take();
    if (s > 0) got_ = s;
  }
  return got_;
}

int SignalBlock::Take() {
  timespec zero{};
  return ::sigtimedwait(&set_, nullptr, &zero);
}

Status Interrupted(int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
  return Status::Unavailable(std::string("interrupted by ") + name);
}

uint64_t StartTime(pid_t pid) {
  std::vector<std::string> f = StatFields(pid);
  if (f.size() < 20) return 0;
  return std::strtoull(f[19].c_str(), nullptr, 10);
}

char ProcState(pid_t pid) {
  std::vector<std::string> f = StatFields(pid);
  return f.empty() || f[0].empty() ? '?' : f[0][0];
}

bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  int status;
  if (::waitpid(pid, &status, WNOHANG) == pid) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = ProcState(pid);
  return state != '?' && state != 'Z';
}

bool Running(const Proc& p) {
  if (!Alive(p.pid)) return false;
  if (p.start_time != 0) return StartTime(p.pid) == p.start_time;
  return RunsBinary(p.pid, p.binary);
}

std::string StopReport::Summary() const {
  std::string out;
  for (const auto& n : not_stopped) {
    if (!out.empty()) out += ", ";
    out += n["name"].get<std::string>() + " (pid " + std::to_string(n["pid"].get<pid_t>()) + ": " +
           n["reason"].get<std::string>() + ")";
  }
  return out;
}

// Stops a group together (the nodes exit in parallel): SIGTERM to each, up to
// kStopGrace for them to exit, SIGKILL to the rest, up to kKillWait more.
// Identity is checked again before each signal: a process that exited meanwhile
// may have been reaped and its PID given to another.
void StopGroup(const std::vector<Proc>& group, StopReport* report) {
  std::vector<const Proc*> left;
  auto stuck = [&](const Proc& p, const std::string& reason) {
    report->not_stopped.push_back({{"name", p.name}, {"pid", p.pid}, {"reason", reason}});
  };
  auto send = [&](int sig) {
    std::vector<const Proc*> still;
    for (const Proc* p : left) {
      if (!Running(*p)) {
        report->stopped.push_back(p->name);
      } else if (::kill(p->pid, sig) != 0 && errno != ESRCH) {
        stuck(*p, std::string(sig == SIGKILL ? "SIGKILL" : "SIGTERM") + ": " + std::strerror(errno));
      } else {
        still.push_back(p);
      }
    }
    left.swap(still);
  };
  auto wait = [&](Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    while (true) {
      std::vector<const Proc*> still;
      for (const Proc* p : left) {
        if (Running(*p))
          still.push_back(p);
        else
          report->stopped.push_back(p->name);
      }
      left.swap(still);
      if (left.empty() || Clock::now() >= deadline) return;
      std::this_thread::sleep_for(20ms);
    }
  };
  for (const Proc& p : group) left.push_back(&p);
  send(SIGTERM);
  wait(kStopGrace);
  send(SIGKILL);
  wait(kKillWait);
  for (const Proc* p : left) {
    char state = ProcState(p->pid);
    stuck(*p, std::string("still there ") + std::to_string(std::chrono::seconds(kKillWait).count()) +
                  " s after SIGKILL, state " + state + (state == 'D' ? " (stuck in the kernel, e.g. on I/O)" : ""));
  }
}

Status RunQuiet(const std::vector<std::string>& argv) {
  // Built before fork: the child of a threaded process (libzmq) must not allocate.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Status::IoError(argv[0] + " failed");
}

Result<Output> RunOutput(const std::vector<std::string>& argv) {
  // Built before fork: the child of a threaded process (libzmq) must not allocate.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  pid_t pid = ::fork();
  if (pid < 0) {
    Status s = Status::FromErrno(errno, "fork");
    ::close(fds[0]);
    ::close(fds[1]);
    return s;
  }
  if (pid == 0) {
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  Output result;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      result.out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (result.exit_code == 127 && result.out.empty()) return Status::NotFound("cannot run " + argv[0]);
  return result;
}

std::string BinDir() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  return DirName(exe);
}

std::string StderrPath(const std::string& log) {
  constexpr std::string_view kExt = ".log";
  const std::string_view base = std::string_view(log).ends_with(kExt)
                                    ? std::string_view(log).substr(0, log.size() - kExt.size())
                                    : std::string_view(log);
  return std::string(base) + ".stderr";
}

std::string LogTail(const std::string& path) {
  std::string out;
  for (const std::string& file : {path, StderrPath(path)}) {
    Result<std::string> log = ReadFile(file);
    if (!log.ok() || log->empty()) continue;
    std::string tail = log->size() > 600 ? log->substr(log->size() - 600) : *log;
    size_t nl = tail.find_last_not_of('\n');
    out += "; last log lines (" + file + "):\n" + tail.substr(0, nl + 1);
  }
  return out;
}

// Starts argv[0] in a new session with stdout and stderr appended to `output`.
// The child waits before exec until record(pid, start_time) has succeeded, so
// no daemon ever runs unrecorded: if this CLI dies first, the child sees the
// pipe close and exits. Reports an exec failure (e.g. a missing binary) as an
// error, not a PID.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& output,
                    const std::function<Status(pid_t, uint64_t)>& record) {
  // Built before fork: the child of a threaded process (libzmq) must not allocate.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int go[2], err_pipe[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(go[0]);
    ::close(go[1]);
    return Status::FromErrno(e, "pipe");
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {go[0], go[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return Status::FromErrno(e, "fork");
  }
  if (pid == 0) {
    ::close(go[1]);  // else our own copy would keep the pipe open after the parent dies
    ::close(err_pipe[0]);
    ::setsid();
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    char ok;
    if (!ReadOne(go[0], &ok)) ::_exit(126);
    int devnull = ::open("/dev/null", O_RDONLY);
    int out = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    // Leave no inherited descriptor open in a daemon (the directory lock
    // above all: a daemon holding it would lock the directory forever).
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != err_pipe[1]) ::close(fd);
    }
    ::execv(args[0], args.data());
    int err = errno;
    (void)!::write(err_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(go[0]);
  ::close(err_pipe[1]);
  UniqueFd go_fd(go[1]), err_fd(err_pipe[0]);
  // The child exists from fork on, so its start time is already the one it
  // will keep through exec.
  uint64_t start = StartTime(pid);
  Status s =
      start == 0 ? Status::Internal("cannot read the start time of pid " + std::to_string(pid)) : record(pid, start);
  if (!s.ok()) {
    go_fd.Reset();  // the child exits without exec
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return s;
  }
  const char ok = 1;
  (void)!::write(go_fd.get(), &ok, 1);
  go_fd.Reset();
  int err = 0;
  if (ReadOne(err_fd.get(), &err)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return Status::FromErrno(err, "start " + argv[0]);
  }
  return pid;
}

}  // namespace hoard::cli
