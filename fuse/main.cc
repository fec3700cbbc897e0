// hoard-fuse: the POSIX mount of a node (MOUNT/datasets/NAME/...).
#include <limits.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/file_util.h"
#include "common/mountinfo.h"
#include "common/metrics_server.h"
#include "common/units.h"
#include "common/build_info.h"
#include "fuse/hoard_fs.h"
#include "fuse/supervisor.h"
#include "proto/curve.h"

namespace {
// For the SIGHUP handler of a serving process (main only).
fuse_session* volatile g_session = nullptr;
volatile sig_atomic_t g_restarting = 0;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-fuse: mounts every hoard dataset under MOUNTPOINT/datasets"};
  // Flags bind straight into the mount's options: their initializers
  // (fuse/hoard_fs.h) are the defaults, here and in --help. The FUSE loop's
  // own settings (threads, --allow-other) are main's alone.
  hoard::fuse::HoardFs::Options o;
  o.coordinator = "tcp://127.0.0.1:7100";
  std::string mountpoint;
  bool allow_other = false, debug = false;
  int threads = 16;
  app.add_option("mountpoint", mountpoint, "Where to mount")->required();
  app.add_option("--coordinator", o.coordinator,
                 "Coordinator endpoint, or the coordinators of an HA cluster separated by commas (calls follow the "
                 "leader)")->capture_default_str();
  app.add_option("--node-store", o.local_store,
                 "This node's chunk store (STORE_DIR/store of its hoard-node), for reading local chunks directly");
  app.add_option("--cache-dir", o.cache_dir, "Where the mount keeps manifests and the last cluster map")->required();
  app.add_flag("--allow-other", allow_other, "Let users other than the mounter use the mount (multi-user nodes)");
  app.add_option("--threads", threads, "FUSE worker threads kept idle (up to 4x as many run under load)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--read-ahead-kb", o.read_ahead_kb, "Kernel read-ahead for the mount, KiB (0: kernel default)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--passthrough", o.passthrough,
                 "Let the kernel read dataset files held whole in one local chunk file straight from it (FUSE "
                 "passthrough, Linux 6.9+; falls back by itself where the kernel has none); also lets checkpoint writes skip "
                 "the mount's page cache (Linux 6.9+)")
      ->capture_default_str();
  app.add_option("--readahead-chunks", o.readahead_chunks,
                 "Chunks fetched ahead of a sequential reader (-1: 16 MiB worth, at least 4; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1024));
  app.add_option("--readahead-threads", o.readahead_threads, "Threads fetching chunks ahead (all readers together)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  hoard::AddBytesOption(app, "--memory-cache-size", &o.memory_cache_bytes,
                        "The mount's memory cache of chunks fetched from peers or the origin (chunks read ahead get up "
                        "to half of it)");
  int io_threads = 2;
  app.add_option("--io-threads", io_threads,
                 "ZeroMQ I/O threads: CURVE encrypts and decrypts on them, so a node that reads peers' chunks and "
                 "replicates checkpoints at once needs more than one")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  std::string read_tier_size = "auto";
  app.add_option("--read-tier-dir", o.read_tier_dir,
                 "Where to keep copies of chunks read from peers (default: NODE_STORE/read-tier; needs --node-store)");
  app.add_option("--read-tier-size", read_tier_size,
                 "The most the read tier may hold (auto: half the disk's free space at start, leaving a tenth of "
                 "the disk or 1 GiB free; 0: no read tier); in NODE_STORE it also keeps within what the node's "
                 "--capacity leaves after its datasets and checkpoints")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        return v == "auto" || hoard::ParseBytes(v).ok() ? "" : "a size (e.g. 200G), auto, or 0";
      });
  std::string ckpt_sync_level = "R", ckpt_origin;
  app.add_option("--ckpt-origin", ckpt_origin,
                 "The checkpoint origin (nfs://HOST/EXPORT/PATH or a directory), for checkpoints only there");
  app.add_option("--node-name", o.node_name,
                 "This node's name (its hoard-node --name): checkpoints written here are held by it");
  app.add_option("--ckpt-sync-level", ckpt_sync_level,
                 "What fsync/close of a checkpoint file wait for: R (replicated on K nodes) or L (this disk only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"R", "L"}));
  app.add_option("--ckpt-write-behind-threads", o.ckpt_write_behind_threads,
                 "Threads replicating a checkpoint file's finished chunks while it is still being written "
                 "(0: everything at fsync/close)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  hoard::proto::SecurityFlags security_flags;
  hoard::proto::AddSecurityFlags(app, &security_flags);
  std::string metrics_addr;
  hoard::metrics::AddMetricsAddrFlag(app, &metrics_addr, "CACHE_DIR");
  app.add_flag("--fuse-debug", debug, "Print every FUSE request");
  bool no_supervisor = false;
  app.add_flag("--no-supervisor", no_supervisor,
               "Serve in this process, with no supervisor holding the mount (fuse/supervisor.h): a crash of it then "
               "ends the mount and SIGHUP does not restart it");
  // Set by the supervisor on the command lines it runs (kSupervisorFlags).
  int serve_fd = -1, adopt_fd = -1, supervisor_pid = 0;
  uint64_t generation = 0;
  bool takeover = false, fd_stored = false;
  app.add_option("--serve-fd", serve_fd)->group("");
  app.add_flag("--fd-stored", fd_stored)->group("");
  app.add_option("--adopt-fd", adopt_fd)->group("");
  app.add_option("--generation", generation)->group("");
  app.add_option("--supervisor-pid", supervisor_pid)->group("");
  app.add_flag("--takeover", takeover)->group("");
  hoard::LogOptions log_options;
  hoard::AddLogFlags(app, &log_options);
  if (std::optional<int> exit_code = hoard::ParseDaemonFlags(app, "mount", argc, argv)) return *exit_code;

  auto made_log = hoard::MakeLogger("fuse", log_options);
  if (!made_log.ok()) {
    std::fprintf(stderr, "hoard-fuse: cannot start: %s\n", made_log.status().message().c_str());
    return 2;
  }
  auto log = *made_log;
  // mountinfo holds resolved paths; the read-ahead knob is found through it.
  char resolved[PATH_MAX];
  bool found = ::realpath(mountpoint.c_str(), resolved) != nullptr;
  if (!found && errno == ENOTCONN && serve_fd < 0 && adopt_fd < 0) {
    // A mount whose every process died: detach it and mount afresh.
    if (hoard::Status s = hoard::fuse::Unmount(mountpoint); s.ok()) log->warn("detached a dead mount on {}", mountpoint);
    found = ::realpath(mountpoint.c_str(), resolved) != nullptr;
  }
  if (!found) {
    log->critical("cannot mount on {}: {}", mountpoint, std::strerror(errno));
    return 1;
  }
  mountpoint = resolved;
  // The kernel checks modes and owners itself; datasets answer EROFS to
  // every change, checkpoints take them.
  std::string opts = "fsname=hoard,subtype=hoard,default_permissions";
  if (allow_other) opts += ",allow_other";
  const std::string session_dir = hoard::JoinPath(o.cache_dir, "session");
  if (serve_fd < 0 && !no_supervisor) {
    if (hoard::Status s = hoard::MakeDirs(session_dir); !s.ok()) {
      log->critical("cannot start: {}", s.ToString());
      return 1;
    }
    hoard::fuse::SupervisorOptions so{.mountpoint = mountpoint,
                                      .fuse_options = opts,
                                      .binary = hoard::fuse::BinaryPath(argv[0]),
                                      .args = hoard::fuse::ArgsWithoutSupervisorFlags(argc, argv),
                                      .session_dir = session_dir,
                                      .state_file = hoard::JoinPath(o.cache_dir, "server.json"),
                                      .adopt_fd = adopt_fd,
                                      .generation = generation,
                                      .fd_in_systemd = fd_stored,
                                      .logger = log};
    return hoard::fuse::RunSupervisor(std::move(so));
  }
  if (serve_fd >= 0) {
    // The supervisor's death (kSupervisorGone, blocked here before any
    // thread starts, so only this one takes it): nobody holds the connection
    // for a successor, so end it now rather than stop gracefully: detach the
    // mount (unless systemd keeps the descriptor and restarts the
    // supervisor) and exit. Requests in flight then fail, as when the whole
    // mount is killed; a graceful stop could wait on them for ever.
    sigset_t gone;
    sigemptyset(&gone);
    sigaddset(&gone, hoard::fuse::kSupervisorGone);
    ::pthread_sigmask(SIG_BLOCK, &gone, nullptr);
    // Read now, from mountinfo: a stat of the mount would be a request to
    // this very process.
    hoard::Result<std::string> mount_dev = hoard::MountDevice(mountpoint);
    const std::string dev = mount_dev.ok() ? *mount_dev : "";
    std::thread([gone, mountpoint, dev, fd_stored, log] {
      int sig = 0;
      while (::sigwait(&gone, &sig) != 0) {
      }
      if (!fd_stored) {
        hoard::Status aborted = hoard::fuse::AbortConnection(dev);
        hoard::Status s = hoard::fuse::Unmount(mountpoint);
        log->warn("the supervisor is gone: {}; {}",
                  aborted.ok() ? "ended the FUSE connection" : aborted.ToString(),
                  s.ok() ? "detached the mount on " + mountpoint : s.ToString());
      }
      log->flush();
      ::_exit(1);
    }).detach();
    // It may have died before the signal was armed.
    if (supervisor_pid > 0 && ::getppid() != supervisor_pid) ::kill(::getpid(), hoard::fuse::kSupervisorGone);
  }
  hoard::KeepFreedBuffers();
  const uint64_t files = hoard::RaiseFileLimit();
  zmq::context_t context(io_threads);
  // ZeroMQ's default is 1,023 sockets; each peer client takes up to two.
  context.set(zmq::ctxopt::max_sockets, static_cast<int>(std::clamp<uint64_t>(files / 4, 1024, 16384)));
  auto security = hoard::proto::DaemonSecurity(context, security_flags.keys_dir, security_flags.insecure, log);
  if (!security.ok()) {
    log->critical("cannot start: {}", security.status().message());
    return 2;
  }
  uint64_t tier_bytes = 0, tier_min_free = 0;
  if (o.read_tier_dir.empty() && !o.local_store.empty()) o.read_tier_dir = hoard::JoinPath(o.local_store, "read-tier");
  if (!o.read_tier_dir.empty() && read_tier_size != "0") {
    // The free-space floor applies to a given size too: the node agent's
    // chunks share the disk.
    if (hoard::Status s = hoard::MakeDirs(o.read_tier_dir); !s.ok()) log->warn("read tier: {}", s.ToString());
    hoard::fuse::ReadTier::AutoSize(o.read_tier_dir, &tier_bytes, &tier_min_free);
    if (read_tier_size != "auto") tier_bytes = *hoard::ParseBytes(read_tier_size);
  }
  o.mountpoint = mountpoint;
  o.read_tier_bytes = tier_bytes;
  o.read_tier_min_free = tier_min_free;
  o.logger = log;
  o.context = &context;
  o.ckpt_sync_level = ckpt_sync_level == "L" ? hoard::proto::CkptLevel::kL : hoard::proto::CkptLevel::kR;
  // Under a supervisor the connection may outlive this process: keep what a
  // successor needs, and take over what a predecessor kept.
  if (serve_fd >= 0) o.session_dir = session_dir;
  o.takeover = takeover;
  if (!ckpt_origin.empty()) o.open_ckpt_origin = [ckpt_origin] { return hoard::OpenCkptOrigin(ckpt_origin); };
  const std::string cache_dir = o.cache_dir, coordinator = o.coordinator, node_store = o.local_store;
  hoard::fuse::HoardFs fs(std::move(o));
  if (hoard::Status s = fs.Start(); !s.ok()) {
    log->critical("cannot start: {}", s.ToString());
    return 1;
  }
  hoard::metrics::Registry registry;
  fs.RegisterMetrics(&registry);
  // Declared after fs: destroyed (stopped) before it, as its scrapes read fs.
  auto metrics = hoard::metrics::ServeMetrics(metrics_addr, &registry, log, hoard::JoinPath(cache_dir, "metrics.addr"));
  if (!metrics.ok()) {
    log->critical("cannot start: --metrics-addr: {}", metrics.status().ToString());
    fs.Stop();
    return 1;
  }

  std::vector<std::string> fuse_argv = {argv[0], "-o", opts};
  if (debug) fuse_argv.push_back("-d");
  std::vector<char*> cargv;
  for (auto& a : fuse_argv) cargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargv.size()), cargv.data());

  fuse_session* se = fuse_session_new(&args, &hoard::fuse::HoardFs::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  if (se == nullptr) {
    log->critical("cannot create the FUSE session");
    return 1;
  }
  int rc = 1;
  // Under a supervisor the session is the descriptor it holds (libfuse takes
  // /dev/fd/N as "mounted already").
  const std::string target = serve_fd >= 0 ? "/dev/fd/" + std::to_string(serve_fd) : mountpoint;
  if (fuse_set_signal_handlers(se) == 0) {
    // SIGHUP from the supervisor: a restart in place (fuse/supervisor.h).
    // The loop ends as for SIGTERM, but the checkpoint session stays open
    // for the successor.
    if (serve_fd >= 0) {
      g_session = se;
      struct sigaction sa {};
      sa.sa_handler = [](int) {
        g_restarting = 1;
        if (fuse_session* s = g_session) fuse_session_exit(s);
      };
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGHUP, &sa, nullptr);
    }
    if (fuse_session_mount(se, target.c_str()) == 0) {
      if (hoard::Status s = fs.SetSession(se); !s.ok()) {
        log->critical("cannot serve {}: {}", mountpoint, s.ToString());
      } else {
        log->info("{} {} (coordinator {}, local store {}, up to {} open files{})",
                  takeover ? "took over the mount on" : "mounted on", mountpoint, coordinator,
                  node_store.empty() ? "none" : node_store, files,
                  serve_fd >= 0 ? ", generation " + std::to_string(generation) : "");
        if (serve_fd >= 0) {
          hoard::fuse::ServerState state{.pid = ::getpid(),
                                         .supervisor_pid = supervisor_pid,
                                         .generation = generation,
                                         .took_over = takeover,
                                         .version = std::string(hoard::ThisBuild().version),
                                         .commit = hoard::ThisBuild().CommitLabel()};
          if (hoard::Status s = hoard::fuse::WriteServerState(hoard::JoinPath(cache_dir, "server.json"), state);
              !s.ok()) {
            log->warn("{}", s.ToString());
          }
        }
        fuse_loop_config* config = fuse_loop_cfg_create();
        // One descriptor for every worker: a cloned one per thread would die
        // with this process, and the kernel fails the requests read through
        // a closed clone (ECONNABORTED) where those read through the
        // supervisor's descriptor wait for a successor (fuse/supervisor.h).
        fuse_loop_cfg_set_clone_fd(config, serve_fd >= 0 ? 0 : 1);
        fuse_loop_cfg_set_idle_threads(config, static_cast<unsigned>(threads));
        // Readers blocked on a peer or the origin hold a thread each; leave room
        // for local hits to keep flowing past them.
        fuse_loop_cfg_set_max_threads(config, static_cast<unsigned>(4 * threads));
        rc = fuse_session_loop_mt(se, config);
        fuse_loop_cfg_destroy(config);
      }
      // The watch thread may be about to notify the kernel through the
      // session: stop it before the session goes away.
      (void)fs.SetSession(nullptr);
      fs.Stop(/*end_session=*/g_restarting == 0);
      if (serve_fd < 0) {
        fuse_session_unmount(se);
        log->info("unmounted {}", mountpoint);
      }
    } else {
      log->critical("cannot mount on {}", mountpoint);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  fs.Stop();
  return rc == 0 ? 0 : 1;
}
