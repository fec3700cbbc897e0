// File: proto/handshake_gate.h
//
// HandshakeGate bounds how many connections a listening ZeroMQ socket holds
// before they have authenticated.
//
// ZeroMQ accepts every TCP connection and keeps it until its handshake ends:
// authenticated (CURVE with a member's key, PLAIN with a data-channel token),
// refused, or timed out (ZMQ_HANDSHAKE_IVL). Each costs at most one frame of
// kMaxWireFrameBytes plus ZeroMQ's buffers, but there is no limit on how many
// there are. The gate watches the socket's monitor (ACCEPTED, DISCONNECTED)
// and counts the connections that are younger than the handshake timeout and
// have not delivered a message (RpcServer reports each message's connection
// through Delivered). Past `max_pending` it shuts the oldest of them down:
// a stranger's half-open handshakes are what piles up, while a member's
// handshake takes milliseconds and its first request marks it.
//
// A connection older than the handshake timeout is authenticated (ZeroMQ
// would have closed it otherwise) and leaves the count.
//
// The shutdown is shutdown(2) on ZeroMQ's descriptor: ZeroMQ then sees the
// connection end and cleans up as for any peer that went away. Events are
// drained before acting, and a descriptor is touched only while the monitor
// has not reported it closed and it is a connected TCP socket on this
// listener's port, so a reused descriptor of anything else is never cut.
//
// Thread-safety: one thread (the server's I/O thread) calls OnEvents and
// Delivered; counters may be read from any thread. Stop() before the socket
// closes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <zmq.hpp>

#include "common/result.h"

namespace hoard::proto {

class HandshakeGate {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    size_t max_pending = 256;
    std::chrono::milliseconds handshake_timeout{2000};  // the socket's ZMQ_HANDSHAKE_IVL
    uint16_t port = 0;                                  // the socket's listening port
  };

  // Starts monitoring `socket` (call before it binds, so no accept is missed).
  static Result<std::unique_ptr<HandshakeGate>> Start(zmq::context_t& context, zmq::socket_t& socket,
                                                      Options options);
  ~HandshakeGate();
  HandshakeGate(const HandshakeGate&) = delete;
  HandshakeGate& operator=(const HandshakeGate&) = delete;

  // The port is known only after bind (port 0 asks for any).
  void set_port(uint16_t port) { options_.port = port; }

  // The socket to poll for the monitor's events.
  zmq::socket_t& events() { return *events_; }
  // Drains the events and cuts the oldest unfinished handshakes beyond the cap.
  void OnEvents(Clock::time_point now);
  // A message came in on connection `fd` (ZMQ_SRCFD): it is authenticated.
  void Delivered(int fd);
  bool watching() const { return !pending_.empty(); }
  // Stops the monitor; the watched socket must still be open.
  void Stop();

  size_t pending() const { return pending_count_.load(); }
  uint64_t cut() const { return cut_.load(); }

 private:
  HandshakeGate(zmq::socket_t& socket, Options options) : socket_(&socket), options_(options) {}
  bool IsOurConnection(int fd) const;

  zmq::socket_t* socket_;
  Options options_;
  std::unique_ptr<zmq::socket_t> events_;
  bool stopped_ = false;
  // Connections not known to be authenticated: fd -> accepted at.
  std::unordered_map<int, Clock::time_point> pending_;
  std::atomic<size_t> pending_count_{0};
  std::atomic<uint64_t> cut_{0};
};

}  // namespace hoard::proto
