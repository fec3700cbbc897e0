#include "cli/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/file_util.h"
#include "proto/rpc_client.h"

namespace hoard::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

Result<int> FreePort() {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Status::FromErrno(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Status::FromErrno(errno, "bind");
  socklen_t len = sizeof a;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Status::FromErrno(errno, "getsockname");
  }
  return static_cast<int>(ntohs(a.sin_port));
}

// Starts argv[0] in a new session with stdout and stderr appended to `log`.
// Reports an exec failure (e.g. a missing binary) as an error, not a PID.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    ::close(pipefd[0]);
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    // Leave no inherited descriptor open in a daemon (the write end of
    // pipefd closes on exec).
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != pipefd[1]) ::close(fd);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    int err = errno;
    (void)!::write(pipefd[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(pipefd[1]);
  int err = 0;
  ssize_t n = ::read(pipefd[0], &err, sizeof err);
  ::close(pipefd[0]);
  if (n == sizeof err) {
    ::waitpid(pid, nullptr, 0);
    return Status::FromErrno(err, "start " + argv[0]);
  }
  return pid;
}

// True while `pid` runs and is not a zombie. Reaps it if it is our child.
bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  int status;
  if (::waitpid(pid, &status, WNOHANG) == pid) return false;
  if (::kill(pid, 0) != 0) return false;
  Result<std::string> stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  size_t close = stat->rfind(')');
  return close == std::string::npos || close + 2 >= stat->size() || (*stat)[close + 2] != 'Z';
}

// True if `pid` runs a program whose name starts with `binary` (guards
// against signalling a recycled PID).
bool Runs(pid_t pid, const std::string& binary) {
  Result<std::string> cmd = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  if (!cmd.ok() || cmd->empty()) return false;
  std::string argv0 = cmd->substr(0, cmd->find('\0'));
  std::string base = argv0.substr(argv0.find_last_of('/') + 1);
  return base.rfind(binary, 0) == 0;
}

void Stop(pid_t pid, const std::string& binary, std::chrono::milliseconds grace) {
  if (!Alive(pid) || !Runs(pid, binary)) return;
  ::kill(pid, SIGTERM);
  const auto deadline = Clock::now() + grace;
  while (Alive(pid) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  if (Alive(pid)) {
    ::kill(pid, SIGKILL);
    while (Alive(pid)) std::this_thread::sleep_for(10ms);
  }
}

std::string LogTail(const std::string& path) {
  Result<std::string> log = ReadFile(path);
  if (!log.ok() || log->empty()) return "";
  std::string tail = log->size() > 600 ? log->substr(log->size() - 600) : *log;
  size_t nl = tail.find_last_not_of('\n');
  return "; last log lines (" + path + "):\n" + tail.substr(0, nl + 1);
}

bool Mounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mnt;
    f >> id >> parent >> dev >> root >> mnt;
    if (mnt == path) return true;
  }
  return false;
}

Status RunQuiet(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Status::IoError(argv[0] + " failed");
}

// Unmounts `path` if anything is mounted there: politely, then lazily (a
// reader still holding a file keeps a lazy unmount from blocking).
Status Unmount(const std::string& path) {
  if (!Mounted(path)) return Status::Ok();
  if (RunQuiet({"fusermount3", "-u", path}).ok() && !Mounted(path)) return Status::Ok();
  (void)RunQuiet({"fusermount3", "-u", "-z", path});
  if (Mounted(path)) return Status::IoError("cannot unmount " + path + "; is a process using it?");
  return Status::Ok();
}

template <typename Pred>
bool WaitFor(Pred ready, std::chrono::milliseconds limit, pid_t pid) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (ready()) return true;
    if (pid > 0 && !Alive(pid)) return false;
    std::this_thread::sleep_for(50ms);
  }
  return ready();
}

struct Proc {
  std::string role, name, binary, log;
  pid_t pid = -1;
};

// Stops started processes in reverse order; used on a failed `up`.
void StopAll(std::vector<Proc>& procs, const std::string& mnt) {
  (void)Unmount(mnt);
  for (auto it = procs.rbegin(); it != procs.rend(); ++it) Stop(it->pid, it->binary, 5s);
}

}  // namespace

