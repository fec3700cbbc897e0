// File: proto/rpc_server.h
//
// RpcServer serves typed request handlers on a ZeroMQ ROUTER socket.
//
//   RpcServer server({.endpoint = "tcp://127.0.0.1:7100", .name = "coordinator", .logger = log});
//   server.Handle<proto::Ping>([&](const proto::Ping&, const proto::Envelope&, std::string*) {
//     return Result<proto::Pong>(proto::Pong{...});
//   });
//   HOARD_RETURN_IF_ERROR(server.Start());
//
// Threads: one I/O thread owns the ROUTER socket (ZeroMQ sockets are not
// thread-safe); it queues each request for a pool of worker threads (a
// WorkQueue, common/work_queue.h), which decode it, run the handler and hand
// the reply back to the I/O thread over an inproc socket (one per worker). A slow handler therefore delays only its own caller. When the
// queue is full the I/O thread answers Unavailable ("busy") at once rather than
// letting requests pile up unboundedly.
//
// Bad input: a message that fails DecodeMessage, names a type this server has
// no handler for, or whose body does not convert gets an error reply with the
// reason and a (rate-limited) warning in the log; the server keeps running.
//
// Keys: on a zmq context with CURVE keys (proto/curve.h) the socket is a CURVE
// server, and a request whose access (proto/access.h) is above the key class
// its connection authenticated with gets kPermissionDenied.
//
// Gate: an optional hook (SetGate) that sees every request's type after the
// admin check and before its handler; a non-OK Status it returns is the reply
// and the handler never runs. A standby coordinator answers everything
// kNotLeader this way without touching its state (coordinator/service.h).
// OpenDataChannel, which the server answers itself, is not gated.
//
// Data channel: with Options::data_endpoint on a context with keys, the server
// also binds a data socket for sealed chunk traffic (proto/data_channel.h) and
// answers OpenDataChannel; the handlers cannot tell which socket a request
// came in on. Workers open requests and seal replies, so that work runs in
// parallel. Without one, OpenDataChannel gets an error and clients stay on
// CURVE.
//
// Thread-safety: register handlers before Start(); Start and Stop from one
// thread. Handlers run concurrently on worker threads and must be thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/mutex.h"
#include "common/result.h"
#include "common/work_queue.h"
#include "proto/data_channel.h"
#include "proto/envelope.h"
#include "proto/handshake_gate.h"

namespace hoard::proto {

class RpcServer {
 public:
  struct Options {
    std::string endpoint;  // e.g. "tcp://127.0.0.1:0" (port 0: any free port)
    std::string name;      // for logs and the "not served by" error
    int workers = 4;
    size_t max_queue = 4096;  // queued requests before answering "busy"
    size_t max_queue_bytes = 256u << 20;  // queued request bytes before answering "busy"
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;  // required; outlives the server
    // e.g. "tcp://10.0.0.5:7102" or port 0; "" for none. Used only on a
    // context with CURVE keys (plain sockets need no second channel).
    std::string data_endpoint;
    // Connections per socket allowed to be in their handshake at once
    // (proto/handshake_gate.h).
    size_t max_pending_handshakes = 256;
    // How long a data connection may take to authenticate before ZeroMQ
    // drops it (kDataHandshake; longer only in tests of the gate's cap).
    std::chrono::milliseconds data_handshake{2000};
    // Tests: called on the I/O thread after it passed a reply on to its
    // socket (a test waits for a reply to be on its way, not a time).
    std::function<void()> on_reply_sent;
  };

  // How long a connection may take to authenticate before ZeroMQ drops it:
  // a CURVE handshake is four messages; a data connection's PLAIN one is two,
  // from a client that just got its token.
  static constexpr std::chrono::milliseconds kControlHandshake{5000};
  static constexpr std::chrono::milliseconds kDataHandshake{2000};

  explicit RpcServer(Options options);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Registers the handler for Req. The handler returns the reply body or an
  // error Status, and may fill *payload_out with raw reply bytes. The
  // request's own payload frame, if it had one, is the Envelope's payload
  // (has_payload, payload_view()).
  template <typename Req>
  void Handle(std::function<Result<typename Req::Reply>(const Req&, const Envelope&, std::string* payload_out)> fn) {
    handlers_[static_cast<uint16_t>(Req::kType)] = [fn = std::move(fn)](Envelope& env, std::string* header,
                                                                        std::string* payload, bool* malformed) {
      Result<Req> req = BodyAs<Req>(env);
      if (!req.ok()) {
        *malformed = true;
        return req.status();
      }
      Result<typename Req::Reply> reply = fn(*req, env, payload);
      if (!reply.ok()) return reply.status();
      *header = EncodeHeader(ReplyType<typename Req::Reply>::kType, env.id, Status::Ok(), *reply);
      return Status::Ok();
    };
  }

