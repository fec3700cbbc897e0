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
// for reading its request and writing the answer, request heads are bounded,
// and connections past `max_connections` are closed at once. The daemon's
// other threads never wait on it; it only calls `render`.
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
// empty (returns null); else serves `registry`, logs "metrics on
// http://ADDR/metrics" and, when `addr_file` is not empty, writes the bound
// address there (one line), so launchers and tests find a port 0 choice.
Result<std::unique_ptr<MetricsServer>> ServeMetrics(const std::string& address, const Registry* registry,
                                                    const std::shared_ptr<spdlog::logger>& logger,
                                                    const std::string& addr_file);

// Splits "HOST:PORT" / "[V6]:PORT" into its parts; kInvalidArgument if it
// does not parse or the port is not 0..65535.
Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port);

// --metrics-addr, as every daemon takes it; `dir` names where a port-0
// address is written (e.g. "DATA_DIR"), for the help text.
void AddMetricsAddrFlag(CLI::App& app, std::string* address, const std::string& dir);

}  // namespace hoard::metrics