Result<nlohmann::json> LocalUp(const LocalUpOptions& o, zmq::context_t& zmq) {
  if (o.nodes < 1 || o.nodes > 64) return Status::InvalidArgument("--nodes must be between 1 and 64");
  const std::string& dir = o.dir;
  const std::string cluster_file = JoinPath(dir, "cluster.json");
  if (Result<std::string> old = ReadFile(cluster_file); old.ok()) {
    nlohmann::json j = nlohmann::json::parse(*old, nullptr, false);
    if (j.is_object() && j.contains("coordinator_pid") && Alive(j["coordinator_pid"].get<pid_t>())) {
      return Status::AlreadyExists("a local cluster is already running in " + dir +
                                   "; stop it first with: hoard local down --dir " + dir);
    }
    // The coordinator is gone (a crash, a reboot): stop whatever of that
    // cluster survived, so there is never a second set of processes.
    HOARD_RETURN_IF_ERROR(LocalDown(dir, /*purge=*/false).status());
  }
  for (const char* sub : {"logs", "coordinator", "mount-cache", "mnt"}) {
    HOARD_RETURN_IF_ERROR(MakeDirs(JoinPath(dir, sub)));
  }
  const std::string mnt = JoinPath(dir, "mnt");
  HOARD_RETURN_IF_ERROR(Unmount(mnt));  // a mount left behind by a crash

  std::vector<Proc> procs;
  auto fail = [&](Status s, const Proc* p) {
    StopAll(procs, mnt);
    if (p != nullptr) return Status(s.code(), s.message() + LogTail(p->log));
    return s;
  };
  auto bin = [&](const char* name) { return JoinPath(o.bin_dir, name); };

  HOARD_ASSIGN_OR_RETURN(int cport, FreePort());
  const std::string coordinator = "tcp://127.0.0.1:" + std::to_string(cport);
  Proc c{"coordinator", "coordinator", "hoard-coordinator", JoinPath(dir, "logs/coordinator.log")};
  Result<pid_t> pid = Spawn({bin("hoard-coordinator"), "--listen", coordinator, "--data-dir",
                             JoinPath(dir, "coordinator"), "--down-after-ms", std::to_string(o.down_after_ms),
                             "--log-level", o.log_level},
                            c.log);
  if (!pid.ok()) return fail(pid.status(), nullptr);
  c.pid = *pid;
  procs.push_back(c);
  proto::RpcClient client(zmq, coordinator);
  if (!WaitFor([&] { return client.Call(proto::Ping{}, 200ms).ok(); }, 15s, c.pid)) {
    return fail(Status::Unavailable("the coordinator did not start"), &procs.back());
  }

  nlohmann::json nodes = nlohmann::json::array();
  for (int i = 1; i <= o.nodes; ++i) {
    const std::string name = "node" + std::to_string(i);
    HOARD_ASSIGN_OR_RETURN(int port, FreePort());
    const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
    const std::string store = JoinPath(dir, name);
    HOARD_RETURN_IF_ERROR(MakeDirs(store));
    Proc p{"node", name, "hoard-node", JoinPath(dir, "logs/" + name + ".log")};
    pid = Spawn({bin("hoard-node"), "--name", name, "--listen", endpoint, "--coordinator", coordinator, "--store",
                 store, "--capacity", std::to_string(o.capacity_bytes), "--log-level", o.log_level},
                p.log);
    if (!pid.ok()) return fail(pid.status(), nullptr);
    p.pid = *pid;
    procs.push_back(p);
    nodes.push_back({{"name", name}, {"endpoint", endpoint}, {"pid", p.pid}, {"store", JoinPath(store, "store")},
                     {"log", p.log}});
  }
  // Ready when every node is registered and up.
  auto all_up = [&] {
    Result<proto::ClusterStatusReply> st = client.Call(proto::ClusterStatus{}, 500ms);
    if (!st.ok()) return false;
    int up = 0;
    for (const auto& n : st->nodes) up += n.up ? 1 : 0;
    return up >= o.nodes;
  };
  if (!WaitFor(all_up, 20s, -1)) {
    for (const Proc& p : procs) {
      if (!Alive(p.pid)) return fail(Status::Unavailable(p.name + " exited during start-up"), &p);
    }
    return fail(Status::Unavailable("not every node registered within 20 s"), &procs.back());
  }

  nlohmann::json mount = nullptr;
  if (o.mount) {
    Proc m{"mount", "mount", "hoard-fuse", JoinPath(dir, "logs/mount.log")};
    pid = Spawn({bin("hoard-fuse"), mnt, "--coordinator", coordinator, "--node-store",
                 JoinPath(dir, "node1/store"), "--cache-dir", JoinPath(dir, "mount-cache"), "--log-level",
                 o.log_level},
                m.log);
    if (!pid.ok()) return fail(pid.status(), nullptr);
    m.pid = *pid;
    procs.push_back(m);
    if (!WaitFor([&] { return Mounted(mnt); }, 15s, m.pid)) {
      return fail(Status::Unavailable("the mount did not come up on " + mnt), &procs.back());
    }
    mount = {{"path", mnt}, {"pid", m.pid}, {"node", "node1"}, {"log", m.log}};
  }

  nlohmann::json doc = {{"dir", dir},
                        {"coordinator", coordinator},
                        {"coordinator_pid", c.pid},
                        {"coordinator_log", c.log},
                        {"nodes", nodes},
                        {"mount", mount}};
  if (Status s = WriteFileAtomic(cluster_file, doc.dump(2)); !s.ok()) return fail(s, nullptr);
  return doc;
}

Result<nlohmann::json> LocalDown(const std::string& dir, bool purge) {
  const std::string cluster_file = JoinPath(dir, "cluster.json");
  nlohmann::json doc = nlohmann::json::object();
  if (Result<std::string> text = ReadFile(cluster_file); text.ok()) {
    doc = nlohmann::json::parse(*text, nullptr, false);
    if (!doc.is_object()) return Status::Corruption(cluster_file + " is not valid JSON");
  }
  nlohmann::json stopped = nlohmann::json::array();
  // The mount first, so no reader is left hanging on a stopped node.
  const std::string mnt = JoinPath(dir, "mnt");
  HOARD_RETURN_IF_ERROR(Unmount(mnt));
  if (doc.contains("mount") && doc["mount"].is_object()) {
    Stop(doc["mount"]["pid"].get<pid_t>(), "hoard-fuse", 5s);
    stopped.push_back("mount");
  }
  if (doc.contains("nodes")) {
    for (const auto& n : doc["nodes"]) {
      Stop(n["pid"].get<pid_t>(), "hoard-node", 5s);
      stopped.push_back(n["name"]);
    }
  }
  if (doc.contains("coordinator_pid")) {
    Stop(doc["coordinator_pid"].get<pid_t>(), "hoard-coordinator", 5s);
    stopped.push_back("coordinator");
  }
  std::remove(cluster_file.c_str());
  if (purge) HOARD_RETURN_IF_ERROR(RemoveTree(dir));
  return nlohmann::json{{"dir", dir}, {"stopped", stopped}, {"purged", purge}};
}

}  // namespace hoard::cli
