// File: fuse/test_mount.h
//
// TestMount runs a HoardFs on a real kernel mount inside a test process: the
// FUSE loop runs on its own threads while the test uses ordinary POSIX calls
// on the mount point. The destructor unmounts even when the test failed.
#pragma once

#include <sys/mount.h>

#include <string>
#include <thread>

#include "fuse/hoard_fs.h"

namespace hoard::fuse {

class TestMount {
 public:
  // Mounts `fs` (already started) on `mountpoint`; ok() says whether it worked.
  TestMount(HoardFs* fs, const std::string& mountpoint) : mountpoint_(mountpoint) {
    std::vector<std::string> argv = {"hoard-test", "-o", "fsname=hoard,subtype=hoard,default_permissions"};
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
    });
  }

  ~TestMount() {
    if (se_ == nullptr) return;
    fs_->SetSession(nullptr);
    fuse_session_exit(se_);
    // A lazy unmount ends the connection, which wakes the loop's threads.
    ::umount2(mountpoint_.c_str(), MNT_DETACH);
    loop_.join();
    fuse_session_unmount(se_);
    fuse_session_destroy(se_);
  }

  bool ok() const { return se_ != nullptr; }

 private:
  std::string mountpoint_;
  HoardFs* fs_ = nullptr;
  fuse_session* se_ = nullptr;
  std::thread loop_;
};

}  // namespace hoard::fuse
