#include "cli/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/mounts.h"
#include "cli/process.h"
#include "common/file_util.h"
#include "proto/curve.h"
#include "consensus/etcd_kv.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kClusterFile = "cluster.json";
constexpr const char* kLockFile = "local.lock";

// The etcd a cluster with several coordinators runs: $HOARD_ETCD, else
// Debian's (scripts/deps installs etcd-server).
std::string EtcdBinary() {
  const char* given = std::getenv("HOARD_ETCD");
  return given != nullptr && *given != '\0' ? given : "/usr/bin/etcd";
}

Result<int> AnyFreePort() {
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

// A free loopback port not handed out before to this `local up`: the port is
// free again once probed, and the kernel may offer it twice in a row (a node
// once got its metrics port equal to its own listen port).
Result<int> FreePort(std::set<int>* taken) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    HOARD_ASSIGN_OR_RETURN(int port, AnyFreePort());
    if (taken->insert(port).second) return port;
  }
  return Status::Unavailable("no free loopback port not already taken");
}

Result<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> p(::realpath(path.c_str(), nullptr), &std::free);
  if (p == nullptr) return Status::FromErrno(errno, "resolve " + path);
  return std::string(p.get());
}

// ---- The directory lock ----------------------------------------------------

// An exclusive flock on DIR/local.lock. The kernel drops it when the
// descriptor closes, so a holder that dies never leaves the directory locked.
class DirLock {
 public:
  static Result<DirLock> Acquire(const std::string& dir, const std::string& what) {
    const std::string path = JoinPath(dir, kLockFile);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "lock " + path);
      return Status::Unavailable(Holder(path) + " is running in " + dir + "; wait for it to finish");
    }
    // Who holds the lock, for the message above; a courtesy only, so a
    // failure to write it changes nothing.
    const std::string me = "hoard local " + what + " (pid " + std::to_string(::getpid()) + ")\n";
    if (::ftruncate(fd.get(), 0) == 0) (void)PwriteAll(fd.get(), me.data(), me.size(), 0);
    DirLock lock;
    lock.fd_ = std::move(fd);
    return lock;
  }

  DirLock() = default;
  DirLock(DirLock&&) = default;
  DirLock& operator=(DirLock&&) = default;
  ~DirLock() {
    // Before the unlock (the close), so that the file never names a holder
    // that is gone.
    if (fd_.valid()) (void)!::ftruncate(fd_.get(), 0);
  }

 private:
  // "hoard local up (pid N)" as the holder wrote it, if that process still
  // runs: the holder may not have written yet, or may be another program.
  static std::string Holder(const std::string& path) {
    Result<std::string> text = ReadFile(path);
    if (text.ok()) {
      std::string who = text->substr(0, text->find('\n'));
      size_t at = who.rfind("(pid ");
      pid_t pid = at == std::string::npos ? 0 : std::atoi(who.c_str() + at + 5);
      if (pid > 0 && ::kill(pid, 0) == 0) return who;
    }
    return "another hoard local up or down";
  }

  UniqueFd fd_;
};

// ---- Records ---------------------------------------------------------------

// Typed reads of cluster.json that never throw: the file may come from an
// older hoard, or have been edited by hand.
pid_t PidAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<pid_t>() : -1;
}
uint64_t U64At(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}
std::string StringAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<std::string> ArgvAt(const json& j, const char* key) {
  std::vector<std::string> argv;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return {};
  for (const json& a : *it) {
    if (!a.is_string()) return {};
    argv.push_back(a.get<std::string>());
  }
  return argv;
}

// The processes a record names, in stop order: the mount, the nodes, the
// coordinator (or coordinators), etcd's members.
struct Recorded {
  std::vector<Proc> mount, nodes, coordinator, etcd;
  std::string mount_path;
  bool ha = false;  // several coordinators on etcd (--coordinators N)
};

Recorded ParseRecord(const json& doc) {
  Recorded r;
  if (!doc.is_object()) return r;
  if (auto m = doc.find("mount"); m != doc.end() && m->is_object()) {
    r.mount.push_back({"mount", "hoard-fuse", StringAt(*m, "log"), PidAt(*m, "pid"), U64At(*m, "start_time")});
    r.mount_path = StringAt(*m, "path");
  }
  if (auto ns = doc.find("nodes"); ns != doc.end() && ns->is_array()) {
    for (const json& n : *ns) {
      r.nodes.push_back(
          {StringAt(n, "name"), "hoard-node", StringAt(n, "log"), PidAt(n, "pid"), U64At(n, "start_time")});
    }
  }
  if (PidAt(doc, "coordinator_pid") > 0) {
    r.coordinator.push_back({"coordinator", "hoard-coordinator", StringAt(doc, "coordinator_log"),
                             PidAt(doc, "coordinator_pid"), U64At(doc, "coordinator_start_time")});
  }
  for (const auto& [key, binary, into] : {std::tuple{"coordinators", "hoard-coordinator", &r.coordinator},
                                          std::tuple{"etcd", "etcd", &r.etcd}}) {
    auto list = doc.find(key);
    if (list == doc.end() || !list->is_array()) continue;
    r.ha = true;
    for (const json& c : *list) {
      into->push_back({StringAt(c, "name"), binary, StringAt(c, "log"), PidAt(c, "pid"), U64At(c, "start_time")});
    }
  }
  return r;
}

// A path need not be UTF-8, and dump() would throw on one that is not: such
// bytes are written as U+FFFD instead (what matters, PIDs and start times, is
// unaffected).
std::string Dump(const json& doc) { return doc.dump(2, ' ', false, json::error_handler_t::replace); }

// The record in `path`: an empty object if there is none.
Result<json> ReadRecord(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return json::object();
    return text.status();
  }
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return Status::Corruption(path + " is not valid JSON; stop its processes by hand and remove it");
  }
  return doc;
}

// ---- Stopping what a record names ------------------------------------------

// Unmounts the mount of a record (where it says, and where it must be).
Status UnmountRecorded(const Recorded& r, const std::string& dir) {
  HOARD_RETURN_IF_ERROR(Unmount(JoinPath(dir, "mnt")));
  if (!r.mount_path.empty() && r.mount_path != JoinPath(dir, "mnt")) HOARD_RETURN_IF_ERROR(Unmount(r.mount_path));
  return Status::Ok();
}

// Stops every process of a record: the mount first, so that no reader is left
// hanging on a stopped node, the coordinator last.
StopReport StopRecorded(const Recorded& r) {
  StopReport report;
  StopGroup(r.mount, &report);
  StopGroup(r.nodes, &report);
  StopGroup(r.coordinator, &report);
  StopGroup(r.etcd, &report);
  return report;
}

