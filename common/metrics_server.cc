#include "common/metrics_server.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <charconv>
#include <thread>

#include <boost/asio.hpp>

#include "common/file_util.h"
#include "common/metrics.h"

namespace hoard::metrics {

namespace asio = boost::asio;
using asio::ip::tcp;

Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("metrics address '" + address + "' is not HOST:PORT");
  }
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') {
      return Status::InvalidArgument("metrics address '" + address + "': an IPv6 host is written [ADDR]");
    }
    h = h.substr(1, h.size() - 2);
  }
  const std::string p = address.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || value > 65535) {
    return Status::InvalidArgument("metrics address '" + address + "': port '" + p + "' is not 0..65535");
  }
  *host = std::move(h);
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

class MetricsServer::Impl {
 public:
  explicit Impl(Options options) : options_(std::move(options)), acceptor_(io_), retry_(io_) {}

  ~Impl() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Bind() {
    std::string host;
    uint16_t port = 0;
    HOARD_RETURN_IF_ERROR(SplitHostPort(options_.address, &host, &port));
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("metrics address '" + options_.address + "': cannot resolve '" + host +
                                     "': " + ec.message());
    }
    const tcp::endpoint ep = results.begin()->endpoint();
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::Unavailable("metrics address " + options_.address + ": " + ec.message());
    const tcp::endpoint bound = acceptor_.local_endpoint();
    const std::string a = bound.address().to_string();
    address_ = (bound.address().is_v6() ? "[" + a + "]" : a) + ":" + std::to_string(bound.port());
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return Status::Ok();
  }

  const std::string& address() const { return address_; }

 private:
  class Session;

  void Accept();

  // Built on the io thread only: one request, one answer.
  static std::string Respond(int code, const char* reason, const std::string& type, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  }

  std::string Answer(const std::string& head) {
    const size_t eol = head.find("\r\n");
    const std::string line = head.substr(0, eol);
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
      return Respond(400, "Bad Request", "text/plain", "bad request\n");
    }
    const std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    if (method != "GET" || target != "/metrics") {
      return Respond(404, "Not Found", "text/plain", "not found: only GET /metrics is served\n");
    }
    return Respond(200, "OK", "text/plain; version=0.0.4; charset=utf-8", options_.render());
  }

  Options options_;
  size_t active_ = 0;  // io thread only; before io_, which destroys the sessions
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::string address_;  // set by Bind before the thread starts
  std::thread thread_;
};

class MetricsServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl* server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), deadline_(socket_.get_executor()),
        request_(server->options_.max_request_bytes) {
    ++server_->active_;
  }
  ~Session() { --server_->active_; }

  void Start() {
    auto self = shared_from_this();
    deadline_.expires_after(server_->options_.timeout);
    deadline_.async_wait([self](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);  // fails the pending read or write
      }
    });
    asio::async_read_until(socket_, request_, "\r\n\r\n", [self](boost::system::error_code ec, size_t) {
      if (ec == asio::error::not_found) {  // the head filled the buffer without ending
        self->Write(Respond(431, "Request Header Fields Too Large", "text/plain", "request too large\n"));
      } else if (ec) {
        self->deadline_.cancel();  // gone, or timed out
      } else {
        const auto data = self->request_.data();
        self->Write(self->server_->Answer(std::string(asio::buffers_begin(data), asio::buffers_end(data))));
      }
    });
  }

 private:
  void Write(std::string response) {
    response_ = std::move(response);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(response_), [self](boost::system::error_code, size_t) {
      boost::system::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
      self->socket_.close(ignored);
      self->deadline_.cancel();
    });
  }

  Impl* server_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::streambuf request_;
  std::string response_;
};

void MetricsServer::Impl::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors, most likely: try again shortly rather
      // than spin on the error.
      options_.logger->warn("metrics: accept: {}", ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (active_ >= options_.max_connections) {
      socket.close();  // a flood of idle connections cannot pin the fds
    } else {
      std::make_shared<Session>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsServer::~MetricsServer() = default;

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(Options options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  HOARD_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

const std::string& MetricsServer::address() const { return impl_->address(); }

Result<std::unique_ptr<MetricsServer>> ServeMetrics(const std::string& address, const Registry* registry,
                                                    const std::shared_ptr<spdlog::logger>& logger,
                                                    const std::string& addr_file) {
  if (address.empty()) return std::unique_ptr<MetricsServer>();
  HOARD_ASSIGN_OR_RETURN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start({.address = address, .render = [registry] { return registry->Render(); }, .logger = logger}));
  logger->info("metrics on http://{}/metrics", server->address());
  if (!addr_file.empty()) {
    HOARD_RETURN_IF_ERROR(WriteFileAtomic(addr_file, server->address() + "\n"));
  }
  return server;
}

void AddMetricsAddrFlag(CLI::App& app, std::string* address, const std::string& dir) {
  app.add_option("--metrics-addr", *address,
                 "Serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port, written to " + dir +
                     "/metrics.addr); empty = off");
}

}  // namespace hoard::metrics