  // Sets the gate (see the top of this file); before Start. Called on worker
  // threads, concurrently: it must be thread-safe, and quick (it runs for
  // every request).
  using Gate = std::function<Status(uint16_t type)>;
  void SetGate(Gate gate) { gate_ = std::move(gate); }

  // Binds and starts the threads.
  Status Start();
  // Stops accepting, finishes nothing further, joins the threads. Idempotent.
  void Stop();

  // The endpoint actually bound (with the real port when 0 was asked for).
  const std::string& bound_endpoint() const { return bound_endpoint_; }
  // The data socket's bound endpoint; "" without a data channel.
  const std::string& data_endpoint() const { return data_endpoint_; }
  // Data channel sessions open now.
  size_t data_sessions() const { return sessions_ ? sessions_->size() : 0; }

  // Requests answered with an error because they were malformed.
  uint64_t rejected() const { return rejected_.load(); }
  // Connections cut, and connections now counted, as unfinished handshakes
  // past the cap (both sockets; proto/handshake_gate.h).
  uint64_t handshakes_cut() const;
  size_t handshakes_pending() const;
  // Requests waiting for a worker (for tests).
  size_t queued() const;

 private:
  using RawHandler =
      std::function<Status(Envelope&, std::string* header, std::string* payload, bool* malformed)>;
  struct Job {
    std::vector<zmq::message_t> route;   // identity (+ empty delimiter if the client sent one)
    std::vector<zmq::message_t> frames;  // header, payload
    size_t bytes = 0;                    // of frames
    KeyClass key_class = KeyClass::kClient;  // what it may send (proto/access.h)
    bool from_data = false;              // came in on the data socket: answered there
    std::string user;                    // data socket: the connection's ZAP User-Id
    // Set for a sealed request from the data socket: its session (reset if
    // it fails to open: the answer then goes unsealed) and seal.
    std::shared_ptr<DataSessions::Session> session;
    SealInfo seal;
  };

  Status StartGate(zmq::socket_t& socket, std::chrono::milliseconds handshake, std::unique_ptr<HandshakeGate>* gate);
  void StopGates();
  void IoLoop();
  // Runs one job on worker `index` and passes its reply on over that
  // worker's socket.
  void Serve(Job& job, size_t index);
  // Builds the reply frames for one job (runs on a worker).
  void Process(Job& job, std::string* header, std::string* payload);
  // Opens a sealed job's frames in place; false (with the error reply in
  // *header) if they fail authentication or replay an id.
  bool Unseal(Job& job, std::string* header);
  // Takes a data socket's message apart; false (after answering it, unsealed)
  // if it names no open session.
  bool AdmitSealed(Job& job);
  // The reply frames of a job, sealed for a job that came sealed.
  std::vector<zmq::message_t> ReplyFrames(Job& job, std::string header, std::string payload);
  // A new session's reply to OpenDataChannel, for connection `owner`.
  Result<DataChannel> OpenChannel(KeyClass key_class, const std::string& owner);
  void LogRejected(const std::string& why);

  Options options_;
  std::unordered_map<uint16_t, RawHandler> handlers_;  // fixed after Start
  Gate gate_;                                          // fixed after Start; null: none
  std::string bound_endpoint_;
  std::string reply_endpoint_;  // inproc, workers -> I/O thread
  bool secure_ = false;         // CURVE keys on the context; fixed after Start

  std::unique_ptr<zmq::socket_t> router_;
  std::unique_ptr<zmq::socket_t> data_;  // the data socket; null without a data channel
  std::unique_ptr<HandshakeGate> router_gate_, data_gate_;  // data_gate_ only with data_
  std::unique_ptr<DataSessions> sessions_;
  std::string data_endpoint_;
  uint32_t data_port_ = 0;
  std::string plain_domain_;  // the data socket's ZAP domain ("" without one)
  std::unique_ptr<zmq::socket_t> replies_;
  // Each worker's end of replies_: a ZeroMQ socket belongs to one thread.
  std::vector<std::unique_ptr<zmq::socket_t>> worker_out_;
  std::thread io_thread_;  // the I/O loop (not a worker: it owns the sockets)
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> rejected_{0};

  Mutex log_mu_;
  int64_t log_window_start_ GUARDED_BY(log_mu_) = 0;
  int log_count_ GUARDED_BY(log_mu_) = 0;

  // Requests waiting for a worker, bounded by max_queue and max_queue_bytes
  // (queued only: a running request no longer counts). Declared last: its
  // workers use the members above. Null until Start.
  std::unique_ptr<WorkQueue<Job>> queue_;
};

// Sets the socket options hoard uses everywhere: no linger on close, the
// receive size cap, fast reconnects.
void ConfigureSocket(zmq::socket_t& socket);

}  // namespace hoard::proto
