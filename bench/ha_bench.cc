// hoard-ha-bench: what keeping the coordinator's state in etcd costs
// (issue 32), against the write-ahead log in the same run.
//
// Real code, no network daemons: a Coordinator opened twice, once on its
// default journals (files in a temp directory on this disk, each record
// fsynced) and once on EtcdJournals over a real etcd cluster of --members
// members on loopback (testing/etcd_cluster.h; their data directories on the
// same disk), every write fenced with a term as the leader's are. Measured
// per backend:
//   - a checkpoint commit: CkptCreate + CkptCommit of one small file, one
//     after another (--commits of them): the latency of each, median and p99;
//   - a heartbeat of a registered node (--heartbeats, after --nodes
//     registrations, each of which is a journal record);
//   - a save of --files small files into one checkpoint directory by
//     --writers threads at once, as a job saving a sharded checkpoint does
//     through its mounts: files per second.
// Prints a table and one JSON line. Needs /usr/bin/etcd (scripts/deps).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "consensus/etcd_journal.h"
#include "consensus/etcd_kv.h"
#include "coordinator/coordinator.h"
#include "testing/etcd_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Latencies {
  std::vector<double> ms;
  double Quantile(double q) {
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * double(ms.size())))];
  }
};

// One small file saved: its create, then its commit (what a mount sends for
// a file written and closed). `writer` names the node that holds it.
hoard::Status Save(hoard::Coordinator& c, const std::string& path, const std::string& writer) {
  HOARD_ASSIGN_OR_RETURN(hoard::proto::CkptEntry e, c.checkpoints().Create({.path = path}));
  return c.checkpoints()
      .Commit({.id = e.id, .gen = 1, .size = 4096, .mtime_ns = 1, .chunk_size = 4 << 20, .checksums = {42},
               .writer = writer, .level = uint8_t(hoard::proto::CkptLevel::kL)})
      .status();
}

struct Figures {
  double commit_p50 = 0, commit_p99 = 0;
  double register_p50 = 0;
  double heartbeat_p50 = 0, heartbeat_p99 = 0;
  double save_files_per_s = 0;
};