// ---- Binaries --------------------------------------------------------------

// Copies the executable `from` to `to` without ever changing the file a
// running daemon executes: into a temporary name, then renamed over `to`
// (the old inode lives on for whoever runs it). A reflink where the
// filesystem offers one, else an in-kernel copy.
Status CopyExecutable(const std::string& from, const std::string& to) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return Status::FromErrno(errno, "open " + from);
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return Status::FromErrno(errno, "stat " + from);
  const std::string tmp = JoinPath(DirName(to), "." + to.substr(to.rfind('/') + 1) + ".new");
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755));
  if (!out.valid()) return Status::FromErrno(errno, "create " + tmp);
  if (::ioctl(out.get(), FICLONE, in.get()) != 0) {
    bool plain = false;  // copy_file_range refused (an old kernel across filesystems): read and write
    for (off_t done = 0; done < st.st_size;) {
      ssize_t n = -1;
      if (!plain) {
        n = ::copy_file_range(in.get(), &done, out.get(), nullptr, static_cast<size_t>(st.st_size - done), 0);
        if (n > 0) continue;  // `done` moved on
        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
          plain = true;
          continue;
        }
      } else {
        char buf[1 << 16];
        n = ::pread(in.get(), buf, sizeof buf, done);
        if (n > 0) {
          if (Status w = PwriteAll(out.get(), buf, static_cast<size_t>(n), done); !w.ok()) {
            ::unlink(tmp.c_str());
            return w;
          }
        }
      }
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Status s = n < 0 ? Status::FromErrno(errno, "copy " + from + " to " + tmp)
                         : Status::IoError(from + " ended early (" + std::to_string(done) + " bytes)");
        ::unlink(tmp.c_str());
        return s;
      }
      done += n;
    }
  }
  if (::fchmod(out.get(), 0755) != 0 || ::fsync(out.get()) != 0) {
    Status s = Status::FromErrno(errno, "write " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), to.c_str()) != 0) {
    Status s = Status::FromErrno(errno, "rename " + tmp + " to " + to);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

// Puts the binaries of `from` into `bin` (DIR/bin), each replaced atomically.
// All four are checked before any is copied: a missing one leaves `bin` as it
// was. Returns the names copied.
Result<json> InstallBinaries(const std::string& from, const std::string& bin) {
  for (const char* name : kLocalBinaries) {
    const std::string src = JoinPath(from, name);
    if (::access(src.c_str(), X_OK) != 0) {
      return Status::InvalidArgument("no executable " + src + " (the directory needs " +
                                     "hoard, hoard-coordinator, hoard-node and hoard-fuse: a build's bin/)");
    }
  }
  HOARD_RETURN_IF_ERROR(MakeDirs(bin));
  json installed = json::array();
  for (const char* name : kLocalBinaries) {
    HOARD_RETURN_IF_ERROR(CopyExecutable(JoinPath(from, name), JoinPath(bin, name)));
    installed.push_back(name);
  }
  HOARD_RETURN_IF_ERROR(SyncDir(bin));
  return installed;
}

// ---- Starting --------------------------------------------------------------

// Polls `ready` every 50 ms until it holds, or fails: when a process of
// `watch` exits (with its log), when `limit` passes (`what` names the wait), or
// when a signal asks `up` to stop.
template <typename Pred>
Status WaitFor(Pred ready, std::chrono::seconds limit, const std::vector<Proc>& watch, SignalBlock& signals,
               const std::string& what, const char* during = "start-up") {
  const auto deadline = Clock::now() + limit;
  while (true) {
    if (int sig = signals.Received()) return Interrupted(sig);
    if (ready()) return Status::Ok();
    for (const Proc& p : watch) {
      if (!Running(p)) return Status::Unavailable(p.name + " exited during " + during + LogTail(p.log));
    }
    if (Clock::now() >= deadline) {
      std::string log = watch.empty() ? "" : LogTail(watch.back().log);
      return Status::Unavailable(what + " within " + std::to_string(limit.count()) + " s" + log);
    }
    std::this_thread::sleep_for(50ms);
  }
}

// `up` itself connects as a member: it only pings and reads the status.
Result<std::unique_ptr<proto::CurveSecurity>> ConnectAsMember(zmq::context_t& zmq, const std::string& keys) {
  HOARD_ASSIGN_OR_RETURN(proto::CurveKeys k, proto::LoadDaemonKeys(keys));
  return proto::CurveSecurity::Enable(zmq, std::move(k), spdlog::default_logger());
}

// The value of `flag` in a recorded command line, or "".
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "";
}

// The generation of the mount's serving process, as its last start wrote it
// in CACHE_DIR/server.json ({"pid", "supervisor_pid", "generation",
// "version", "commit"}); -1 if there is no such record of `supervisor`'s (a
// hoard-fuse that predates in-place restarts, or one not serving yet).
int64_t ServingGeneration(const std::string& cache_dir, pid_t supervisor) {
  Result<std::string> text = ReadFile(JoinPath(cache_dir, "server.json"));
  if (!text.ok()) return -1;
  const json server = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!server.is_object() || PidAt(server, "supervisor_pid") != supervisor) return -1;
  auto it = server.find("generation");
  return it != server.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// True once the mount on `mnt` is up and, when supervised, its serving
// process has recorded itself in CACHE_DIR/server.json: a `local restart`
// right after `local up` needs that record, and the kernel shows the mount a
// moment before the record is written.
bool MountServing(const std::string& mnt, const std::vector<std::string>& argv, pid_t supervisor) {
  if (!Mounted(mnt)) return false;
  if (std::find(argv.begin(), argv.end(), "--no-supervisor") != argv.end()) return true;
  return ServingGeneration(FlagValue(argv, "--cache-dir"), supervisor) >= 0;
}

// The options a cluster was started with, as its record keeps them.
json OptionsJson(const LocalUpOptions& o) {
  return {{"nodes", o.nodes},
          {"coordinators", o.coordinators},
          {"capacity_bytes", o.capacity_bytes},
          {"mount", o.mount},
          {"down_after_ms", o.down_after_ms},
          {"out_after", o.out_after},
          {"log_level", o.log_level},
          {"insecure", o.insecure}};
}

