// File: testing/test_mount.h
//
// TestMount runs a HoardFs on a real kernel mount inside a test process: the
// FUSE loop runs on its own threads while the test uses ordinary POSIX calls
// on the mount point. The destructor unmounts even when the test failed.
#pragma once

#include <limits.h>
#include <stdlib.h>
#include <sys/mount.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdio>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/mountinfo.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "fuse/hoard_fs.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {

// Options for a mount of `cluster` that reads node1's store (DIR/node1/store)
// and keeps its cache in DIR/`cache`, with short timeouts for tests.
inline HoardFs::Options TestMountOptions(hoard::testing::TestCluster& cluster,
                                         const std::string& cache = "mount-cache") {
  using namespace std::chrono_literals;
  return HoardFs::Options{.coordinator = cluster.endpoint(),
                          .local_store = JoinPath(cluster.dir(), "node1/store"),
                          .cache_dir = JoinPath(cluster.dir(), cache),
                          .poll_interval = 100ms,
                          .peer_timeout = 2000ms,
                          .peer_connect_timeout = 300ms,
                          .logger = cluster.logger(),
                          .context = &cluster.zmq(),
                          .open_origin = cluster.opener()};
}

class TestMount {
 public:
  // Mounts `fs` (already started) on `mountpoint`; ok() says whether it worked.
  // `extra_options` are added to the mount options (e.g. ",allow_other").
  TestMount(HoardFs* fs, const std::string& mountpoint, const std::string& extra_options = "")
      : mountpoint_(mountpoint) {
    std::vector<std::string> argv = {"hoard-test", "-o",
                                     "fsname=hoard,subtype=hoard,default_permissions" + extra_options};
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargv.size()), cargv.data());
    se_ = fuse_session_new(&args, &HoardFs::Ops(), sizeof(fuse_lowlevel_ops), fs);
    if (se_ == nullptr) return;
    if (fuse_session_mount(se_, mountpoint.c_str()) != 0) {
      fuse_session_destroy(se_);
      se_ = nullptr;
      return;
    }
    fs->SetSession(se_);
    fs_ = fs;
    loop_ = std::thread([this] {
      fuse_loop_config* cfg = fuse_loop_cfg_create();
      fuse_loop_cfg_set_clone_fd(cfg, 1);
      fuse_session_loop_mt(se_, cfg);
      fuse_loop_cfg_destroy(cfg);
      {
        MutexLock lock(&loop_mu_);
        loop_done_ = true;
      }
      loop_done_cv_.NotifyAll();
    });
  }

  ~TestMount() {
    if (se_ == nullptr) return;
    fs_->SetSession(nullptr);
    fuse_session_exit(se_);
    char resolved[PATH_MAX];
    Result<std::string> dev = ::realpath(mountpoint_.c_str(), resolved) != nullptr
                                  ? MountDevice(resolved)
                                  : Result<std::string>(Status::NotFound(mountpoint_));
    // A lazy unmount ends the connection once nothing uses the mount, which
    // wakes the loop's threads. A failed test may have left a file open on
    // it: then abort the connection, so the test fails instead of hanging.
    ::umount2(mountpoint_.c_str(), MNT_DETACH);
    auto abort_connection = [&] {
      if (!dev.ok()) return;
      const std::string connections = "/sys/fs/fuse/connections";
      (void)::mount("fusectl", connections.c_str(), "fusectl", 0, nullptr);  // EBUSY if already there
      const std::string abort = connections + "/" + dev->substr(dev->find(':') + 1) + "/abort";
      if (FILE* f = std::fopen(abort.c_str(), "w")) {
        std::fputs("1", f);
        std::fclose(f);
      }
    };
    bool loop_done = false;
    {
      // 2 s for the loop to end by itself before the connection is aborted.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      MutexLock lock(&loop_mu_);
      while (!loop_done_ && loop_done_cv_.WaitUntil(&loop_mu_, deadline)) {
      }
      loop_done = loop_done_;
    }
    if (!loop_done) abort_connection();
    loop_.join();
    fuse_session_unmount(se_);
    fuse_session_destroy(se_);
    // And once more, whatever happened: a connection that outlived the
    // session (a descriptor of the detached mount still open, in this
    // process or a child's) would make the process's exit hang, its own
    // exit flushing that descriptor to FUSE threads it no longer has.
    abort_connection();
  }

  bool ok() const { return se_ != nullptr; }

  // Starts `fs` and mounts it on `mountpoint` (created if missing); null if
  // either fails (the reason is logged by the test's assertions).
  static std::unique_ptr<TestMount> Start(HoardFs* fs, const std::string& mountpoint,
                                          const std::string& extra_options = "") {
    if (!fs->Start().ok() || !MakeDirs(mountpoint).ok()) return nullptr;
    auto m = std::make_unique<TestMount>(fs, mountpoint, extra_options);
    return m->ok() ? std::move(m) : nullptr;
  }

 private:
  std::string mountpoint_;
  HoardFs* fs_ = nullptr;
  fuse_session* se_ = nullptr;
  std::thread loop_;
  Mutex loop_mu_;
  CondVar loop_done_cv_;
  bool loop_done_ GUARDED_BY(loop_mu_) = false;  // fuse_session_loop_mt returned
};

// The start of a checkpoint test on a kernel mount: nodes node1..N of
// `cluster` (started) up, node1's mount on DIR/mnt, and checkpoints/job made.
struct CkptTestMount {
  std::unique_ptr<HoardFs> fs;
  std::unique_ptr<TestMount> mount;
  std::string mnt;  // "" if something failed (a test failure is recorded)

  // `extra_options`: mount options (e.g. ",allow_other").
  static CkptTestMount Start(hoard::testing::TestCluster& cluster, int nodes, const std::string& extra_options = "") {
    CkptTestMount m;
    for (int i = 1; i <= nodes; ++i) {
      Status s = cluster.StartAgent("node" + std::to_string(i)).status();
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return m;
    }
    const bool members = hoard::testing::Eventually(
        [&] { return cluster.coordinator().GetClusterMap().nodes.size() == size_t(nodes); });
    EXPECT_TRUE(members);
    HoardFs::Options options = TestMountOptions(cluster);
    options.node_name = "node1";
    const std::string mnt = JoinPath(cluster.dir(), "mnt");
    options.mountpoint = mnt;
    m.fs = std::make_unique<HoardFs>(options);
    m.mount = TestMount::Start(m.fs.get(), mnt, extra_options);
    EXPECT_NE(m.mount, nullptr) << "cannot start the mount, or mount FUSE here";
    if (!members || m.mount == nullptr) return m;
    const bool made = hoard::testing::Eventually(
        [&] { return ::mkdir(JoinPath(mnt, "checkpoints/job").c_str(), 0755) == 0; });
    EXPECT_TRUE(made);
    if (made) m.mnt = mnt;
    return m;
  }
};

}  // namespace hoard::fuse
