// hoard-scale-bench: the control plane at cluster scale (issue 4, item 7).
//
// Simulated nodes, real code: builds the manifest of a --files dataset
// (ImageNet-like: one chunk per file, 1,000 files per directory), places it
// on --nodes members, and measures
//   - the time to compute a placement where it is computed: a node's own
//     share (OwnedChunks over every chunk: what each node agent does after a
//     membership change), one Owners() call (what a mount does per chunk it
//     reads remotely), and, for reference, every chunk's owners (AssignAll),
//     which no daemon computes;
//   - chunks moved by one join and one leave, against the ideal K/N: exactly
//     (the newcomer's share over all chunks) and by comparing owner sets on a
//     sample;
//   - the coordinator: memory per file (the manifest plus every node's report
//     of the chunks it holds) and the time to turn --nodes reports into
//     progress, on a real coordinator service (state in a temp directory,
//     RPC over loopback ZeroMQ) with --nodes registered members;
//   - heartbeat load: that service fed heartbeats by 8 client threads as fast
//     as it answers, compared with what --nodes nodes send at 1/s.
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
#include "proto/ordinals.h"
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

// The tree of an ImageNet-like dataset, generated: `files` files of about
// 100 KiB (one chunk each), 1,000 per directory. Only Walk and Stat of the
// root are needed: the coordinator walks it once at `dataset add`.
class SyntheticOrigin : public hoard::Origin {
 public:
  explicit SyntheticOrigin(uint64_t files) : files_(files) {}
  const std::string& source() const override { return source_; }
  hoard::Status Walk(const std::function<hoard::Status(const hoard::OriginEntry&)>& visit) override {
    const uint64_t dirs = (files_ + 999) / 1000;
    hoard::OriginEntry e;
    for (uint64_t d = 0; d < dirs; ++d) {
      char dir[32];
      std::snprintf(dir, sizeof dir, "n%08llu", static_cast<unsigned long long>(d));
      e = {.path = dir, .type = hoard::EntryType::kDir, .mode = 040755};
      HOARD_RETURN_IF_ERROR(visit(e));
      for (uint64_t f = d * 1000; f < std::min(files_, (d + 1) * 1000); ++f) {
        char name[64];
        std::snprintf(name, sizeof name, "%s/img_%010llu.JPEG", dir, static_cast<unsigned long long>(f));
        e = {.path = name, .type = hoard::EntryType::kFile, .mode = 0100644, .size = 100 * 1024 + f % 30000,
             .mtime_ns = 1'700'000'000'000'000'000};
        HOARD_RETURN_IF_ERROR(visit(e));
      }
    }
    return hoard::Status::Ok();
  }
  hoard::Result<hoard::OriginEntry> Stat(std::string_view path) override {
    if (!path.empty()) return hoard::Status::NotFound("synthetic origin: only the root");
    return hoard::OriginEntry{.type = hoard::EntryType::kDir, .mode = 040755};
  }
  hoard::Result<std::unique_ptr<hoard::OriginFile>> Open(std::string_view) override {
    return hoard::Status::NotFound("synthetic origin has no bytes");
  }