// Starts the cluster, recording each process in `doc` (and cluster.json)
// before it runs. On failure returns at once: the caller stops what `doc`
// names.
Result<json> StartCluster(const LocalUpOptions& o, const std::string& dir, SignalBlock& signals, json& doc) {
  const std::string cluster_file = JoinPath(dir, kClusterFile);
  auto save = [&] { return WriteFileAtomic(cluster_file, Dump(doc)); };
  // The daemons run from the cluster's own copy (DIR/bin, made by LocalUp).
  auto bin = [&](const char* name) { return JoinPath(dir, std::string("bin/") + name); };
  // Starts one daemon; `record` adds it to `doc`, which is saved before the
  // daemon may run.
  // Each daemon's argv is recorded with it: a resume restarts it as it was.
  auto start = [&](Proc p, std::vector<std::string> argv, const std::function<void(const Proc&, const json&)>& record,
                   bool own_log = true) -> Result<Proc> {
    if (int sig = signals.Received()) return Interrupted(sig);
    // The daemon writes and rotates its log itself: a cluster left up for
    // weeks never fills the disk with it. (etcd is told its log in argv.)
    if (own_log) argv.insert(argv.end(), {"--log-file", p.log});
    Result<pid_t> pid = Spawn(argv, StderrPath(p.log), [&](pid_t child, uint64_t start_time) {
      p.pid = child;
      p.start_time = start_time;
      record(p, json(argv));
      return save();
    });
    if (!pid.ok()) return pid.status();
    return p;
  };

  // Keys: made once, kept across `up`s (and `down`s without --purge).
  zmq::context_t zmq;
  std::unique_ptr<proto::CurveSecurity> security;
  std::vector<std::string> keys_args = {"--insecure"};
  if (!o.insecure) {
    const std::string keys = JoinPath(dir, "keys");
    if (::access(JoinPath(keys, proto::kClusterKeyFile).c_str(), F_OK) != 0) {
      HOARD_RETURN_IF_ERROR(proto::GenerateKeys(keys));
    }
    HOARD_ASSIGN_OR_RETURN(security, ConnectAsMember(zmq, keys));
    keys_args = {"--keys", keys};
    doc["keys"] = keys;
  }
  auto with_keys = [&](std::vector<std::string> argv) {
    argv.insert(argv.end(), keys_args.begin(), keys_args.end());
    return argv;
  };

  // Every daemon serves /metrics on a free loopback port of its own.
  std::set<int> taken;
  auto metrics_addr = [&]() -> Result<std::string> {
    HOARD_ASSIGN_OR_RETURN(int port, FreePort(&taken));
    return "127.0.0.1:" + std::to_string(port);
  };
  // The coordinators: one, with its state in DIR/coordinator (the default),
  // or (--coordinators N) N of them in high availability with N etcd members,
  // the state in etcd (coordinator/ha_coordinator.h).
  std::vector<Proc> coordinators;
  std::string coordinator;  // what every client dials: one endpoint, or the list
  // The checkpoint origin the nodes drain to and the mount reads drained
  // checkpoints back from: the coordinator's default (DATA/ckpt-origin), or
  // one directory every coordinator of an HA cluster shares.
  std::string ckpt_origin = JoinPath(dir, "coordinator/ckpt-origin");
  if (o.coordinators <= 1) {
    HOARD_ASSIGN_OR_RETURN(int cport, FreePort(&taken));
    coordinator = "tcp://127.0.0.1:" + std::to_string(cport);
    HOARD_ASSIGN_OR_RETURN(const std::string coordinator_metrics, metrics_addr());
    doc["coordinator_metrics"] = coordinator_metrics;
    HOARD_ASSIGN_OR_RETURN(
        Proc c, start({"coordinator", "hoard-coordinator", JoinPath(dir, "logs/coordinator.log")},
                      with_keys({bin("hoard-coordinator"), "--listen", coordinator, "--data-dir",
                                 JoinPath(dir, "coordinator"), "--down-after-ms", std::to_string(o.down_after_ms),
                                 "--out-after", o.out_after,
                                 "--metrics-addr", coordinator_metrics, "--log-level", o.log_level}),
                      [&](const Proc& p, const json& argv) {
                        doc["coordinator_pid"] = p.pid;
                        doc["coordinator_start_time"] = p.start_time;
                        doc["coordinator_log"] = p.log;
                        doc["coordinator_argv"] = argv;
                      }));
    coordinators.push_back(c);
  } else {
    ckpt_origin = JoinPath(dir, "ckpt-origin");
    const std::string shared = JoinPath(dir, "shared");
    HOARD_RETURN_IF_ERROR(MakeDirs(ckpt_origin));
    HOARD_RETURN_IF_ERROR(MakeDirs(shared));
    // etcd: N members on loopback, one cluster.
    std::vector<std::string> client_urls, peer_urls;
    std::string initial_cluster;
    for (int i = 1; i <= o.coordinators; ++i) {
      HOARD_ASSIGN_OR_RETURN(int client_port, FreePort(&taken));
      HOARD_ASSIGN_OR_RETURN(int peer_port, FreePort(&taken));
      client_urls.push_back("http://127.0.0.1:" + std::to_string(client_port));
      peer_urls.push_back("http://127.0.0.1:" + std::to_string(peer_port));
      initial_cluster += (i > 1 ? "," : "") + ("etcd" + std::to_string(i)) + "=" + peer_urls.back();
    }
    std::string etcd_list;
    for (const std::string& u : client_urls) etcd_list += (etcd_list.empty() ? "" : ",") + u;
    doc["etcd"] = json::array();
    std::vector<Proc> members;
    for (int i = 1; i <= o.coordinators; ++i) {
      const std::string name = "etcd" + std::to_string(i);
      const std::string log = JoinPath(dir, "logs/" + name + ".log");
      HOARD_ASSIGN_OR_RETURN(
          Proc m, start({name, "etcd", log},
                        {EtcdBinary(), "--name", name, "--data-dir", JoinPath(dir, name), "--listen-client-urls",
                         client_urls[i - 1], "--advertise-client-urls", client_urls[i - 1], "--listen-peer-urls",
                         peer_urls[i - 1], "--initial-advertise-peer-urls", peer_urls[i - 1], "--initial-cluster",
                         initial_cluster, "--initial-cluster-state", "new", "--initial-cluster-token",
                         "hoard-local-" + std::to_string(::getpid()), "--auto-compaction-mode", "revision",
                         "--auto-compaction-retention", "10000", "--logger", "zap", "--log-outputs", log},
                        [&](const Proc& p, const json& argv) {
                          doc["etcd"].push_back({{"name", name},
                                                 {"endpoint", client_urls[i - 1]},
                                                 {"pid", p.pid},
                                                 {"start_time", p.start_time},
                                                 {"log", p.log},
                                                 {"argv", argv}});
                        },
                        /*own_log=*/false));
      members.push_back(m);
    }
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<EtcdKv> etcd, EtcdKv::Open({.endpoints = client_urls}));
    HOARD_RETURN_IF_ERROR(WaitFor(
        [&] {
          Result<std::vector<KvMember>> ms = etcd->Members();
          if (!ms.ok() || ms->size() != client_urls.size()) return false;
          for (const KvMember& m : *ms) {
            if (!m.healthy) return false;
          }
          return true;
        },
        30s, members, signals, "the etcd members did not all answer"));
    doc["coordinators"] = json::array();
    for (int i = 1; i <= o.coordinators; ++i) {
      const std::string name = "coordinator" + std::to_string(i);
      HOARD_ASSIGN_OR_RETURN(int cport, FreePort(&taken));
      const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(cport);
      HOARD_ASSIGN_OR_RETURN(const std::string cmetrics, metrics_addr());
      HOARD_ASSIGN_OR_RETURN(
          Proc c, start({name, "hoard-coordinator", JoinPath(dir, "logs/" + name + ".log")},
                        with_keys({bin("hoard-coordinator"), "--listen", endpoint, "--data-dir", JoinPath(dir, name),
                                   "--etcd", etcd_list, "--etcd-prefix", "/hoard/local/", "--shared-store", shared,
                                   "--ckpt-origin", ckpt_origin, "--down-after-ms",
                                   std::to_string(o.down_after_ms), "--out-after", o.out_after, "--metrics-addr",
                                   cmetrics, "--log-level",
                                   o.log_level}),
                        [&](const Proc& p, const json& argv) {
                          doc["coordinators"].push_back({{"name", name},
                                                         {"endpoint", endpoint},
                                                         {"pid", p.pid},
                                                         {"start_time", p.start_time},
                                                         {"metrics", cmetrics},
                                                         {"log", p.log},
                                                         {"argv", argv}});
                        }));
      coordinators.push_back(c);
      coordinator += (coordinator.empty() ? "" : ",") + endpoint;
    }
    doc["coordinator_metrics"] = doc["coordinators"][0]["metrics"];
  }
  doc["coordinator"] = coordinator;
  proto::LeaderClient client(zmq, coordinator);
  HOARD_RETURN_IF_ERROR(WaitFor([&] { return client.Call(proto::Ping{}, 200ms).ok(); }, 30s, coordinators, signals,
                                o.coordinators > 1 ? "no coordinator became the leader"
                                                   : "the coordinator did not answer"));

  std::vector<Proc> nodes;
  for (int i = 1; i <= o.nodes; ++i) {
    const std::string name = "node" + std::to_string(i);
    HOARD_ASSIGN_OR_RETURN(int port, FreePort(&taken));
    const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
    const std::string store = JoinPath(dir, name);
    HOARD_RETURN_IF_ERROR(MakeDirs(store));
    HOARD_ASSIGN_OR_RETURN(const std::string node_metrics, metrics_addr());
    HOARD_ASSIGN_OR_RETURN(
        Proc n, start({name, "hoard-node", JoinPath(dir, "logs/" + name + ".log")},
                      with_keys({bin("hoard-node"), "--name", name, "--listen", endpoint, "--coordinator",
                                 coordinator, "--store", store, "--capacity", std::to_string(o.capacity_bytes),
                                 "--metrics-addr", node_metrics, "--ckpt-origin", ckpt_origin, "--log-level",
                                 o.log_level}),
                      [&](const Proc& p, const json& argv) {
                        doc["nodes"].push_back({{"name", name},
                                                {"endpoint", endpoint},
                                                {"pid", p.pid},
                                                {"start_time", p.start_time},
                                                {"store", JoinPath(store, "store")},
                                                {"metrics", node_metrics},
                                                {"log", p.log},
                                                {"argv", argv}});
                      }));
    nodes.push_back(n);
  }
  // Ready when every node is registered and up.
  auto all_up = [&] {
    Result<proto::ClusterStatusReply> st = client.Call(proto::ClusterStatus{}, 500ms);
    if (!st.ok()) return false;
    int up = 0;
    for (const auto& n : st->nodes) up += n.up ? 1 : 0;
    return up >= o.nodes;
  };
  std::vector<Proc> watch = nodes;
  watch.insert(watch.begin(), coordinators.begin(), coordinators.end());
  HOARD_RETURN_IF_ERROR(WaitFor(all_up, 20s, watch, signals, "not every node registered"));

  if (o.mount) {
    const std::string mnt = JoinPath(dir, "mnt");
    HOARD_ASSIGN_OR_RETURN(const std::string mount_metrics, metrics_addr());
    HOARD_ASSIGN_OR_RETURN(
        Proc m, start({"mount", "hoard-fuse", JoinPath(dir, "logs/mount.log")},
                      with_keys({bin("hoard-fuse"), mnt, "--coordinator", coordinator, "--node-store",
                                 JoinPath(dir, "node1/store"), "--node-name", "node1", "--cache-dir",
                                 JoinPath(dir, "mount-cache"), "--metrics-addr", mount_metrics, "--ckpt-origin",
                                 ckpt_origin, "--log-level", o.log_level}),
                      [&](const Proc& p, const json& argv) {
                        doc["mount"] = {{"path", mnt},
                                        {"pid", p.pid},
                                        {"start_time", p.start_time},
                                        {"node", "node1"},
                                        {"metrics", mount_metrics},
                                        {"log", p.log},
                                        {"argv", argv}};
                      }));
    HOARD_RETURN_IF_ERROR(
        WaitFor([&] { return MountServing(mnt, ArgvAt(doc["mount"], "argv"), m.pid); }, 15s, {m}, signals,
                "the mount did not come up on " + mnt));
  }

  // A signal that came with the last step still cancels the `up`.
  if (int sig = signals.Received()) return Interrupted(sig);
  doc["state"] = "up";
  HOARD_RETURN_IF_ERROR(save());
  return doc;
}

