// hoard-curve-bench: what encryption costs a peer chunk transfer (issues 6, 7).
//
// One RpcServer serving GetChunk with a --chunk-size payload from memory (as a
// node agent serves a cached chunk, minus the disk) and --clients client
// threads, each calling it in a loop for --seconds over loopback TCP: on plain
// sockets (--insecure daemons), with CURVE keys and no data channel (every
// byte through CURVE: a ZAP handler, a CURVE server, member clients), and with
// CURVE keys and the data channel (chunks sealed with AES-GCM,
// proto/data_channel.h: what daemons do). Prints chunks/s, MB/s, the
// process's CPU seconds per GB moved, and the time of one call, for each, and
// one JSON line.
#include <sys/resource.h>

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

#include "common/testing.h"
#include "common/units.h"
#include "proto/curve.h"
#include "proto/rpc_client.h"
#include "proto/rpc_server.h"

namespace {

using namespace hoard;
using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The server and the clients have a context each, as two processes would.
enum class Mode { kPlain, kCurve, kSealed };

nlohmann::json Run(Mode mode, const std::string& keys_dir, uint64_t chunk, int clients, double seconds,
                   int io_threads) {
  static int runs = 0;
  auto log = spdlog::null_logger_mt("bench-" + std::to_string(++runs));
  zmq::context_t ctx(io_threads), client_ctx(io_threads);
  std::unique_ptr<proto::CurveSecurity> security, client_security;
  const bool secure = mode != Mode::kPlain;
  if (secure) {
    Result<proto::CurveKeys> keys = proto::LoadDaemonKeys(keys_dir);
    auto s = proto::CurveSecurity::Enable(ctx, *keys, log);
    auto c = proto::CurveSecurity::Enable(client_ctx, *keys, log);
    if (!s.ok() || !c.ok()) throw std::runtime_error("cannot enable the keys");
    security = std::move(*s);
    client_security = std::move(*c);
  }
  const std::string bytes = testing::PseudoRandomBytes(chunk, 1);
  proto::RpcServer server({.endpoint = "tcp://127.0.0.1:0", .name = "bench", .workers = 8, .logger = log,
                           .context = &ctx,
                           .data_endpoint = mode == Mode::kSealed ? "tcp://127.0.0.1:0" : ""});
  server.Handle<proto::GetChunk>([&](const proto::GetChunk&, const proto::Envelope&, std::string* payload) {
    *payload = bytes;
    return Result<proto::ChunkData>(proto::ChunkData{.chunk_length = bytes.size(), .source = "cache"});
  });
  if (Status s = server.Start(); !s.ok()) throw std::runtime_error(s.ToString());

  std::atomic<uint64_t> calls{0}, failures{0};
  const double cpu0 = CpuSeconds();
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&] {
      proto::RpcClient c(client_ctx, server.bound_endpoint());
      while (Clock::now() < end) {
        zmq::message_t payload;
        auto r = c.Call(proto::GetChunk{.dataset = "bench"}, std::chrono::seconds(10), &payload);
        if (r.ok() && payload.size() == chunk) calls++;
        else failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  server.Stop();
  const double gb = double(calls) * chunk / 1e9;
  client_security.reset();
  security.reset();
  return {{"mode", mode == Mode::kPlain ? "plain" : mode == Mode::kCurve ? "curve" : "sealed"},
          {"io_threads", io_threads},
          {"clients", clients},
          {"chunk_bytes", chunk},
          {"chunks", calls.load()},
          {"failures", failures.load()},
          {"seconds", elapsed},
          {"chunks_per_s", calls / elapsed},
          {"mb_per_s", gb * 1e3 / elapsed},
          {"ms_per_call", calls ? 1e3 * elapsed * clients / calls : 0.0},
          {"cpu_s_per_gb", gb > 0 ? cpu / gb : 0.0}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-curve-bench: a loopback GetChunk loop on plain sockets, CURVE, and the data channel"};
  std::string chunk_size = "4M";
  std::vector<int> clients = {1, 4};
  double seconds = 5;
  int io_threads = 1;
  app.add_option("--chunk-size", chunk_size, "Payload of each reply")->capture_default_str();
  app.add_option("--clients", clients, "Client threads (one run per value, comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seconds", seconds, "Length of each run")->capture_default_str();
  app.add_option("--io-threads", io_threads, "ZeroMQ I/O threads per context (the daemons use 1)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  Result<uint64_t> chunk = ParseBytes(chunk_size);
  if (!chunk.ok() || *chunk == 0) {
    std::fprintf(stderr, "hoard-curve-bench: --chunk-size: bad size\n");
    return 2;
  }
  testing::TempDir tmp("hoard-curve-bench");
  if (Status s = proto::GenerateKeys(tmp.Sub("keys")); !s.ok()) {
    std::fprintf(stderr, "hoard-curve-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  nlohmann::json all = nlohmann::json::array();
  std::printf("%-6s %7s %10s %9s %11s %13s\n", "mode", "clients", "chunks/s", "MB/s", "ms/call", "CPU s/GB");
  for (int n : clients) {
    for (Mode mode : {Mode::kPlain, Mode::kCurve, Mode::kSealed}) {
      nlohmann::json r = Run(mode, tmp.Sub("keys"), *chunk, n, seconds, io_threads);
      std::printf("%-6s %7d %10.1f %9.1f %11.2f %13.2f\n", r["mode"].get<std::string>().c_str(), n,
                  r["chunks_per_s"].get<double>(), r["mb_per_s"].get<double>(), r["ms_per_call"].get<double>(),
                  r["cpu_s_per_gb"].get<double>());
      all.push_back(r);
    }
  }
  std::printf("%s\n", all.dump().c_str());
  return 0;
}
