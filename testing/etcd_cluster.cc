#include "testing/etcd_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "consensus/etcd_kv.h"

namespace hoard {
namespace {

// Ports for the members: bound all at once to port 0 (so no two are alike),
// then released for etcd to bind. Another process may take one in between;
// Start then tries again on new ports.
Result<std::vector<int>> FreePorts(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = Status::FromErrno(errno, "socket");
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = Status::FromErrno(errno, "bind a free port");
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  if (!status.ok()) return status;
  return ports;
}

std::string Url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

}  // namespace

std::string EtcdCluster::SkipReason(const std::string& etcd) {
  if (::access(etcd.c_str(), X_OK) != 0) return etcd + " is missing (scripts/deps installs etcd-server)";
  return "";
}

Result<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(Options options) {
  if (options.members < 1) return Status::InvalidArgument("EtcdCluster: no member");
  auto dir = std::make_unique<testing::TempDir>("hoard-etcd");
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(std::move(options), std::move(dir)));
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    last = cluster->StartAll();
    if (last.ok()) return cluster;
    cluster->KillAll();
  }
  return last;
}

EtcdCluster::~EtcdCluster() { KillAll(); }

Status EtcdCluster::StartAll() {
  HOARD_ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(2 * options_.members));
  // A new directory per attempt: a member that ran once has its cluster in
  // its data directory.
  const std::string base = dir_->Sub("try" + std::to_string(attempts_++));
  if (::mkdir(base.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + base);
  members_.assign(options_.members, Member{});
  std::string initial;
  for (int i = 0; i < options_.members; ++i) {
    Member& m = members_[i];
    m.name = base.substr(dir_->path().size() + 1) + "-m" + std::to_string(i);
    m.client_port = ports[2 * i];
    m.peer_port = ports[2 * i + 1];
    initial += (i ? "," : "") + m.name + "=" + Url(m.peer_port);
  }
  for (auto& m : members_) HOARD_RETURN_IF_ERROR(Spawn(&m, initial));
  // Members wait for each other (quorum) before they answer: all are
  // started before any is waited for.
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  for (int i = 0; i < size(); ++i) HOARD_RETURN_IF_ERROR(WaitReady(i, deadline));
  return Status::Ok();
}

Status EtcdCluster::Spawn(Member* m, const std::string& initial_cluster) {
  const std::string base = dir_->path() + "/" + m->name.substr(0, m->name.find('-'));
  const std::string data = base + "/" + m->name + ".data";
  const std::string log = base + "/" + m->name + ".log";
  std::vector<std::string> args = {
      options_.etcd,
      "--name=" + m->name,
      "--data-dir=" + data,
      "--listen-client-urls=" + Url(m->client_port),
      "--advertise-client-urls=" + Url(m->client_port),
      "--listen-peer-urls=" + Url(m->peer_port),
      "--initial-advertise-peer-urls=" + Url(m->peer_port),
      "--initial-cluster=" + initial_cluster,
      "--initial-cluster-state=new",
      "--initial-cluster-token=hoard-test-" + std::to_string(::getpid()) + "-" + m->name.substr(0, m->name.find('-')),
      "--heartbeat-interval=50",
      "--election-timeout=500",
      "--logger=zap",
      "--log-outputs=stderr",
      "--log-level=warn",
  };
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) return Status::FromErrno(errno, "open " + log);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log_fd);
    return Status::FromErrno(err, "fork etcd");
  }
  if (pid == 0) {
    // Dies with the test, also when the test dies without its destructors.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  m->pid = pid;
  return Status::Ok();
}

Status EtcdCluster::WaitReady(int i, std::chrono::steady_clock::time_point deadline) {
  Member& m = members_[i];
  auto kv = EtcdKv::Open({.endpoints = {Url(m.client_port)},
                          .request_timeout = std::chrono::milliseconds(500),
                          .connect_timeout = std::chrono::milliseconds(200)});
  if (!kv.ok()) return kv.status();
  Status last;
  for (;;) {
    int wstatus = 0;
    if (::waitpid(m.pid, &wstatus, WNOHANG) == m.pid) {
      m.pid = -1;
      return Status::Unavailable("etcd member " + m.name + " exited before it answered: " + LogTail(m));
    }
    // A linearizable read: answered only with a leader and a quorum.
    auto r = (*kv)->Range("/hoard-test-ready");
    if (r.ok()) return Status::Ok();
    last = r.status();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable("etcd member " + m.name + " did not answer in time (" + last.ToString() +
                                 "): " + LogTail(m));
    }
    // Polling another process: nothing to wait on but time.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(Url(m.client_port));
  return out;
}

std::string EtcdCluster::endpoint_list() const {
  std::string out;
  for (const auto& e : endpoints()) out += (out.empty() ? "" : ",") + e;
  return out;
}

Status EtcdCluster::KillMember(int i) {
  Member& m = members_.at(i);
  if (m.pid < 0) return Status::Ok();
  if (::kill(m.pid, SIGKILL) != 0 && errno != ESRCH) return Status::FromErrno(errno, "kill " + m.name);
  ::waitpid(m.pid, nullptr, 0);
  m.pid = -1;
  return Status::Ok();
}

Status EtcdCluster::StopMember(int i) {
  const Member& m = members_.at(i);
  if (m.pid < 0 || ::kill(m.pid, SIGSTOP) != 0) return Status::NotFound(m.name + " is not running");
  return Status::Ok();
}

Status EtcdCluster::ContMember(int i) {
  const Member& m = members_.at(i);
  if (m.pid < 0 || ::kill(m.pid, SIGCONT) != 0) return Status::NotFound(m.name + " is not running");
  return Status::Ok();
}

void EtcdCluster::KillAll() {
  for (int i = 0; i < size(); ++i) (void)KillMember(i);
}

std::string EtcdCluster::LogTail(const Member& m) const {
  const std::string base = dir_->path() + "/" + m.name.substr(0, m.name.find('-'));
  std::ifstream in(base + "/" + m.name + ".log");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return text.size() > 1500 ? text.substr(text.size() - 1500) : text;
}

}  // namespace hoard