// ---- Resuming --------------------------------------------------------------

// The loopback ports a daemon's argv listens on (--listen, --metrics-addr).
std::vector<int> PortsOf(const std::vector<std::string>& argv) {
  std::vector<int> ports;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] != "--listen" && argv[i] != "--metrics-addr") continue;
    const std::string& a = argv[i + 1];
    const size_t colon = a.rfind(':');
    if (colon != std::string::npos) ports.push_back(std::atoi(a.c_str() + colon + 1));
  }
  return ports;
}

// Whether the daemons could listen on loopback `port` now. With SO_REUSEADDR,
// as they bind: a dead daemon's connections in TIME_WAIT do not hold the port,
// another program's listener does.
bool PortFree(int port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return false;
  int one = 1;
  (void)::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(s.get(), 1) == 0;
}

// One daemon of a record being resumed: where it is recorded in the
// document, and whether it still runs.
struct Daemon {
  Proc proc;
  std::vector<std::string> argv;  // empty: recorded by an older hoard
  json* entry;                    // its object in the record (the record itself for the coordinator)
  const char* prefix;             // "coordinator_" for the coordinator's top-level keys, else ""
  bool running = false;
};

// Starts `d` again with its recorded command line, its new PID and start
// time written into its entry and saved (`save`) before it may exec.
Status Respawn(Daemon& d, const std::function<Status()>& save) {
  const std::string pid_key = std::string(d.prefix) + "pid", start_key = std::string(d.prefix) + "start_time";
  return Spawn(d.argv, StderrPath(d.proc.log), [&](pid_t child, uint64_t start_time) {
           d.proc.pid = child;
           d.proc.start_time = start_time;
           (*d.entry)[pid_key] = child;
           (*d.entry)[start_key] = start_time;
           return save();
         })
      .status();
}

