// File: common/metrics_server.h
//
// MetricsServer serves a daemon's metrics over HTTP for Prometheus:
// `GET /metrics` (a query string is ignored) answers 200 with the text
// exposition format; any other method or path answers 404, a request line or
// headers that are not HTTP 400, and a request head over `max_request_bytes`
// 431. Every answer closes the connection (HTTP/1.0 style: a scrape is one
// request).
//
// A slow or malicious client never blocks the daemon: the server runs on its
// own thread (boost-asio, one io_context), every connection has one deadline
// for reading its request and writing the answer, and request heads are
// bounded. The daemon's other threads never wait on it; it only calls
// `render`.
//
// Nor can idle or slow clients, however many, keep scrapes out: at most
// `max_connections` are open, and at the limit a new connection is admitted
// by closing (resetting) the one that has waited longest for its request; if
// every open connection has sent its request, the oldest answer still being
// written (to a client that does not read it). A scraper sends its request as
// soon as it connects, so it is answered unless `max_connections` newer
// connections arrive before its request does; idle (slowloris) clients only
// displace each other. A head deadline shorter than `timeout` is therefore
// not needed: an idle connection keeps its slot only while nobody else wants
// it.
//
// Bounds, whatever the number of clients (1,000 idle ones hold 64 slots):
// descriptors, at most `max_connections` + 1 connections (the +1: a
// just-accepted one for the instant before the one it displaces is closed)
// plus the listening socket and the io_context's epoll, eventfd and timerfd:
// 69 by default, far below the process's limit (20,000 on the build hosts),
// so a flood cannot starve the daemon's other work of descriptors;
// connections the kernel has completed but this thread not yet accepted wait
// in the listen queue, holding no descriptor of the process. Memory, per open
// connection: a request head of at most `max_request_bytes` and one rendered
// answer; a closed connection is freed as soon as its cancelled operations
// run, next on this thread, not at its deadline. A connection closed by its
// deadline or to make room is reset, so no unsent answer stays queued in the
// kernel for a client that does not read it.
//
// Address: "HOST:PORT" (or "[V6]:PORT"); HOST may be a name, resolved once.
// Port 0 picks a free port; address() tells the bound one.
//
// Thread-safety: Start and the destructor from one thread; address() from any.
// `render` runs on the server's thread, one call at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "common/result.h"

namespace CLI {
class App;
}

namespace hoard::metrics {

class MetricsServer {
 public:
  struct Options {
    std::string address;                  // HOST:PORT
    std::function<std::string()> render;  // the body of GET /metrics
    std::shared_ptr<spdlog::logger> logger;
    // Whole-connection deadline: reading the request and writing the answer.
    std::chrono::milliseconds timeout{5000};
    size_t max_request_bytes = 8192;
    // Open connections at most; at the limit a new one displaces an open one
    // (above). 0 serves nothing.
    size_t max_connections = 64;
  };

  // Binds and starts serving; kInvalidArgument for an address that does not
  // parse or resolve, kUnavailable when it cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(Options options);
  // Stops serving and joins the thread; connections in progress are dropped.
  ~MetricsServer();

  // "HOST:PORT" as bound, e.g. "127.0.0.1:40123".
  const std::string& address() const;

  class Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Registry;

// What each daemon does with its --metrics-addr: nothing when `address` is
// empty (returns null); else adds the build gauge to `registry`
// (AddBuildInfo), serves it, logs "metrics on http://ADDR/metrics" and, when
// `addr_file` is not empty, writes the bound address there (one line), so
// launchers and tests find a port 0 choice.
Result<std::unique_ptr<MetricsServer>> ServeMetrics(const std::string& address, Registry* registry,
                                                    const std::shared_ptr<spdlog::logger>& logger,
                                                    const std::string& addr_file);

// hoard_build_info{version="0.1.0",commit="1a2b3c4d5e6f"} 1: what this
// binary was built from (common/build_info.h; commit with "-dirty" for a
// build of a modified tree), so a dashboard sees which daemons run which
// build during a rolling upgrade.
void AddBuildInfo(Registry* registry);

// Splits "HOST:PORT" / "[V6]:PORT" into its parts; kInvalidArgument if it
// does not parse or the port is not 0..65535.
Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port);

// --metrics-addr, as every daemon takes it; `dir` names where a port-0
// address is written (e.g. "DATA_DIR"), for the help text.
void AddMetricsAddrFlag(CLI::App& app, std::string* address, const std::string& dir);

}  // namespace hoard::metrics
