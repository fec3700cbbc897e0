// File: proto/rpc_client.h
//
// RpcClient sends typed requests to one RpcServer and waits for the reply with
// a deadline. Every call either returns the reply or a Status within its
// timeout; it never hangs on a dead or stopped peer:
//   - the socket only queues to connected peers (ZMQ_IMMEDIATE), so a send to
//     a peer that is down fails with kUnavailable once the timeout passes;
//   - a call whose connection drops while it waits (the peer's process died,
//     or its host vanished: kUnackedTimeoutMs below) fails with kUnavailable
//     at once instead of waiting out its timeout, so
//     a long timeout meant for a slow but live peer costs nothing when the
//     peer is dead;
//   - a reply that arrives after its call timed out carries an old request id
//     and is discarded by the next call.
//
// Errors: kUnavailable for timeouts and unreachable peers (retry elsewhere);
// otherwise the Status the server replied with; kInvalidArgument if the reply
// itself is malformed.
//
// Keys: on a zmq context with CURVE keys (proto/curve.h) the socket is a CURVE
// client with them; a server that refuses its key never answers, so that
// looks like a peer that is not there (kUnavailable).
//
// Data channel: on such a context, the requests UsesDataChannel names go
// sealed over the server's data channel (proto/data_channel.h), opened at the
// first one and kept while the client lives. A server without one answers
// OpenDataChannel with an error, and this client then stays on CURVE. An
// unsealed answer on the data channel (the server restarted and forgot the
// session) makes the client open a new session and send once more.
//
// Identity: a client's CURVE socket has a routing id of its own (random, or
// one handed down from a closed client by ClientPool), kept across
// reconnects. The server keeps one data channel session per routing id, so a
// client that reconnects, or a pool that replaces a closed client, replaces
// its old session instead of leaving it behind (proto/data_channel.h).
//
// Thread-safety: an RpcClient belongs to one thread at a time (a ZeroMQ socket
// is not thread-safe). ClientPool hands clients out to concurrent callers.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/mutex.h"
#include "common/result.h"
#include "proto/data_channel.h"
#include "proto/envelope.h"

namespace hoard::proto {

// How a client connection notices a peer host that vanished without closing
// its sockets (a crash, a cut cable: no RST), so that a call waiting on it
// fails within about two seconds (Receive's connection check): the kernel
// drops the connection when its request stays unacknowledged for
// kUnackedTimeoutMs (TCP_USER_TIMEOUT), or when it has been idle, waiting for
// the reply, for kKeepaliveIdleS and a keepalive probe then goes unanswered.
// Both are answered by the peer's kernel, so a live peer that is slow to
// reply, or slow to send a large reply, is never mistaken for a dead one.
// (ZMTP heartbeats are not used: libzmq counts only whole frames as traffic,
// so a 64 MiB chunk arriving over a busy link would look like silence.)
inline constexpr int kUnackedTimeoutMs = 1000;
inline constexpr int kKeepaliveIdleS = 1;

class RpcClient {
 public:
  // `routing_id`: the identity above (at most 255 bytes, not starting with a
  // zero byte); empty for a fresh random one.
  RpcClient(zmq::context_t& context, std::string endpoint, std::string routing_id = "");
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& routing_id() const { return routing_id_; }

  // Whether the last call got an answer from the peer (possibly an error
  // reply). False after a timeout or an unreachable peer: lets callers tell
  // "the server said Unavailable" from "the server was not there".
  bool last_call_answered() const { return answered_; }
  // Whether the last call was answered "busy": the server's request queue was
  // full, so it did not look at the request (an error reply with id 0 and
  // kUnavailable). Unlike a handler's kUnavailable, worth asking again soon.
  bool last_call_busy() const { return busy_; }
  // Whether the last call's request went out on a live connection and no
  // reply came before its timeout: the server is there but slow (or stuck),
  // unlike a peer that never connected or dropped the connection.
  bool last_call_timed_out() const { return timed_out_; }
  // Whether the last call's request went out on a connection. False: the
  // peer certainly did not get it (no connection came up, or the send
  // failed), so sending it again elsewhere cannot apply it twice
  // (proto/leader_client.h).
  bool last_call_sent() const { return sent_; }

  // Caps how long a call waits for a connection to the peer (the rest of its
  // timeout is for the reply). A dead peer then costs this much, not the whole
  // timeout. Default: no separate cap.
  void set_connect_timeout(std::chrono::milliseconds t) { connect_timeout_ = t; }

  // Sends `req` and waits up to `timeout` for its reply. When the reply has a
  // payload frame and `payload` is not null, it is moved there. A non-null
  // `request_payload` is sent as the request's payload frame (PutCkptChunk's
  // bytes); it is copied, so it need not outlive the call.
  template <typename Req>
  Result<typename Req::Reply> Call(const Req& req, std::chrono::milliseconds timeout,
                                   zmq::message_t* payload = nullptr,
                                   const std::string_view* request_payload = nullptr) {
    uint64_t id = ++next_id_;
    Result<Envelope> env = Exchange(EncodeHeader(Req::kType, id, Status::Ok(), req), id, timeout, request_payload,
                                    UsesDataChannel(Req::kType));
    if (!env.ok()) return env.status();
    if (env->type != ReplyType<typename Req::Reply>::kType) {
      return Status::InvalidArgument(std::string("expected ") +
                                     TypeName(ReplyType<typename Req::Reply>::kType) + " from " +
                                     endpoint_ + ", got " + TypeName(env->type));
    }
    if (payload != nullptr && env->has_payload) *payload = std::move(env->payload);
    return BodyAs<typename Req::Reply>(*env);
  }