// Resumes the cluster recorded "up" in `doc` (see "Resuming" in the header).
// `doc` is updated (and saved) as daemons are restarted; on failure, what this
// call restarted is stopped again and the rest is left as it was.
Result<json> Resume(const LocalUpOptions& o, const std::string& dir, SignalBlock& signals, json doc) {
  const std::string cluster_file = JoinPath(dir, kClusterFile);
  const std::string afresh = "hoard local down --dir " + ShellWord(dir) + ", then hoard local up";
  Recorded r = ParseRecord(doc);
  // The coordinator, or (high availability) the coordinators and the etcd
  // members they keep their state in, each with its own entry.
  std::vector<Daemon> etcd, coordinators, nodes;
  std::optional<Daemon> mount;
  if (r.ha) {
    for (const auto& [key, procs, into] : {std::tuple{"etcd", &r.etcd, &etcd},
                                           std::tuple{"coordinators", &r.coordinator, &coordinators}}) {
      json& list = doc[key];
      for (size_t i = 0; i < procs->size() && i < list.size(); ++i) {
        into->push_back({(*procs)[i], ArgvAt(list[i], "argv"), &list[i], ""});
      }
    }
  } else if (!r.coordinator.empty()) {
    coordinators.push_back({r.coordinator[0], ArgvAt(doc, "coordinator_argv"), &doc, "coordinator_"});
  }
  json& recorded_nodes = doc["nodes"];
  json left_out = json::array();
  for (size_t i = 0; i < r.nodes.size() && i < recorded_nodes.size(); ++i) {
    json& n = recorded_nodes[i];
    if (n.value("removed", false)) {
      if (!Running(r.nodes[i])) {
        left_out.push_back({{"name", r.nodes[i].name}, {"reason", "removed from the cluster (hoard node remove)"}});
        continue;
      }
    }
    nodes.push_back({r.nodes[i], ArgvAt(n, "argv"), &n, ""});
  }
  if (!r.mount.empty()) mount = Daemon{r.mount[0], ArgvAt(doc["mount"], "argv"), &doc["mount"], ""};
  std::vector<Daemon*> all;
  for (Daemon& e : etcd) all.push_back(&e);
  for (Daemon& c : coordinators) all.push_back(&c);
  for (Daemon& n : nodes) all.push_back(&n);
  if (mount) all.push_back(&*mount);
  bool any_dead = false;
  for (Daemon* d : all) {
    d->running = Running(d->proc);
    any_dead = any_dead || !d->running;
  }
  if (!any_dead && !coordinators.empty()) {
    return Status::AlreadyExists("a local cluster is already running in " + dir +
                                 "; stop it first with: hoard local down --dir " + ShellWord(dir));
  }
  if (coordinators.empty()) {
    return Status::Unavailable("the record of the cluster in " + dir + " names no coordinator; start afresh: " +
                               afresh);
  }

  // Refuse before anything is started: options that differ, dead daemons
  // without a recorded command line, recorded ports now taken.
  const json recorded_options = doc.value("options", json::object());
  const json options = OptionsJson(o);
  const std::pair<const char*, const char*> flags[] = {
      {"--nodes", "nodes"},         {"--coordinators", "coordinators"}, {"--capacity", "capacity_bytes"},
      {"--no-mount", "mount"},
      {"--down-after-ms", "down_after_ms"}, {"--out-after", "out_after"}, {"--log-level", "log_level"},
      {"--insecure", "insecure"}};
  for (const auto& [flag, key] : flags) {
    if (o.given.count(flag) == 0 || !recorded_options.contains(key) || recorded_options[key] == options[key]) continue;
    return Status::InvalidArgument(std::string(flag) + " differs from the cluster recorded in " + dir +
                                   " (started with " + key + " = " + recorded_options[key].dump() +
                                   "); hoard local up resumes it as it was started: drop the option, or start "
                                   "afresh: " + afresh);
  }
  for (Daemon* d : all) {
    if (d->running) continue;
    if (d->argv.empty()) {
      return Status::Unavailable(d->proc.name + " of the cluster in " + dir +
                                 " is not running and its record (from an older hoard) has no command line to "
                                 "restart it with; start afresh: " + afresh);
    }
    for (int port : PortsOf(d->argv)) {
      if (!PortFree(port)) {
        return Status::Unavailable("cannot restart " + d->proc.name + " on its recorded port " +
                                   std::to_string(port) + ": another program listens there; start afresh "
                                   "(on new ports): " + afresh);
      }
    }
  }

  zmq::context_t zmq;
  std::unique_ptr<proto::CurveSecurity> security;
  if (const std::string keys = StringAt(doc, "keys"); !keys.empty()) {
    HOARD_ASSIGN_OR_RETURN(security, ConnectAsMember(zmq, keys));
  }
  auto save = [&] { return WriteFileAtomic(cluster_file, Dump(doc)); };
  std::vector<Proc> started;  // what a failure stops again
  json kept = json::array(), restarted = json::array();
  for (Daemon* d : all) {
    if (d->running) kept.push_back(d->proc.name);
  }
  auto restart = [&](Daemon& d) -> Status {
    if (int sig = signals.Received()) return Interrupted(sig);
    HOARD_RETURN_IF_ERROR(Respawn(d, save));
    started.push_back(d.proc);
    restarted.push_back(d.proc.name);
    return Status::Ok();
  };

  auto run = [&]() -> Status {
    const std::string endpoint = StringAt(doc, "coordinator");
    proto::LeaderClient client(zmq, endpoint);
    // etcd's members first: a restarted member rejoins from its data
    // directory (its --initial-cluster flags are then ignored), and the
    // coordinators need a quorum to elect one of them.
    std::vector<Proc> watch;
    for (std::vector<Daemon>* group : {&etcd, &coordinators}) {
      for (Daemon& d : *group) {
        if (!d.running) HOARD_RETURN_IF_ERROR(restart(d));
        watch.push_back(d.proc);
      }
    }
    HOARD_RETURN_IF_ERROR(WaitFor([&] { return client.Call(proto::Ping{}, 200ms).ok(); }, 30s, watch, signals,
                                  r.ha ? "no coordinator became the leader" : "the coordinator did not answer"));
    // A dead node the coordinator no longer lists was removed: it stays out.
    HOARD_ASSIGN_OR_RETURN(proto::ClusterStatusReply st, client.Call(proto::ClusterStatus{}, 5s));
    std::set<std::string> members;
    for (const auto& n : st.nodes) members.insert(n.name);
    std::vector<Daemon*> waiting;
    for (Daemon& n : nodes) {
      if (n.running) continue;
      if (members.count(n.proc.name) == 0) {
        (*n.entry)["removed"] = true;
        left_out.push_back({{"name", n.proc.name}, {"reason", "removed from the cluster (hoard node remove)"}});
        continue;
      }
      HOARD_RETURN_IF_ERROR(restart(n));
      waiting.push_back(&n);
    }
    HOARD_RETURN_IF_ERROR(save());
    // Ready when each restarted node answers on its port and is up.
    for (Daemon* n : waiting) watch.push_back(n->proc);
    HOARD_RETURN_IF_ERROR(WaitFor(
        [&] {
          Result<proto::ClusterStatusReply> now = client.Call(proto::ClusterStatus{}, 500ms);
          if (!now.ok()) return false;
          for (Daemon* n : waiting) {
            bool up = false;
            for (const auto& m : now->nodes) up = up || (m.name == n->proc.name && m.up);
            if (!up) return false;
            proto::RpcClient node(zmq, StringAt(*n->entry, "endpoint"));
            if (!node.Call(proto::Ping{}, 200ms).ok()) return false;
          }
          return true;
        },
        20s, watch, signals, "not every restarted node registered"));
    if (mount && !mount->running) {
      const std::string mnt = StringAt(*mount->entry, "path");
      HOARD_RETURN_IF_ERROR(Unmount(mnt));  // what the dead mount left: "transport endpoint is not connected"
      HOARD_RETURN_IF_ERROR(restart(*mount));
      HOARD_RETURN_IF_ERROR(
          WaitFor([&] { return MountServing(mnt, mount->argv, mount->proc.pid); }, 15s, {mount->proc}, signals,
                  "the mount did not come up on " + mnt));
    }
    if (int sig = signals.Received()) return Interrupted(sig);
    return Status::Ok();
  };
  Status s = run();
  if (!s.ok()) {
    // The mount first, if this call restarted it, as `down` does.
    for (const Proc& p : started) {
      if (p.binary == "hoard-fuse") (void)Unmount(StringAt(*mount->entry, "path"));
    }
    StopReport report;
    StopGroup(started, &report);
    (void)save();
    std::string msg = s.message();
    if (!started.empty()) {
      msg += report.clean() ? "; stopped what this up restarted" : "; still running: " + report.Summary();
    }
    msg += "; the daemons that were running are left as they were; to start afresh: " + afresh;
    return Status(s.code(), msg);
  }
  doc["state"] = "up";
  HOARD_RETURN_IF_ERROR(save());
  json out = doc;
  out["resumed"] = true;
  out["kept"] = std::move(kept);
  out["restarted"] = std::move(restarted);
  out["left_out"] = std::move(left_out);
  return out;
}

