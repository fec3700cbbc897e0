#include "proto/handshake_gate.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <zmq_addon.hpp>

namespace hoard::proto {

Result<std::unique_ptr<HandshakeGate>> HandshakeGate::Start(zmq::context_t& context, zmq::socket_t& socket,
                                                            Options options) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = "inproc://hoard-gate-" + std::to_string(::getpid()) + "-" + std::to_string(++next);
  std::unique_ptr<HandshakeGate> gate(new HandshakeGate(socket, options));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    return Status::Internal(std::string("cannot monitor a socket: ") + zmq_strerror(zmq_errno()));
  }
  try {
    gate->events_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
    gate->events_->set(zmq::sockopt::linger, 0);
    // No high-water mark towards us: ZeroMQ's I/O thread sends the events
    // and would block on a full pipe, stalling every socket of the context.
    // They are a few bytes each and the I/O loop drains them at once.
    gate->events_->set(zmq::sockopt::rcvhwm, 0);
    gate->events_->connect(endpoint);
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    return Status::Internal(std::string("cannot watch a socket's handshakes: ") + e.what());
  }
  return gate;
}

HandshakeGate::~HandshakeGate() { Stop(); }

void HandshakeGate::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // Before our end closes: a monitor left without a reader would block the
  // I/O thread at its next event.
  zmq_socket_monitor(socket_->handle(), nullptr, 0);
  events_.reset();
}

void HandshakeGate::Delivered(int fd) {
  if (pending_.erase(fd) > 0) pending_count_.store(pending_.size());
}

bool HandshakeGate::IsOurConnection(int fd) const {
  int listening = 0, type = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening != 0) return false;
  len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  sockaddr_storage local{};
  len = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return false;
  uint16_t port = 0;
  if (local.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  else if (local.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  else return false;
  sockaddr_storage peer{};
  len = sizeof peer;
  return port == options_.port && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0;
}

void HandshakeGate::OnEvents(Clock::time_point now) {
  if (stopped_) return;
  while (true) {
    std::vector<zmq::message_t> frames;
    try {
      if (!zmq::recv_multipart(*events_, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t&) {
      break;
    }
    // Frame 0: event (u16) and value (u32, the descriptor), host order.
    if (frames.empty() || frames[0].size() < 6) continue;
    uint16_t event = 0;
    uint32_t value = 0;
    std::memcpy(&event, frames[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>(frames[0].data()) + 2, 4);
    const int fd = int(value);
    if (event == ZMQ_EVENT_ACCEPTED) pending_[fd] = now;
    else if (event == ZMQ_EVENT_DISCONNECTED) pending_.erase(fd);
  }
  // Older than the handshake timeout and still open: authenticated.
  const auto settled = now - options_.handshake_timeout - std::chrono::milliseconds(500);
  std::erase_if(pending_, [&](const auto& p) { return p.second < settled; });
  while (pending_.size() > options_.max_pending) {
    auto oldest = std::min_element(pending_.begin(), pending_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    if (IsOurConnection(oldest->first)) {
      ::shutdown(oldest->first, SHUT_RDWR);
      cut_.fetch_add(1);
    }
    pending_.erase(oldest);
  }
  pending_count_.store(pending_.size());
}

}  // namespace hoard::proto