  // Sends raw frames and returns the decoded reply (tests use this to send garbage).
  Result<Envelope> CallRaw(std::vector<zmq::message_t> frames, uint64_t id, std::chrono::milliseconds timeout);

  // Whether calls that move chunks go over a data channel: true once one is
  // open (after the first such call to a server that has one).
  bool on_data_channel() const { return data_state_ == DataState::kOpen; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class DataState { kUnknown, kOpen, kNone };

  // Sends the header frame (and the payload frame, if any) and receives the
  // reply with the same id, over the data channel when `data` and there is
  // one. A kError reply becomes its Status.
  Result<Envelope> Exchange(const std::string& header, uint64_t id, std::chrono::milliseconds timeout,
                            const std::string_view* payload, bool data);
  // One sealed exchange; *unsealed is set when the answer came unsealed.
  // `fresh`: the session was opened for this call.
  Result<Envelope> SealedExchange(const std::string& header, uint64_t id, Clock::time_point deadline,
                                  const std::string_view* payload, bool fresh, bool* unsealed);
  // Asks for a session over CURVE; OK with data_state_ kNone if the server has no data channel.
  Status OpenDataChannel(Clock::time_point deadline);
  Result<Envelope> SendAndReceive(bool data, std::vector<zmq::message_t> frames, uint64_t id,
                                  Clock::time_point deadline, bool* unsealed, std::chrono::milliseconds connect_timeout);
  Result<Envelope> Receive(bool data, uint64_t id, Clock::time_point deadline, bool* unsealed);
  void Reconnect();
  void ConnectData();

  zmq::context_t& context_;
  std::string endpoint_;
  const std::string routing_id_;           // of every CURVE socket this client makes
  std::unique_ptr<zmq::socket_t> socket_;  // null after a failed connect
  std::string connect_error_;
  uint64_t next_id_ = 0;
  bool answered_ = false;
  bool busy_ = false;
  bool sent_ = false;       // the last exchange's request went out
  bool timed_out_ = false;  // see last_call_timed_out
  std::chrono::milliseconds connect_timeout_{std::chrono::milliseconds::max()};

  DataState data_state_ = DataState::kUnknown;
  std::unique_ptr<DataClientSession> data_session_;  // when kOpen
  std::string data_token_;                           // when kOpen: presented at the handshake
  uint64_t data_seq_ = 0;                            // the seq of the sealed request in flight
  std::string data_endpoint_;                   // when kOpen
  std::unique_ptr<zmq::socket_t> data_socket_;  // null until needed, and after a lost connection
};

// Keeps idle RpcClients per endpoint for concurrent callers.
//
//   auto lease = pool.Acquire("tcp://127.0.0.1:7101");
//   Result<proto::ChunkData> r = lease->Call(req, 500ms, &payload);
//
// Bounded: at most `max_idle_per_endpoint` idle clients per endpoint and
// `max_idle` in all; past that the least recently used idle client is
// closed. Each client holds up to two ZeroMQ sockets, and a context has 1,023
// by default: a mount that read from every node of a 1,000-node cluster
// would otherwise keep a client per node and fail to open new sockets.
//
// A closed client's routing id is kept (up to kMaxSpareIds per endpoint) and
// given to the next client the pool makes for that endpoint, so the server's
// data channel sessions stay at about the most clients this pool had open to
// it at once, however many it opens and closes over time.
//
// Thread-safety: Acquire may be called from any thread; a Lease is used by one.
class ClientPool {
 public:
  explicit ClientPool(zmq::context_t& context, size_t max_idle_per_endpoint = 16,
                      std::chrono::milliseconds connect_timeout = std::chrono::milliseconds::max(),
                      size_t max_idle = 128)
      : context_(context),
        max_idle_per_endpoint_(max_idle_per_endpoint),
        max_idle_(max_idle),
        connect_timeout_(connect_timeout) {}

  class Lease {
   public:
    Lease(ClientPool* pool, std::unique_ptr<RpcClient> client) : pool_(pool), client_(std::move(client)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (client_) pool_->Release(std::move(client_));
    }
    RpcClient* operator->() { return client_.get(); }
    RpcClient& operator*() { return *client_; }

   private:
    ClientPool* pool_;
    std::unique_ptr<RpcClient> client_;
  };

  Lease Acquire(const std::string& endpoint);

  // Routing ids of closed clients kept per endpoint (see above).
  static constexpr size_t kMaxSpareIds = 64;

  size_t idle() const;                              // idle clients in all
  size_t idle(const std::string& endpoint) const;   // ... of one endpoint

 private:
  using Lru = std::list<std::unique_ptr<RpcClient>>;  // most recently released first
  void Release(std::unique_ptr<RpcClient> client);
  // Keeps the routing id of `closed` for the endpoint's next new client.
  void KeepIdLocked(const RpcClient& closed) REQUIRES(mu_);

  zmq::context_t& context_;
  const size_t max_idle_per_endpoint_;
  const size_t max_idle_;
  std::chrono::milliseconds connect_timeout_;
  mutable Mutex mu_;
  Lru lru_ GUARDED_BY(mu_);  // every idle client
  // Per endpoint, its idle clients' places in lru_, oldest first.
  std::map<std::string, std::deque<Lru::iterator>> idle_ GUARDED_BY(mu_);
  // Per endpoint, the routing ids of closed clients, for new ones.
  std::map<std::string, std::vector<std::string>> spare_ids_ GUARDED_BY(mu_);
};

}  // namespace hoard::proto
