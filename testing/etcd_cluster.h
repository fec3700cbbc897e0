// File: testing/etcd_cluster.h
//
// EtcdCluster: real etcd members for tests (the Kv conformance suite, and
// tests of coordinators in high availability), started on free loopback
// ports, each with its own data directory under one temporary directory.
//
//   if (std::string why = EtcdCluster::SkipReason(); !why.empty()) GTEST_SKIP() << why;
//   auto cluster = EtcdCluster::Start({.members = 3});
//   ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
//   auto kv = EtcdKv::Open({.endpoints = (*cluster)->endpoints()});
//   (*cluster)->KillMember(0);  // SIGKILL; StopMember/ContMember: SIGSTOP/SIGCONT
//
// Start returns once every member answers a request (so the cluster has a
// leader). Members are signalled by the PIDs this object started, never by
// name, and die with the test process (PR_SET_PDEATHSIG) if it dies first;
// the destructor kills and reaps the rest and removes the directory.
// (PR_SET_PDEATHSIG follows the thread that started them: start a cluster
// from a thread that outlives it, as a test's own thread does.) Timing
// is tightened for tests (heartbeat 50 ms, election 500 ms): a leader is
// elected fast, and etcd's shortest lease is then 1 s.
//
// Each member's output goes to NAME.log in the directory; a member that
// exits before it answers makes Start fail with the end of its log.
//
// Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/testing.h"

namespace hoard {

class EtcdCluster {
 public:
  struct Options {
    int members = 1;
    std::string etcd = "/usr/bin/etcd";
    // For every member to answer.
    std::chrono::seconds start_timeout{30};
  };

  // "" if etcd can run here, else why not (the binary is missing).
  static std::string SkipReason(const std::string& etcd = "/usr/bin/etcd");

  static Result<std::unique_ptr<EtcdCluster>> Start(Options options);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // The members' client URLs, http://127.0.0.1:PORT, in member order.
  std::vector<std::string> endpoints() const;
  // The same, comma-separated (a --etcd flag's value).
  std::string endpoint_list() const;
  pid_t pid(int i) const { return members_[i].pid; }

  // SIGKILL to member i, then reaps it. OK if it is already dead.
  Status KillMember(int i);
  // SIGSTOP / SIGCONT to member i: a member that hangs, then comes back.
  Status StopMember(int i);
  Status ContMember(int i);

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;  // -1: not running
  };

  EtcdCluster(Options options, std::unique_ptr<testing::TempDir> dir)
      : options_(std::move(options)), dir_(std::move(dir)) {}
  // One attempt at starting every member on fresh ports.
  Status StartAll();
  Status Spawn(Member* m, const std::string& initial_cluster);
  // Waits until member i answers, or fails if it exits or the time is up.
  Status WaitReady(int i, std::chrono::steady_clock::time_point deadline);
  void KillAll();
  std::string LogTail(const Member& m) const;

  const Options options_;
  std::unique_ptr<testing::TempDir> dir_;
  std::vector<Member> members_;
  int attempts_ = 0;  // of StartAll, each in a directory of its own
};

}  // namespace hoard