hoard::Result<Figures> Measure(hoard::Coordinator& c, int commits, int nodes, int heartbeats, int files,
                               int writers) {
  Figures f;
  // As a job saves: files in a checkpoint directory of the job's.
  HOARD_RETURN_IF_ERROR(c.checkpoints().Create({.path = "bench", .is_dir = true}).status());
  HOARD_RETURN_IF_ERROR(c.checkpoints().Create({.path = "bench/step1", .is_dir = true}).status());
  Latencies commit;
  for (int i = 0; i < commits; ++i) {
    const auto t = Clock::now();
    HOARD_RETURN_IF_ERROR(Save(c, "bench/step1/c" + std::to_string(i), "node0"));
    commit.ms.push_back(Ms(Clock::now() - t));
  }
  f.commit_p50 = commit.Quantile(0.5);
  f.commit_p99 = commit.Quantile(0.99);

  Latencies reg;
  for (int i = 0; i < nodes; ++i) {
    const auto t = Clock::now();
    HOARD_RETURN_IF_ERROR(c.RegisterNode({.name = "node" + std::to_string(i),
                                          .endpoint = "tcp://127.0.0.1:" + std::to_string(20000 + i),
                                          .capacity_bytes = 1ull << 40})
                              .status());
    reg.ms.push_back(Ms(Clock::now() - t));
  }
  f.register_p50 = reg.Quantile(0.5);
  Latencies hb;
  for (int i = 0; i < heartbeats; ++i) {
    const auto t = Clock::now();
    HOARD_RETURN_IF_ERROR(c.Heartbeat({.name = "node" + std::to_string(i % nodes), .capacity_bytes = 1ull << 40})
                              .status());
    hb.ms.push_back(Ms(Clock::now() - t));
  }
  f.heartbeat_p50 = hb.Quantile(0.5);
  f.heartbeat_p99 = hb.Quantile(0.99);

  HOARD_RETURN_IF_ERROR(c.checkpoints().Create({.path = "save", .is_dir = true}).status());
  HOARD_RETURN_IF_ERROR(c.checkpoints().Create({.path = "save/step1", .is_dir = true}).status());
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  const auto t = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (int i = next++; i < files && !failed; i = next++) {
        if (!Save(c, "save/step1/f" + std::to_string(i), "node" + std::to_string(w % nodes)).ok()) failed = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  if (failed) return hoard::Status::Internal("a save of the many-files run failed");
  f.save_files_per_s = files / std::chrono::duration<double>(Clock::now() - t).count();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-ha-bench: the coordinator's state in etcd against its write-ahead log"};
  int members = 3, commits = 500, nodes = 100, heartbeats = 5000, files = 10000, writers = 8;
  app.add_option("--members", members, "etcd members")->capture_default_str()->check(CLI::Range(1, 7));
  app.add_option("--commits", commits, "Checkpoint commits timed one by one")->capture_default_str();
  app.add_option("--nodes", nodes, "Nodes registered (each a journal record)")->capture_default_str();
  app.add_option("--heartbeats", heartbeats, "Heartbeats timed")->capture_default_str();
  app.add_option("--files", files, "Files of the many-files save")->capture_default_str();
  app.add_option("--writers", writers, "Threads saving them at once")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto fail = [](const char* what, const hoard::Status& s) {
    std::fprintf(stderr, "hoard-ha-bench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };
  if (std::string why = hoard::EtcdCluster::SkipReason(); !why.empty()) {
    return fail("etcd", hoard::Status::Unavailable(why));
  }
  const std::string dir = "/var/tmp/hoard-ha-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  auto log = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  nlohmann::json out = {{"members", members}, {"commits", commits}, {"heartbeats", heartbeats},
                        {"files", files},     {"writers", writers}};

  // The write-ahead log: files on this disk.
  Figures wal;
  {
    auto c = hoard::Coordinator::Open({.data_dir = dir + "/wal", .logger = log});
    if (!c.ok()) return fail("coordinator on its log", c.status());
    auto f = Measure(**c, commits, nodes, heartbeats, files, writers);
    if (!f.ok()) return fail("log", f.status());
    wal = *f;
  }
  // etcd: both journals fenced with a term, as a leader's.
  Figures etcd;
  {
    auto cluster = hoard::EtcdCluster::Start({.members = members});
    if (!cluster.ok()) return fail("etcd cluster", cluster.status());
    auto kv = hoard::EtcdKv::Open({.endpoints = (*cluster)->endpoints()});
    if (!kv.ok()) return fail("etcd client", kv.status());
    hoard::LeaderElection election(kv->get(), {.key = "/bench/leader", .value = "bench", .logger = log});
    auto fence = election.Campaign();
    if (!fence.ok()) return fail("election", fence.status());
    auto journal = [&](const char* what) {
      auto j = std::make_shared<hoard::EtcdJournal>(kv->get(),
                                                    hoard::EtcdJournal::Options{.prefix = std::string("/bench/") + what + "/"});
      j->SetFence(*fence);
      return j;
    };
    auto c = hoard::Coordinator::Open({.data_dir = dir + "/etcd",
                                       .logger = log,
                                       .state_journal = journal("state"),
                                       .ckpt_journal = journal("ckpt")});
    if (!c.ok()) return fail("coordinator on etcd", c.status());
    auto f = Measure(**c, commits, nodes, heartbeats, files, writers);
    if (!f.ok()) return fail("etcd", f.status());
    etcd = *f;
    c->reset();
    election.Stop();
  }

  std::printf("%-44s %12s %12s %8s\n", "measure", "log (WAL)", "etcd", "ratio");
  auto row = [](const char* what, double a, double b) {
    std::printf("%-44s %12.3f %12.3f %7.2fx\n", what, a, b, a > 0 ? b / a : 0);
  };
  row("checkpoint create+commit, median (ms)", wal.commit_p50, etcd.commit_p50);
  row("checkpoint create+commit, p99 (ms)", wal.commit_p99, etcd.commit_p99);
  row("node registration, median (ms)", wal.register_p50, etcd.register_p50);
  row("heartbeat, median (us)", wal.heartbeat_p50 * 1000, etcd.heartbeat_p50 * 1000);
  row("heartbeat, p99 (us)", wal.heartbeat_p99 * 1000, etcd.heartbeat_p99 * 1000);
  std::printf("%-44s %12.0f %12.0f %7.2fx\n", "save of many small files (files/s)", wal.save_files_per_s,
              etcd.save_files_per_s, wal.save_files_per_s > 0 ? etcd.save_files_per_s / wal.save_files_per_s : 0);
  auto figures = [](const Figures& f) {
    return nlohmann::json{{"commit_p50_ms", f.commit_p50},       {"commit_p99_ms", f.commit_p99},
                          {"register_p50_ms", f.register_p50},   {"heartbeat_p50_ms", f.heartbeat_p50},
                          {"heartbeat_p99_ms", f.heartbeat_p99}, {"save_files_per_s", f.save_files_per_s}};
  };
  out["wal"] = figures(wal);
  out["etcd"] = figures(etcd);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