// ---- Restarting and upgrading ----------------------------------------------

std::string Names(const json& list) {
  std::string out;
  for (const json& n : list) out += (out.empty() ? "" : ", ") + n.get<std::string>();
  return out.empty() ? "none" : out;
}

// Deletes the cluster directory `real` that `given` names. When `given` is a
// symlink, the link and its target are the user's: only the contents go.
Status Purge(const std::string& given, const std::string& real) {
  struct stat st;
  if (::lstat(given.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return RemoveTree(real);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(real, ec)) {
    HOARD_RETURN_IF_ERROR(RemoveTree(entry.path().string()));
  }
  if (ec) return Status::FromErrno(ec.value(), "list " + real);
  return Status::Ok();
}

}  // namespace

std::string ShellWord(const std::string& path) {
  if (path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") ==
      std::string::npos) {
    return path;
  }
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result<json> LocalUp(const LocalUpOptions& o) {
  if (o.nodes < 1 || o.nodes > 64) return Status::InvalidArgument("--nodes must be between 1 and 64");
  HOARD_RETURN_IF_ERROR(MakeDirs(o.dir));
  HOARD_ASSIGN_OR_RETURN(const std::string dir, RealPath(o.dir));
  HOARD_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir, "up"));
  SignalBlock signals;
  const std::string cluster_file = JoinPath(dir, kClusterFile);
  HOARD_ASSIGN_OR_RETURN(json old, ReadRecord(cluster_file));
  if (!old.empty()) {
    Recorded r = ParseRecord(old);
    // A record without a state comes from an older hoard, which wrote it once
    // everything was up.
    const std::string state = old.contains("state") ? StringAt(old, "state") : "up";
    // A cluster that was up, all or part of which died (a crash, a kill, a
    // reboot): resume it.
    if (state == "up") return Resume(o, dir, signals, std::move(old));
    // An `up` that died midway, or one that failed and could not stop
    // everything: stop whatever of it survived, so that there is never a
    // second set of processes on one store.
    HOARD_RETURN_IF_ERROR(UnmountRecorded(r, dir));
    StopReport report = StopRecorded(r);
    if (!report.clean()) {
      return Status::Unavailable("processes of the previous cluster in " + dir + " would not stop: " +
                                 report.Summary());
    }
    if (std::remove(cluster_file.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, "remove " + cluster_file);
    }
  }
  for (const char* sub : {"logs", "coordinator", "mount-cache", "mnt"}) {
    HOARD_RETURN_IF_ERROR(MakeDirs(JoinPath(dir, sub)));
  }
  HOARD_RETURN_IF_ERROR(Unmount(JoinPath(dir, "mnt")));  // a mount left behind by a crash
  // Nothing of this cluster runs now: its copy of the binaries is taken
  // afresh from beside this `hoard`.
  HOARD_RETURN_IF_ERROR(InstallBinaries(o.bin_dir, JoinPath(dir, "bin")).status());

  json doc = {{"state", "starting"},   {"dir", dir},          {"up_pid", ::getpid()}, {"bin_dir", JoinPath(dir, "bin")},
              {"coordinator", nullptr}, {"nodes", json::array()}, {"mount", nullptr}, {"keys", nullptr},
              {"options", OptionsJson(o)}};
  Result<json> up = StartCluster(o, dir, signals, doc);
  if (up.ok()) {
    json out = std::move(*up);
    out["resumed"] = false;
    out["kept"] = json::array();
    out["restarted"] = json::array();
    out["left_out"] = json::array();
    return out;
  }

  // Every failure, a signal included, ends here: stop what the record names.
  Recorded r = ParseRecord(doc);
  Status unmounted = UnmountRecorded(r, dir);
  StopReport report = StopRecorded(r);
  std::string msg = up.status().message();
  if (unmounted.ok() && report.clean()) {
    std::remove(cluster_file.c_str());
    if (signals.Received() != 0) msg += "; stopped what it had started";
  } else {
    doc["state"] = "failed";
    (void)WriteFileAtomic(cluster_file, Dump(doc));
    msg += "; and the cleanup failed:";
    if (!unmounted.ok()) msg += " " + unmounted.message();
    if (!report.clean()) msg += " still running: " + report.Summary();
    msg += "; retry with: hoard local down --dir " + ShellWord(dir);
  }
  return Status(up.status().code(), msg);
}

