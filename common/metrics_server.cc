#include "common/metrics_server.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <charconv>
#include <list>
#include <thread>

#include <boost/asio.hpp>

#include "common/build_info.h"
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

  // Closes the connection that has waited longest for its request, else
  // (every slot answering) the oldest answer; false when none is open.
  bool MakeRoom();
  size_t open_connections() const { return waiting_.size() + answering_.size(); }

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
  // The open connections, io thread only: those still reading their request
  // in the order they were accepted, and those being answered in the order
  // their answers began. A session is in one of them exactly while its
  // socket is open, so open_connections() counts the descriptors they hold.
  // Before io_, whose destruction destroys the sessions (they unlink
  // themselves).
  std::list<Session*> waiting_;
  std::list<Session*> answering_;
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
    Link(&server_->waiting_);
  }
  ~Session() { Unlink(); }

  void Start() {
    auto self = shared_from_this();
    deadline_.expires_after(server_->options_.timeout);
    deadline_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->Close(/*abort=*/true);  // fails the pending read or write
    });
    asio::async_read_until(socket_, request_, "\r\n\r\n", [self](boost::system::error_code ec, size_t) {
      if (!self->socket_.is_open()) return;  // closed by its deadline or to make room
      if (ec == asio::error::not_found) {    // the head filled the buffer without ending
        self->Write(Respond(431, "Request Header Fields Too Large", "text/plain", "request too large\n"));
      } else if (ec) {
        self->Close(/*abort=*/false);  // the client went away
      } else {
        const auto data = self->request_.data();
        self->Write(self->server_->Answer(std::string(asio::buffers_begin(data), asio::buffers_end(data))));
      }
    });
  }

  // Closes the socket (once) and gives up the slot. `abort` resets the
  // connection instead of a graceful close: the kernel then drops what is
  // left of an answer rather than keep sending it to a client that was cut
  // off for not reading it. Cancelling the deadline lets the session go as
  // soon as its cancelled operations have run, not when the deadline ends.
  void Close(bool abort) {
    if (!socket_.is_open()) return;
    Unlink();
    boost::system::error_code ignored;
    if (abort) {
      socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    } else {
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
    }
    socket_.close(ignored);
    deadline_.cancel();
  }

 private:
  void Write(std::string response) {
    // Its request is in: from now on it is a victim only when no connection
    // is still waiting for its request.
    Unlink();
    Link(&server_->answering_);
    response_ = std::move(response);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(response_),
                      [self](boost::system::error_code, size_t) { self->Close(/*abort=*/false); });
  }

  void Link(std::list<Session*>* list) {
    list_ = list;
    pos_ = list->insert(list->end(), this);
  }
  void Unlink() {
    if (list_ == nullptr) return;
    list_->erase(pos_);
    list_ = nullptr;
  }

  Impl* server_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::streambuf request_;
  std::string response_;
  std::list<Session*>* list_ = nullptr;  // waiting_ or answering_ while the socket is open
  std::list<Session*>::iterator pos_;
};

bool MetricsServer::Impl::MakeRoom() {
  std::list<Session*>& from = waiting_.empty() ? answering_ : waiting_;
  if (from.empty()) return false;
  // Reset, not closed gracefully: an idle client has nothing to receive, and
  // a slow reader's unsent answer must not stay queued in the kernel.
  from.front()->Close(/*abort=*/true);
  return true;
}

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
    // At the limit the newcomer displaces the connection that has waited
    // longest for its request, instead of being refused: refusing it let a
    // few dozen idle connections, reopened as they timed out, refuse every
    // scrape. A scraper sends its request as it connects, so the longest
    // waiting is an idle or slowloris client, whose new connections only
    // push out its own older ones.
    if (open_connections() >= options_.max_connections && !MakeRoom()) {
      socket.close();  // max_connections 0: nothing is served
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

void AddBuildInfo(Registry* registry) {
  const BuildInfo& build = ThisBuild();
  registry->AddGauge("hoard_build_info", "The version and commit this daemon was built from (always 1)",
                     {{"version", std::string(build.version)}, {"commit", build.CommitLabel()}}, [] { return 1.0; });
}

Result<std::unique_ptr<MetricsServer>> ServeMetrics(const std::string& address, Registry* registry,
                                                    const std::shared_ptr<spdlog::logger>& logger,
                                                    const std::string& addr_file) {
  if (address.empty()) return std::unique_ptr<MetricsServer>();
  AddBuildInfo(registry);
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
