// File: testing/nfs_test_server.h
//
// NfsTestServer: a real NFSv3 server (nfs-ganesha) for C++ tests, started and
// stopped through tests/lib/nfs_server.sh so that C++, Python and benchmark
// tests share one way of running it. Header-only: a test binary includes
// "testing/nfs_test_server.h" and defines HOARD_NFS_SERVER_SH to the
// script's path (see origin/CMakeLists.txt).
//
//   NfsTestServer server;
//   Status s = server.Start(work_dir, export_dir);    // port picked from the pid
//   if (!s.ok()) FAIL() << s.ToString();
//   auto origin = OpenOrigin(server.url());           // nfs://127.0.0.1:P/abs/export?mountport=P+1
//   ...
//   server.Stop();                                    // also done by the destructor
//
// Start tries a few ports, derived from the process id and kept below the
// kernel's ephemeral range (32768+), so parallel test processes (ctest -j)
// rarely collide and retry past it when they do. Pause/Resume freeze the
// server (SIGSTOP/SIGCONT to the ganesha process this object started, and no
// other) to test timeouts.
//
// Needs root and the Debian packages listed in nfs_server.sh; ShouldSkip()
// says why a test cannot run here (not root), so fixtures can GTEST_SKIP.
//
// Thread-safety: one thread at a time.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/status.h"

#ifndef HOARD_NFS_SERVER_SH
#error "define HOARD_NFS_SERVER_SH to the path of tests/lib/nfs_server.sh"
#endif

namespace hoard {

class NfsTestServer {
 public:
  NfsTestServer() = default;
  ~NfsTestServer() { (void)Stop(); }
  NfsTestServer(const NfsTestServer&) = delete;
  NfsTestServer& operator=(const NfsTestServer&) = delete;

  // Empty if tests with a real server can run here, else the reason.
  static std::string ShouldSkip() {
    if (::geteuid() != 0) return "NFS server tests need root (mount namespace, ganesha)";
    return "";
  }

  // Starts a server exporting `export_dir` (read-only; read-write with env
  // "NFS_SERVER_ACCESS=RW"), keeping its config,
  // log and pid files in `work_dir`. `port` 0 picks one (see above).
  // `env` is put before the command, e.g. "NFS_SERVER_PORTMAP=1".
  Status Start(const std::string& work_dir, const std::string& export_dir, int port = 0,
               const std::string& env = "") {
    work_dir_ = work_dir;
    export_dir_ = export_dir;
    env_ = env;
    const int tries = port == 0 ? 5 : 1;
    if (port == 0) port = 10000 + 2 * static_cast<int>((::getpid() * 7919L) % 11000);
    Status last;
    for (int i = 0; i < tries; ++i, port += 2) {
      last = StartAt(port);
      if (last.ok()) return last;
    }
    return last;
  }

  // Starts again on the same port, after Stop (a server coming back).
  Status Restart() { return StartAt(port_); }

  // Stops the server; OK if it is not running.
  Status Stop() {
    if (work_dir_.empty()) return Status::Ok();
    std::string out;
    int rc = Run(Command("stop " + Quote(work_dir_)), &out);
    if (rc != 0) return Status::Internal("nfs_server.sh stop failed: " + out);
    return Status::Ok();
  }

  // Freezes / thaws the server process. Pause returns once every thread of
  // the server is stopped: kill() returns before that, and a thread still
  // running could answer one more request.
  Status Pause() {
    Status s = Signal(SIGSTOP);
    if (!s.ok()) return s;
    for (int i = 0; i < 500; ++i) {
      if (AllThreadsStopped()) return Status::Ok();
      ::usleep(10'000);
    }
    return Status::Internal("ganesha did not stop within 5 s");
  }
  Status Resume() { return Signal(SIGCONT); }

  const std::string& url() const { return url_; }
  int port() const { return port_; }
  int mount_port() const { return port_ + 1; }
  const std::string& work_dir() const { return work_dir_; }

 private:
  static std::string Quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
      if (c == '\'') {
        q += "'\\''";
      } else {
        q += c;
      }
    }
    return q + "'";
  }

  std::string Command(const std::string& args) const {
    return env_ + " /bin/bash " + Quote(HOARD_NFS_SERVER_SH) + " " + args + " 2>&1";
  }

  // Runs `cmd`, returns its exit status and output (trailing newline cut).
  static int Run(const std::string& cmd, std::string* out) {
    out->clear();
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return -1;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
    int status = ::pclose(p);
    while (!out->empty() && out->back() == '\n') out->pop_back();
    return status;
  }

  Status StartAt(int port) {
    std::string out;
    int rc = Run(Command("start " + Quote(work_dir_) + " " + Quote(export_dir_) + " " + std::to_string(port)), &out);
    if (rc != 0) return Status::Unavailable("nfs_server.sh start failed: " + out);
    // The URL is the last line; anything before it is noise.
    size_t nl = out.rfind('\n');
    url_ = nl == std::string::npos ? out : out.substr(nl + 1);
    port_ = port;
    return Status::Ok();
  }

  pid_t ServerPid() const {
    std::ifstream in(work_dir_ + "/ganesha.pid");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 1) return 0;
    return pid;
  }

  Status Signal(int sig) {
    pid_t pid = ServerPid();
    if (pid == 0) return Status::NotFound("no ganesha.pid in " + work_dir_);
    if (::kill(pid, sig) != 0) return Status::FromErrno(errno, "kill ganesha");
    return Status::Ok();
  }

  // True when every task of the server is in state T (stopped).
  bool AllThreadsStopped() const {
    const std::string task_dir = "/proc/" + std::to_string(ServerPid()) + "/task";
    DIR* dir = ::opendir(task_dir.c_str());
    if (dir == nullptr) return false;
    bool all = true;
    while (struct dirent* de = ::readdir(dir)) {
      if (de->d_name[0] == '.') continue;
      std::ifstream stat(task_dir + "/" + de->d_name + "/stat");
      std::string line;
      std::getline(stat, line);
      size_t paren = line.rfind(')');
      if (paren == std::string::npos || paren + 2 >= line.size()) continue;  // the thread exited
      char state = line[paren + 2];
      if (state != 'T' && state != 't') all = false;
    }
    ::closedir(dir);
    return all;
  }

  std::string work_dir_;
  std::string export_dir_;
  std::string env_;
  std::string url_;
  int port_ = 0;
};

}  // namespace hoard
