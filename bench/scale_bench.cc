// hoard-scale-bench: the control plane at cluster scale (issue 4, item 7).
//
// Simulated nodes, real code: builds the manifest of a --files dataset
// (ImageNet-like: one chunk per file, 1,000 files per directory), places it
// on --nodes members, and measures
//   - memory per file: the manifest's bytes, plus the per-node assignment
//     (owned chunk ordinals) the coordinator keeps for progress;
//   - the time to compute a placement: every chunk's owners (AssignAll), and
//     the cost of one Owners() call;
//   - chunks moved by one join and one leave, against the ideal 1/N;
//   - heartbeat load: a real coordinator service (in this process, state in
//     a temp directory, RPC over loopback ZeroMQ) with --nodes registered
//     members, fed heartbeats by 8 client threads as fast as it answers;
//     compared with what --nodes nodes send at 1/s.
// Prints a table and one JSON line.
#include <unistd.h>

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

#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "proto/rpc_client.h"
#include "striping/assignment.h"
#include "striping/manifest.h"
#include "striping/placement.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Resident set size of this process, bytes.
uint64_t Rss() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::vector<hoard::PlacementMember> Members(int n, int skip = -1) {
  std::vector<hoard::PlacementMember> m;
  for (int i = 0; i < n; ++i) {
    if (i != skip) m.push_back({"gpu" + std::to_string(i), 1.0});
  }
  return m;
}