Result<json> LocalDown(const std::string& given, bool purge) {
  // "found": whether a cluster was recorded there (a down without one is
  // not an error: there is nothing to stop, as after a second down).
  json result = {{"dir", given},           {"found", false}, {"stopped", json::array()},
                 {"not_stopped", json::array()}, {"purged", purge}};
  Result<std::string> resolved = RealPath(given);
  if (!resolved.ok()) {
    // Nothing there (or a dangling symlink): nothing runs from it.
    if (resolved.status().code() == Code::kNotFound) return result;
    return resolved.status();
  }
  const std::string dir = *resolved;
  result["dir"] = dir;
  const std::string cluster_file = JoinPath(dir, kClusterFile);
  // No up ever ran here (or a purge emptied it): leave the directory as it
  // is, without a lock file. An `up` starting meanwhile has recorded nothing
  // yet, so this `down` simply comes first.
  if (::access(JoinPath(dir, kLockFile).c_str(), F_OK) != 0 && ::access(cluster_file.c_str(), F_OK) != 0 &&
      !Mounted(JoinPath(dir, "mnt"))) {
    return result;
  }
  HOARD_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(dir, "down"));
  HOARD_ASSIGN_OR_RETURN(json doc, ReadRecord(cluster_file));
  result["found"] = true;
  Recorded r = ParseRecord(doc);
  // The mount first, so no reader is left hanging on a stopped node.
  HOARD_RETURN_IF_ERROR(UnmountRecorded(r, dir));
  StopReport report = StopRecorded(r);
  result["stopped"] = report.stopped;
  result["not_stopped"] = report.not_stopped;
  if (!report.clean()) {
    // Keep the record, so that the next `down` (or `up`) tries them again,
    // and the store of a process that still runs.
    result["purged"] = false;
    return result;
  }
  if (std::remove(cluster_file.c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "remove " + cluster_file);
  }
  if (purge) HOARD_RETURN_IF_ERROR(Purge(given, dir));
  return result;
}