 private:
  uint64_t files_;
  std::string source_ = "synthetic://imagenet";
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-scale-bench: the coordinator and placement at cluster scale"};
  int nodes = 1000, replicas = 1, heartbeat_seconds = 5;
  uint64_t files = 10'000'000, sample = 1'000'000;
  app.add_option("--nodes", nodes, "Simulated nodes")->capture_default_str()->check(CLI::Range(2, 100000));
  app.add_option("--files", files, "Files in the dataset (one chunk each)")->capture_default_str();
  app.add_option("--replicas", replicas, "Owners per chunk")->capture_default_str()->check(CLI::Range(1, 8));
  app.add_option("--sample", sample, "Chunks sampled for the join/leave owner-set comparison")
      ->capture_default_str();
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "How long to feed heartbeats")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  nlohmann::json out = {{"nodes", nodes}, {"files", files}, {"replicas", replicas}};
  auto fail = [](const char* what, const hoard::Status& s) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    return 1;
  };

  const std::string dir = "/tmp/hoard-scale-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  auto log = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  auto coord = hoard::Coordinator::Open(
      {.data_dir = dir, .down_after = std::chrono::hours(1), .logger = log,
       .open_origin = [files](const std::string&) -> hoard::Result<std::unique_ptr<hoard::Origin>> {
         return std::unique_ptr<hoard::Origin>(new SyntheticOrigin(files));
       }});
  if (!coord.ok()) return fail("coordinator", coord.status());
  zmq::context_t zmq_ctx;
  hoard::CoordinatorService service(coord->get(), {.endpoint = "tcp://127.0.0.1:*", .logger = log,
                                                  .context = &zmq_ctx});
  if (hoard::Status s = service.Start(); !s.ok()) return fail("service", s);
  hoard::proto::RpcClient client(zmq_ctx, service.endpoint());

  // 1. Members, and the dataset: `dataset add` walks the tree and builds the
  // manifest, which every party then fetches.
  auto t = Clock::now();
  for (int i = 0; i < nodes; ++i) {
    auto r = client.Call(hoard::proto::RegisterNode{.name = "gpu" + std::to_string(i),
                                                    .endpoint = "tcp://10.0.0.1:7101",
                                                    .capacity_bytes = 1ull << 40},
                         std::chrono::seconds(10));
    if (!r.ok()) return fail("register", r.status());
  }
  out["register_all_s"] = Seconds(t);
  t = Clock::now();
  auto added = client.Call(hoard::proto::DatasetAdd{.name = "imagenet", .source = "synthetic://imagenet",
                                                    .replicas = static_cast<uint32_t>(replicas)},
                           std::chrono::hours(1));
  if (!added.ok()) return fail("dataset add", added.status());
  out["dataset_add_s"] = Seconds(t);
  const hoard::proto::DatasetMeta meta = added->meta;
  std::string bytes;
  while (bytes.size() < meta.manifest_bytes) {
    std::string part;
    auto r = (*coord)->GetManifest({.name = "imagenet", .version = meta.version, .offset = bytes.size()}, &part);
    if (!r.ok()) return fail("manifest", r.status());
    bytes += part;
  }
  out["manifest_bytes_per_file"] = double(bytes.size()) / double(files);
  hoard::Result<hoard::Manifest> parsed = hoard::Manifest::Parse(std::move(bytes));
  if (!parsed.ok()) return fail("manifest", parsed.status());
  const hoard::Manifest& m = *parsed;
  const hoard::proto::ClusterMap map = (*coord)->GetClusterMap();
  std::vector<hoard::PlacementMember> members;
  for (const auto& n : map.nodes) members.push_back({n.name, hoard::proto::PlacementWeight(n)});

  // 2. Placement where it is computed: a node's share, a mount's lookup.
  hoard::Placement p(members);
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
  const uint64_t own_share = hoard::OwnedChunks(m, p, replicas, static_cast<uint32_t>(nodes / 3)).size();
  out["node_share_s"] = Seconds(t);
  t = Clock::now();
  std::vector<hoard::MemberShare> shares = hoard::AssignAll(m, p, replicas);
  out["assign_all_s"] = Seconds(t);
  if (shares[nodes / 3].ordinals.size() != own_share) {
    std::fprintf(stderr, "OwnedChunks and AssignAll disagree\n");
    return 1;
  }
  uint64_t most = 0, least = UINT64_MAX, total = 0;
  for (const auto& s : shares) {
    most = std::max<uint64_t>(most, s.ordinals.size());
    least = std::min<uint64_t>(least, s.ordinals.size());
    total += s.ordinals.size();
  }
  out["share_max_over_mean"] = double(most) * nodes / double(total);
  out["share_min_over_mean"] = double(least) * nodes / double(total);

  // 3. One join, one leave. Rendezvous hashing moves exactly the chunks the
  // newcomer wins (or the leaver held): counted over every chunk, and checked
  // by comparing owner sets on a sample.
  {
    std::vector<hoard::PlacementMember> plus = members, minus = members;
    plus.push_back({"gpu-new", members[0].weight});
    minus.erase(minus.begin() + nodes / 2);
    hoard::Placement joined(plus), left(minus);
    t = Clock::now();
    const uint64_t won = hoard::OwnedChunks(m, joined, replicas, static_cast<uint32_t>(nodes)).size();
    out["joiner_share_s"] = Seconds(t);
    out["join_moved_exact"] = double(won) / double(m.total_chunks());
    out["join_moved"] = MovedFraction(m, p, joined, replicas, sample);
    out["join_ideal"] = double(replicas) / double(nodes + 1);
    out["leave_moved_exact"] = double(shares[nodes / 2].ordinals.size()) / double(m.total_chunks());
    out["leave_moved"] = MovedFraction(m, p, left, replicas, sample);
    out["leave_ideal"] = double(replicas) / double(nodes);
  }

  // 4. Progress: every node reports the chunks it holds (all of its share),
  // through the service; the coordinator adds the reports up.
  uint64_t report_bytes = 0;
  const uint64_t rss_before = Rss();
  t = Clock::now();
  for (int i = 0; i < nodes; ++i) {
    hoard::proto::OrdinalEncoder enc;
    for (uint64_t o : shares[i].ordinals) enc.Add(o);
    hoard::proto::Heartbeat hb{.name = members[i].name, .epoch = map.epoch, .capacity_bytes = 1ull << 40};
    hb.datasets.push_back({.uid = meta.uid, .version = meta.version, .placement_epoch = map.placement_epoch,
                           .owned_chunks = enc.count(), .owned_bytes = shares[i].bytes,
                           .cached_chunks = enc.count(), .cached_bytes = shares[i].bytes,
                           .cached_ordinals = enc.Finish()});
    hb.datasets_included = true;
    report_bytes += hb.datasets[0].cached_ordinals.size();
    auto r = client.Call(hb, std::chrono::seconds(10));
    if (!r.ok()) return fail("heartbeat with report", r.status());
  }
  out["reports_in_s"] = Seconds(t);
  out["report_bytes_per_node"] = double(report_bytes) / nodes;
  out["coordinator_bytes_per_file"] = double(m.bytes().size() + report_bytes) / double(files);
  out["reports_rss_growth_mib"] = (double(Rss()) - double(rss_before)) / (1 << 20);
  shares.clear();
  shares.shrink_to_fit();
  t = Clock::now();
  auto st = client.Call(hoard::proto::ClusterStatus{.dataset = "imagenet"}, std::chrono::minutes(5));
  if (!st.ok()) return fail("status", st.status());
  out["status_s"] = Seconds(t);
  if (!st->datasets.at(0).complete || st->datasets[0].files_cached != meta.file_count) {
    std::fprintf(stderr, "status: the dataset should be complete from the reports\n");
    return 1;
  }
  out["rss_mib"] = double(Rss()) / (1 << 20);

  // 5. Heartbeats as fast as the coordinator answers: kSenders client
  // threads, each a DEALER socket, sending the heartbeats of their part of
  // the nodes in a loop (without reports: they are sent only when changed).
  {
    constexpr int kSenders = 8;
    std::atomic<uint64_t> beats{0}, failures{0};
    t = Clock::now();
    std::vector<std::thread> senders;
    for (int c = 0; c < kSenders; ++c) {
      senders.emplace_back([&, c] {
        hoard::proto::RpcClient client(zmq_ctx, service.endpoint());
        while (Seconds(t) < heartbeat_seconds) {
          for (int i = c; i < nodes; i += kSenders) {
            hoard::proto::Heartbeat hb{.name = members[i].name, .epoch = map.epoch,
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
  }
  service.Stop();
  out["sink"] = sink;

  auto d = [&](const char* k) { return out[k].get<double>(); };
  std::printf("hoard-scale-bench: %d nodes, %llu files, replicas %d\n", nodes,
              static_cast<unsigned long long>(files), replicas);
  std::printf("  dataset add (walk + manifest) %.1f s; manifest %.1f bytes/file; coordinator %.1f bytes/file "
              "(manifest + reports of %.0f bytes/node)\n",
              d("dataset_add_s"), d("manifest_bytes_per_file"), d("coordinator_bytes_per_file"),
              d("report_bytes_per_node"));
  std::printf("  placement: a node's share %.2f s (a joiner's %.2f s); Owners() %.2f us; every chunk's owners "
              "(AssignAll, reference) %.1f s; shares %.3f..%.3f of mean\n",
              d("node_share_s"), d("joiner_share_s"), d("owners_call_us"), d("assign_all_s"),
              d("share_min_over_mean"), d("share_max_over_mean"));
  std::printf("  join: %.4f%% of chunks moved (sample %.4f%%; ideal %.4f%%); leave: %.4f%% (sample %.4f%%; ideal "
              "%.4f%%)\n",
              100 * d("join_moved_exact"), 100 * d("join_moved"), 100 * d("join_ideal"), 100 * d("leave_moved_exact"),
              100 * d("leave_moved"), 100 * d("leave_ideal"));
  std::printf("  progress: %d reports in %.2f s; status of the dataset %.2f s\n", nodes, d("reports_in_s"),
              d("status_s"));
  std::printf("  heartbeats: %.0f/s handled (needed %d/s at 1 s intervals): %.1fx headroom; %d registrations in "
              "%.2f s\n",
              d("heartbeats_per_s"), nodes, d("heartbeats_per_s") / nodes, nodes, d("register_all_s"));
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