// Fraction of sampled chunks whose owner set differs between a and b.
double MovedFraction(const hoard::Manifest& m, const hoard::Placement& a, const hoard::Placement& b, int replicas,
                     uint64_t sample) {
  uint64_t moved = 0, seen = 0;
  std::vector<uint32_t> oa, ob;
  const uint64_t step = std::max<uint64_t>(1, m.entry_count() / sample);
  for (uint64_t e = 0; e < m.entry_count(); e += step) {
    const hoard::EntryRecord& r = m.entry(static_cast<uint32_t>(e));
    if (!r.is_file() || r.size == 0) continue;
    const uint64_t h = m.chunk_key(static_cast<uint32_t>(e), 0).PlacementHash();
    a.Owners(h, replicas, &oa);
    b.Owners(h, replicas, &ob);
    std::vector<std::string> na, nb;
    for (uint32_t o : oa) na.push_back(a.members()[o].name);
    for (uint32_t o : ob) nb.push_back(b.members()[o].name);
    std::sort(na.begin(), na.end());
    std::sort(nb.begin(), nb.end());
    moved += na != nb;
    ++seen;
  }
  return seen ? double(moved) / double(seen) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-scale-bench: the coordinator and placement at cluster scale"};
  int nodes = 1000, replicas = 1, heartbeat_seconds = 5;
  uint64_t files = 10'000'000, sample = 1'000'000;
  app.add_option("--nodes", nodes, "Simulated nodes")->capture_default_str()->check(CLI::Range(2, 100000));
  app.add_option("--files", files, "Files in the dataset (one chunk each)")->capture_default_str();
  app.add_option("--replicas", replicas, "Owners per chunk")->capture_default_str()->check(CLI::Range(1, 8));
  app.add_option("--sample", sample, "Chunks sampled for the join/leave movement")->capture_default_str();
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "How long to feed heartbeats")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  nlohmann::json out = {{"nodes", nodes}, {"files", files}, {"replicas", replicas}};

  // 1. The manifest.
  auto t = Clock::now();
  std::string bytes;
  {
    hoard::ManifestBuilder b(42, 1, 4 << 20);
    b.SetRoot(040755, 0, 0, 0);
    const uint64_t dirs = (files + 999) / 1000;
    for (uint64_t d = 0; d < dirs; ++d) {
      char dir[32];
      std::snprintf(dir, sizeof dir, "n%08llu", static_cast<unsigned long long>(d));
      b.Add(dir, 040755, 0, 0, 0, 0);
      for (uint64_t f = d * 1000; f < std::min(files, (d + 1) * 1000); ++f) {
        char name[64];
        std::snprintf(name, sizeof name, "%s/img_%010llu.JPEG", dir, static_cast<unsigned long long>(f));
        b.Add(name, 0100644, 0, 0, 100 * 1024 + f % 30000, 1'700'000'000'000'000'000);
      }
    }
    hoard::Result<std::string> r = b.Finish(0);
    if (!r.ok()) {
      std::fprintf(stderr, "manifest: %s\n", r.status().ToString().c_str());
      return 1;
    }
    bytes = std::move(*r);
  }
  out["manifest_build_s"] = Seconds(t);
  out["manifest_bytes_per_file"] = double(bytes.size()) / double(files);
  hoard::Result<hoard::Manifest> parsed = hoard::Manifest::Parse(std::move(bytes));
  if (!parsed.ok()) {
    std::fprintf(stderr, "manifest: %s\n", parsed.status().ToString().c_str());
    return 1;
  }
  const hoard::Manifest& m = *parsed;

  // 2. Placement: one Owners() call, then every chunk.
  hoard::Placement p(Members(nodes));
  std::vector<uint32_t> owners;
  t = Clock::now();
  const int calls = 200'000;
  uint64_t sink = 0;
  for (int i = 0; i < calls; ++i) {
    p.Owners(hoard::Mix64(i, 7), replicas, &owners);
    sink += owners[0];
  }
  out["owners_call_us"] = Seconds(t) / calls * 1e6;
  t = Clock::now();
  std::vector<hoard::MemberShare> shares = hoard::AssignAll(m, p, replicas);
  out["assign_all_s"] = Seconds(t);
  uint64_t most = 0, least = UINT64_MAX, total = 0;
  for (const auto& s : shares) {
    most = std::max<uint64_t>(most, s.ordinals.size());
    least = std::min<uint64_t>(least, s.ordinals.size());
    total += s.ordinals.size();
  }
  out["share_max_over_mean"] = double(most) * nodes / double(total);
  out["share_min_over_mean"] = double(least) * nodes / double(total);
  // What the coordinator keeps per dataset: the manifest, and each member's
  // list of owned chunk ordinals (for progress), computed once per epoch.
  uint64_t assignment_bytes = 0;
  for (const auto& s : shares) assignment_bytes += s.ordinals.capacity() * sizeof(uint64_t);
  out["coordinator_bytes_per_file"] = double(m.bytes().size() + assignment_bytes) / double(files);
  out["rss_mib"] = double(Rss()) / (1 << 20);

  // 3. One join, one leave.
  hoard::Placement joined(Members(nodes + 1));
  hoard::Placement left(Members(nodes, nodes / 2));
  out["join_moved"] = MovedFraction(m, p, joined, replicas, sample);
  out["join_ideal"] = double(replicas) / double(nodes + 1);
  out["leave_moved"] = MovedFraction(m, p, left, replicas, sample);
  out["leave_ideal"] = double(replicas) / double(nodes);

  // 4. Heartbeats into a real coordinator.
  const std::string dir = "/tmp/hoard-scale-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  {
    auto log = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
    auto coord = hoard::Coordinator::Open({.data_dir = dir, .down_after = std::chrono::hours(1), .logger = log});
    if (!coord.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", coord.status().ToString().c_str());
      return 1;
    }
    t = Clock::now();
    for (int i = 0; i < nodes; ++i) {
      (void)(*coord)->RegisterNode(
          {.name = "gpu" + std::to_string(i), .endpoint = "tcp://10.0.0.1:7101", .capacity_bytes = 1ull << 40});
    }
    out["register_all_s"] = Seconds(t);
    // Through the real service on loopback: kSenders client threads, each a DEALER
    // socket, sending the heartbeats of their quarter of the nodes in a loop.
    zmq::context_t zmq_ctx;
    hoard::CoordinatorService service(coord->get(), {.endpoint = "tcp://127.0.0.1:*",
                                                    .logger = log,
                                                    .context = &zmq_ctx});
    if (hoard::Status s = service.Start(); !s.ok()) {
      std::fprintf(stderr, "service: %s\n", s.ToString().c_str());
      return 1;
    }
    constexpr int kSenders = 8;
    std::atomic<uint64_t> beats{0}, failures{0};
    const uint64_t epoch = (*coord)->epoch();
    t = Clock::now();
    std::vector<std::thread> senders;
    for (int c = 0; c < kSenders; ++c) {
      senders.emplace_back([&, c] {
        hoard::proto::RpcClient client(zmq_ctx, service.endpoint());
        while (Seconds(t) < heartbeat_seconds) {
          for (int i = c; i < nodes; i += kSenders) {
            hoard::proto::Heartbeat hb{.name = "gpu" + std::to_string(i), .epoch = epoch,
                                       .capacity_bytes = 1ull << 40, .used_bytes = 1ull << 39, .chunks = 1000};
            auto r = client.Call(hb, std::chrono::seconds(5));
            if (r.ok() && r->registered) beats.fetch_add(1);
            else failures.fetch_add(1);
          }
        }
      });
    }
    for (auto& th : senders) th.join();
    out["heartbeats_per_s"] = double(beats.load()) / Seconds(t);
    out["heartbeat_failures"] = failures.load();
    out["heartbeats_needed_per_s"] = nodes;  // every node once a second
    service.Stop();
  }
  std::filesystem::remove_all(dir);
  out["sink"] = sink;

  std::printf("hoard-scale-bench: %d nodes, %llu files, replicas %d\n", nodes,
              static_cast<unsigned long long>(files), replicas);
  std::printf("  manifest: built in %.1f s, %.1f bytes/file; coordinator %.1f bytes/file (manifest + assignment)\n",
              out["manifest_build_s"].get<double>(), out["manifest_bytes_per_file"].get<double>(),
              out["coordinator_bytes_per_file"].get<double>());
  std::printf("  placement: Owners() %.2f us; every chunk's owners (AssignAll) %.1f s; shares %.3f..%.3f of mean\n",
              out["owners_call_us"].get<double>(), out["assign_all_s"].get<double>(),
              out["share_min_over_mean"].get<double>(), out["share_max_over_mean"].get<double>());
  std::printf("  join: %.4f%% of chunks moved (ideal %.4f%%); leave: %.4f%% (ideal %.4f%%)\n",
              100 * out["join_moved"].get<double>(), 100 * out["join_ideal"].get<double>(),
              100 * out["leave_moved"].get<double>(), 100 * out["leave_ideal"].get<double>());
  std::printf("  heartbeats: %.0f/s handled (needed %d/s at 1 s intervals): %.1fx headroom; %d registrations in %.2f s\n",
              out["heartbeats_per_s"].get<double>(), nodes, out["heartbeats_per_s"].get<double>() / nodes, nodes,
              out["register_all_s"].get<double>());
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