LocalRestartResult LocalRestart(const LocalRestartOptions& o) {
  const bool upgrade = !o.upgrade_from.empty();
  LocalRestartResult out;
  out.doc = {{"dir", o.dir},          {"upgrade", upgrade},          {"bin_dir", nullptr},
             {"installed", json::array()}, {"daemons", json::array()},    {"restarted", json::array()},
             {"not_restarted", json::array()}, {"failed", nullptr}};
  json& result = out.doc;
  auto fail = [&](Status s) {
    out.status = std::move(s);
    return std::move(out);
  };
  Result<std::string> resolved = RealPath(o.dir);
  if (!resolved.ok()) {
    if (resolved.status().code() != Code::kNotFound) return fail(resolved.status());
    return fail(Status::NotFound("no hoard local cluster in " + o.dir + " (hoard local up starts one)"));
  }
  const std::string dir = *resolved;
  const std::string again = "hoard local up --dir " + ShellWord(dir);
  const std::string afresh = "hoard local down --dir " + ShellWord(dir) + ", then hoard local up";
  result["dir"] = dir;
  result["bin_dir"] = JoinPath(dir, "bin");
  Result<DirLock> lock = DirLock::Acquire(dir, upgrade ? "upgrade" : "restart");
  if (!lock.ok()) return fail(lock.status());
  SignalBlock signals;
  const std::string cluster_file = JoinPath(dir, kClusterFile);
  Result<json> read = ReadRecord(cluster_file);
  if (!read.ok()) return fail(read.status());
  json doc = std::move(*read);
  if (doc.empty() || (doc.contains("state") && StringAt(doc, "state") != "up")) {
    return fail(Status::NotFound("no hoard local cluster is up in " + dir + " (hoard local up starts one)"));
  }
  Recorded r = ParseRecord(doc);
  if (r.coordinator.empty()) {
    return fail(Status::Unavailable("the record of the cluster in " + dir + " names no coordinator; start afresh: " +
                                    afresh));
  }
  if (r.ha) {
    return fail(Status::InvalidArgument("restart and upgrade of a cluster with several coordinators are not "
                                        "supported yet"));
  }

  // The daemons to restart, in order: the coordinator first (the mounts serve
  // from their last map meanwhile, the nodes retry their heartbeats), then
  // each node's agent followed by its mount.
  const bool everything = upgrade || (o.nodes.empty() && !o.coordinator);
  const std::set<std::string> wanted(o.nodes.begin(), o.nodes.end());
  std::vector<Daemon> order;
  if (everything || o.coordinator) order.push_back({r.coordinator[0], ArgvAt(doc, "coordinator_argv"), &doc,
                                                    "coordinator_"});
  json& recorded_nodes = doc["nodes"];
  std::optional<Daemon> mount;
  if (!r.mount.empty()) mount = Daemon{r.mount[0], ArgvAt(doc["mount"], "argv"), &doc["mount"], ""};
  const std::string mount_node = mount ? StringAt(*mount->entry, "node") : "";
  std::set<std::string> known;
  bool mount_placed = false;
  for (size_t i = 0; i < r.nodes.size() && i < recorded_nodes.size(); ++i) {
    json& n = recorded_nodes[i];
    if (n.value("removed", false)) continue;
    known.insert(r.nodes[i].name);
    if (!everything && wanted.count(r.nodes[i].name) == 0) continue;
    order.push_back({r.nodes[i], ArgvAt(n, "argv"), &n, ""});
    if (mount && r.nodes[i].name == mount_node) {
      order.push_back(*mount);
      mount_placed = true;
    }
  }
  if (mount && everything && !mount_placed) order.push_back(*mount);
  for (const std::string& name : wanted) {
    if (known.count(name) == 0) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      return fail(Status::InvalidArgument("no node named " + name + " in the cluster in " + dir + " (its nodes: " +
                                          names + ")"));
    }
  }

  // Refuse before anything is touched: a record without command lines, an
  // upgrade of daemons that do not run from DIR/bin, a running mount that
  // cannot restart in place. A daemon that is not running is simply started
  // in its turn (after a half-done upgrade, the one that did not come back).
  const std::string bin = JoinPath(dir, "bin");
  for (Daemon& d : order) {
    d.running = Running(d.proc);
    if (d.argv.empty()) {
      return fail(Status::Unavailable(d.proc.name + " of the cluster in " + dir +
                                      " has no recorded command line (started by an older hoard); start afresh: " +
                                      afresh));
    }
    if (upgrade && d.argv[0] != JoinPath(bin, d.proc.binary)) {
      return fail(Status::Unavailable(d.proc.name + " runs " + d.argv[0] + ", not the cluster's copy in " + bin +
                                      " (a cluster started by an older hoard): upgrade it by starting afresh on "
                                      "the new binaries: " + afresh));
    }
    if (d.proc.binary == "hoard-fuse" && d.running) {
      const std::string cache = FlagValue(d.argv, "--cache-dir");
      if (ServingGeneration(cache, d.proc.pid) < 0) {
        return fail(Status::Unavailable(
            "the mount (pid " + std::to_string(d.proc.pid) + ") cannot restart in place: its supervisor wrote no " +
            JoinPath(cache, "server.json") + " (a hoard-fuse older than in-place restarts); restart it by " +
            "starting afresh: " + afresh));
      }
    }
  }
  if (upgrade) {
    Result<json> installed = InstallBinaries(o.upgrade_from, bin);
    if (!installed.ok()) return fail(installed.status().Annotate("install the binaries of " + o.upgrade_from));
    result["installed"] = std::move(*installed);
  }

  zmq::context_t zmq;
  std::unique_ptr<proto::CurveSecurity> security;
  if (const std::string keys = StringAt(doc, "keys"); !keys.empty()) {
    Result<std::unique_ptr<proto::CurveSecurity>> s = ConnectAsMember(zmq, keys);
    if (!s.ok()) return fail(s.status());
    security = std::move(*s);
  }
  proto::LeaderClient client(zmq, StringAt(doc, "coordinator"));
  auto save = [&] { return WriteFileAtomic(cluster_file, Dump(doc)); };

  // One daemon: stopped and started (the coordinator, a node agent), or
  // restarted in place (the mount). Fills `step`.
  auto restart = [&](Daemon& d, json& step) -> Status {
    const bool is_mount = d.proc.binary == "hoard-fuse";
    if (!Running(d.proc)) {
      // Not running: started as `up` would resume it.
      step["how"] = "started";
      if (is_mount) HOARD_RETURN_IF_ERROR(Unmount(StringAt(*d.entry, "path")));  // ENOTCONN left by a dead one
    } else if (is_mount) {
      const std::string cache = FlagValue(d.argv, "--cache-dir");
      const std::string path = StringAt(*d.entry, "path");
      const int64_t before = ServingGeneration(cache, d.proc.pid);
      int64_t now = before;
      step["how"] = "in_place";
      step["node"] = StringAt(*d.entry, "node");
      step["previous_generation"] = before;
      if (!Running(d.proc)) return Status::Unavailable("the mount exited" + LogTail(d.proc.log));
      if (::kill(d.proc.pid, SIGHUP) != 0) return Status::FromErrno(errno, "SIGHUP to the mount");
      HOARD_RETURN_IF_ERROR(WaitFor(
          [&] {
            now = ServingGeneration(cache, d.proc.pid);
            return now > before && Mounted(path);
          },
          o.timeout, {d.proc}, signals,
          "the mount did not serve again (" + JoinPath(cache, "server.json") + " still at generation " +
              std::to_string(before) + ")",
          "its restart"));
      step["generation"] = now;
      return Status::Ok();
    } else {
      step["how"] = "stop_start";
      StopReport stopped;
      StopGroup({d.proc}, &stopped);
      if (!stopped.clean()) return Status::Unavailable("it would not stop: " + stopped.Summary());
    }
    HOARD_RETURN_IF_ERROR(Respawn(d, save));
    if (is_mount) {
      const std::string path = StringAt(*d.entry, "path");
      return WaitFor([&] { return MountServing(path, d.argv, d.proc.pid); }, o.timeout, {d.proc}, signals,
                     "the mount did not come up on " + path);
    }
    if (d.entry == &doc) {
      return WaitFor([&] { return client.Call(proto::Ping{}, 200ms).ok(); }, o.timeout, {d.proc}, signals,
                     "the coordinator did not answer", "its restart");
    }
    proto::RpcClient node(zmq, StringAt(*d.entry, "endpoint"));
    return WaitFor(
        [&] {
          if (!node.Call(proto::Ping{}, 200ms).ok()) return false;
          Result<proto::ClusterStatusReply> st = client.Call(proto::ClusterStatus{}, 500ms);
          if (!st.ok()) return false;
          for (const auto& m : st->nodes) {
            if (m.name == d.proc.name) return m.up;
          }
          return false;
        },
        o.timeout, {d.proc}, signals, d.proc.name + " did not register again", "its restart");
  };

  for (size_t i = 0; i < order.size(); ++i) {
    Daemon& d = order[i];
    const auto started = Clock::now();
    json step = {{"name", d.proc.name}, {"binary", d.proc.binary}, {"previous_pid", d.proc.pid}};
    Status s = signals.Received() != 0 ? Interrupted(signals.Received()) : restart(d, step);
    if (!s.ok()) {
      for (size_t j = i + 1; j < order.size(); ++j) result["not_restarted"].push_back(order[j].proc.name);
      result["failed"] = d.proc.name;
      (void)save();
      // What was done comes first: the reason may end with lines of a log.
      return fail(Status(s.code(), d.proc.name + " did not come back (restarted: " + Names(result["restarted"]) +
                                       "; left running as they were: " + Names(result["not_restarted"]) +
                                       "; once the cause is fixed, the same command again, or " + again +
                                       ", starts what is not running): " + s.message()));
    }
    step["pid"] = d.proc.pid;
    step["seconds"] = std::chrono::duration<double>(Clock::now() - started).count();
    result["daemons"].push_back(step);
    result["restarted"].push_back(d.proc.name);
    if (o.on_step) o.on_step(step);
  }
  if (Status s = save(); !s.ok()) return fail(s);
  return out;
}

}  // namespace hoard::cli
