#include "proto/rpc_client.h"

#include <algorithm>
#include <cstring>
#include <random>

#include <zmq_addon.hpp>

#include "proto/curve.h"
#include "proto/wire_frames.h"
#include "proto/rpc_server.h"

namespace hoard::proto {

// How often a waiting call checks that its connection is still up.
constexpr std::chrono::milliseconds kConnectionCheck{25};
// How long an established data channel may take to (re)connect.
constexpr std::chrono::milliseconds kDataReconnectWait{300};

namespace {

// 16 random bytes, the first not zero (ZeroMQ reserves ids starting with 0).
std::string RandomRoutingId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id(16, '\0');
  for (size_t i = 0; i < id.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(id.data() + i, &r, 8);
  }
  if (id[0] == '\0') id[0] = 1;
  return id;
}

}  // namespace

RpcClient::RpcClient(zmq::context_t& context, std::string endpoint, std::string routing_id)
    : context_(context),
      endpoint_(std::move(endpoint)),
      routing_id_(routing_id.empty() ? RandomRoutingId() : std::move(routing_id)) {
  Reconnect();
}

namespace {

// A DEALER with hoard's options; CURVE keys only for the control socket.
std::unique_ptr<zmq::socket_t> MakeSocket(zmq::context_t& context, const std::string& endpoint, bool curve,
                                          std::unique_ptr<zmq::socket_t> s = nullptr) {
  if (s == nullptr) s = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
  ConfigureSocket(*s);
  if (curve) ApplyClientKeys(context, *s);
  // Queue only to connected peers: a send to a dead peer waits (up to the
  // call's deadline) instead of buffering for a peer that may never return.
  s->set(zmq::sockopt::immediate, 1);
  s->set(zmq::sockopt::tcp_maxrt, kUnackedTimeoutMs);  // TCP_USER_TIMEOUT on Linux
  s->set(zmq::sockopt::tcp_keepalive, 1);
  s->set(zmq::sockopt::tcp_keepalive_idle, kKeepaliveIdleS);
  s->set(zmq::sockopt::tcp_keepalive_intvl, 1);
  s->set(zmq::sockopt::tcp_keepalive_cnt, 1);
  s->connect(endpoint);
  return s;
}

}  // namespace

void RpcClient::Reconnect() {
  socket_.reset();
  try {
    // The same routing id on every reconnect: the server's data channel
    // session for it is replaced, not doubled (proto/data_channel.h).
    auto s = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::routing_id, zmq::const_buffer(routing_id_.data(), routing_id_.size()));
    socket_ = MakeSocket(context_, endpoint_, /*curve=*/true, std::move(s));
    connect_error_.clear();
  } catch (const zmq::error_t& e) {
    // A malformed endpoint (from a peer's registration) or no file
    // descriptors left: every call fails cleanly instead of throwing.
    connect_error_ = e.what();
  }
}

void RpcClient::ConnectData() {
  data_socket_.reset();
  try {
    // The data socket admits us at the handshake only with our session's
    // token (proto/data_channel.h): set before connect, so every
    // (re)connection of this socket presents it.
    auto s = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::plain_username, std::to_string(data_session_->key().session));
    s->set(zmq::sockopt::plain_password, data_token_);
    data_socket_ = MakeSocket(context_, data_endpoint_, /*curve=*/false, std::move(s));
  } catch (const zmq::error_t& e) {
    connect_error_ = e.what();
  }
}

Result<Envelope> RpcClient::Exchange(const std::string& header, uint64_t id, std::chrono::milliseconds timeout,
                                     const std::string_view* payload, bool data) {
  const auto deadline = Clock::now() + timeout;
  if (data && data_state_ != DataState::kNone && KeysFor(context_) != nullptr) {
    // Twice at most: the second time with a new session, when the first
    // answer came unsealed (the server forgot our session) or the data port
    // did not answer while the server's CURVE port does (it restarted, on
    // another data port).
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool fresh = data_state_ == DataState::kUnknown;
      if (fresh) {
        if (Status s = OpenDataChannel(deadline); !s.ok()) return s;
        if (data_state_ == DataState::kNone) break;
      }
      bool unsealed = false;
      Result<Envelope> env = SealedExchange(header, id, deadline, payload, fresh, &unsealed);
      if (unsealed) {
        data_state_ = DataState::kUnknown;
        if (attempt == 1) return env;
        continue;
      }
      // Sent and then lost (the server died, or its host vanished): that is
      // the call's answer; a retry would only add to the wait.
      if (env.ok() || answered_ || sent_) return env;
      const bool server_up = socket_ && (socket_->get(zmq::sockopt::events) & ZMQ_POLLOUT);
      if (!server_up) return env;  // the server is gone, not just its data port
      data_state_ = DataState::kUnknown;
      // A data port that a new session cannot reach either (a firewall): this
      // client stays on CURVE, slower but working.
      if (fresh) {
        data_state_ = DataState::kNone;
        break;
      }
    }
  }
  std::vector<zmq::message_t> frames;
  frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) frames.emplace_back(payload->data(), payload->size());
  bool unsealed = false;
  return SendAndReceive(false, std::move(frames), id, deadline, &unsealed, connect_timeout_);
}

Status RpcClient::OpenDataChannel(Clock::time_point deadline) {
  const size_t colon = endpoint_.rfind(':');
  if (!endpoint_.starts_with("tcp://") || colon == std::string::npos) {
    data_state_ = DataState::kNone;  // ipc:// or inproc://: nothing to gain
    return Status::Ok();
  }
  const uint64_t id = ++next_id_;
  const std::string header = EncodeHeader(MsgType::kOpenDataChannel, id, Status::Ok(), proto::OpenDataChannel{});
  std::vector<zmq::message_t> frames;
  frames.emplace_back(header.data(), header.size());
  bool unsealed = false;
  Result<Envelope> env = SendAndReceive(false, std::move(frames), id, deadline, &unsealed, connect_timeout_);
  if (!env.ok()) {
    // Not answered, or busy: ask again at the next call.
    if (!answered_ || env.status().code() == Code::kUnavailable) return env.status();
    // The server answered but has no data channel (or could not open one).
    data_state_ = DataState::kNone;
    return Status::Ok();
  }
  Result<DataChannel> channel =
      env->type == MsgType::kDataChannel ? BodyAs<DataChannel>(*env) : Status::InvalidArgument("not a DataChannel");
  if (!channel.ok() || channel->key.size() != kDataKeyBytes || channel->port == 0 || channel->port > 65535 ||
      channel->token.empty()) {
    // A server from before tokens (or a broken one): CURVE only.
    data_state_ = DataState::kNone;
    return Status::Ok();
  }
  DataKey key{.session = channel->session};
  std::copy(channel->key.begin(), channel->key.end(), key.key.begin());
  data_session_ = std::make_unique<DataClientSession>(key);
  data_token_ = channel->token;
  // A new session is a new handshake (its token): a new connection.
  data_endpoint_ = endpoint_.substr(0, colon + 1) + std::to_string(channel->port);
  ConnectData();
  data_state_ = DataState::kOpen;
  return Status::Ok();
}

Result<Envelope> RpcClient::SealedExchange(const std::string& header, uint64_t id, Clock::time_point deadline,
                                           const std::string_view* payload, bool fresh, bool* unsealed) {
  // Sealed straight into the frames ZeroMQ sends: the one pass over the bytes
  // that replaces the copy a plain send makes.
  std::vector<zmq::message_t> frames;
  // Never reallocated below: a frame of up to 33 bytes keeps its bytes inside
  // the message_t itself, so moving it would leave `io` pointing at nothing.
  frames.reserve(3);
  frames.emplace_back();  // the seal, below
  frames.emplace_back(header.size());
  std::vector<SealIo> io = {{reinterpret_cast<const uint8_t*>(header.data()),
                             static_cast<uint8_t*>(frames.back().data()), header.size()}};
  if (payload != nullptr) {
    frames.emplace_back(payload->size());
    io.push_back({reinterpret_cast<const uint8_t*>(payload->data()), static_cast<uint8_t*>(frames.back().data()),
                  payload->size()});
  }
  // The nonce comes from the session's own counter, never from the caller.
  data_seq_ = data_session_->NextSeq();
  Result<std::string> seal = Seal(data_session_->key(), SealDirection::kRequest, data_seq_, io);
  if (!seal.ok()) return seal.status();
  frames[0].rebuild(seal->data(), seal->size());
  // A data socket that was connected before and is not now may point at a
  // port the server no longer has (it restarted): a short wait, then a new
  // session (Exchange) tells.
  return SendAndReceive(true, std::move(frames), id, deadline, unsealed,
                        fresh ? connect_timeout_ : std::min(connect_timeout_, kDataReconnectWait));
}

Result<Envelope> RpcClient::CallRaw(std::vector<zmq::message_t> frames, uint64_t id,
                                    std::chrono::milliseconds timeout) {
  bool unsealed = false;
  return SendAndReceive(false, std::move(frames), id, Clock::now() + timeout, &unsealed, connect_timeout_);
}

Result<Envelope> RpcClient::SendAndReceive(bool data, std::vector<zmq::message_t> frames, uint64_t id,
                                           Clock::time_point deadline, bool* unsealed,
                                           std::chrono::milliseconds connect_timeout) {
  answered_ = false;
  busy_ = false;
  sent_ = false;
  timed_out_ = false;
  std::unique_ptr<zmq::socket_t>& socket = data ? data_socket_ : socket_;
  const std::string& endpoint = data ? data_endpoint_ : endpoint_;
  if (!socket) data ? ConnectData() : Reconnect();
  if (!socket) return Status::Unavailable("cannot connect to '" + endpoint + "': " + connect_error_);
  try {
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    const auto connect = std::min(left, connect_timeout);
    zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, connect);
    if (!(item.revents & ZMQ_POLLOUT)) {
      return Status::Unavailable("cannot reach " + endpoint + " within " + std::to_string(connect.count()) + " ms");
    }
    // A server takes frames of kMaxWireFrameBytes at most: bigger ones go in
    // pieces (after a data channel's seal, which stays whole).
    frames = ToWire(std::move(frames), data ? 1 : 0);
    if (!zmq::send_multipart(*socket, frames, zmq::send_flags::dontwait)) {
      return Status::Unavailable("cannot send to " + endpoint);
    }
    sent_ = true;
  } catch (const zmq::error_t& e) {
    data ? ConnectData() : Reconnect();
    return Status::Unavailable("send to " + endpoint + ": " + e.what());
  }
  return Receive(data, id, deadline, unsealed);
}

Result<Envelope> RpcClient::Receive(bool data, uint64_t id, Clock::time_point deadline, bool* unsealed) {
  std::unique_ptr<zmq::socket_t>& socket = data ? data_socket_ : socket_;
  const std::string& endpoint = data ? data_endpoint_ : endpoint_;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out_ = true;
      return Status::Unavailable("no reply from " + endpoint + " in time");
    }
    std::vector<zmq::message_t> frames;
    try {
      zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::min(left, kConnectionCheck));
      if (!(item.revents & ZMQ_POLLIN)) {
        // With ZMQ_IMMEDIATE the socket is writable only while a connection
        // is up. Once it dropped (the peer's process died, or heartbeats
        // timed out) the request is lost: the peer answers on the connection
        // it came in on, so waiting out the deadline would only stall the
        // caller. A reconnect takes reconnect_ivl (100 ms), longer than one
        // check, so a drop is seen before a new connection hides it.
        if (!(socket->get(zmq::sockopt::events) & ZMQ_POLLOUT)) {
          data ? ConnectData() : Reconnect();  // a fresh socket: no stale reply can reach the next call
          return Status::Unavailable("connection to " + endpoint + " lost while waiting for the reply");
        }
        continue;
      }
      if (!zmq::recv_multipart(*socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) continue;
    } catch (const zmq::error_t& e) {
      data ? ConnectData() : Reconnect();
      return Status::Unavailable("receive from " + endpoint + ": " + e.what());
    }
    if (!frames.empty() && frames[0].size() == 0) frames.erase(frames.begin());  // delimiter
    const bool sealed = data && !frames.empty() && LooksSealed(frames[0].to_string_view());
    // Servers send replies whole; pieces (proto/wire_frames.h) could only be
    // in a plain reply, whose header is never mistaken for a layout (a sealed
    // one's ciphertext could be).
    if (Status joined = sealed ? Status::Ok() : FromWire(frames); !joined.ok()) {
      answered_ = true;
      *unsealed = data;
      return joined.Annotate("bad reply from " + endpoint);
    }
    if (sealed) {
      Result<SealInfo> seal = ParseSeal(frames[0].to_string_view());
      if (seal.ok() && seal->seq != data_seq_) continue;  // answers an earlier call that timed out
      Status opened = seal.ok() ? OpenMessage(data_session_->key(), SealDirection::kReply, frames) : seal.status();
      answered_ = true;
      if (!opened.ok()) {
        *unsealed = true;  // not from our server as we know it: start over with a new session
        return opened.Annotate("reply from " + endpoint);
      }
    }
    uint64_t got_id = 0;
    Result<Envelope> env = DecodeMessage(frames, &got_id);
    // A reply with another id answers an earlier call that timed out. Id 0 is
    // a server that could not read our id (busy, or our header was bad).
    if (got_id != id && got_id != 0) continue;
    answered_ = true;
    busy_ = got_id == 0 && env.ok() && env->status.code() == Code::kUnavailable;
    // Only errors come unsealed on the data channel: the server could not
    // open our request (a session it does not know: start a new one), or
    // was busy (kUnavailable: our session is fine, the caller retries).
    *unsealed = data && !sealed && !(env.ok() && env->status.code() == Code::kUnavailable);
    if (!env.ok()) return env.status().Annotate("bad reply from " + endpoint);
    if (data && !sealed && !busy_) {
      // Anyone could have sent it: it only says "start over with a new
      // session", never what the error was (a reader must not see an
      // unsealed "no space" or "permission denied" as the answer).
      return Status::Unavailable("unsealed " + std::string(TypeName(env->type)) + " from the data channel of " +
                                 endpoint + (env->status.ok() ? "" : " (" + env->status.ToString() + ")"));
    }
    if (env->type == MsgType::kError || !env->status.ok()) {
      if (env->status.ok()) return Status::Internal("error reply without a status from " + endpoint);
      return env->status;
    }
    return env;
  }
}

ClientPool::Lease ClientPool::Acquire(const std::string& endpoint) {
  {
    MutexLock lock(&mu_);
    auto it = idle_.find(endpoint);
    if (it != idle_.end() && !it->second.empty()) {
      // The most recently released one: its connection is the likeliest alive.
      Lru::iterator place = it->second.back();
      it->second.pop_back();
      std::unique_ptr<RpcClient> client = std::move(*place);
      lru_.erase(place);
      if (it->second.empty()) idle_.erase(it);
      return Lease(this, std::move(client));
    }
  }
  std::string id;  // a closed client's, if any: its server session is replaced
  {
    MutexLock lock(&mu_);
    if (auto spare = spare_ids_.find(endpoint); spare != spare_ids_.end()) {
      id = std::move(spare->second.back());
      spare->second.pop_back();
      if (spare->second.empty()) spare_ids_.erase(spare);
    }
  }
  auto client = std::make_unique<RpcClient>(context_, endpoint, std::move(id));
  client->set_connect_timeout(connect_timeout_);
  return Lease(this, std::move(client));
}

void ClientPool::KeepIdLocked(const RpcClient& closed) {
  std::vector<std::string>& ids = spare_ids_[closed.endpoint()];
  if (ids.size() < kMaxSpareIds) ids.push_back(closed.routing_id());
}

void ClientPool::Release(std::unique_ptr<RpcClient> client) {
  std::unique_ptr<RpcClient> closed;  // destroyed after the lock is released
  MutexLock lock(&mu_);
  auto& mine = idle_[client->endpoint()];
  if (mine.size() >= max_idle_per_endpoint_) {
    KeepIdLocked(*client);
    closed = std::move(client);
    return;
  }
  lru_.push_front(std::move(client));
  mine.push_back(lru_.begin());
  if (lru_.size() <= max_idle_) return;
  // The least recently used idle client is the oldest of its endpoint's.
  Lru::iterator oldest = std::prev(lru_.end());
  auto it = idle_.find((*oldest)->endpoint());
  it->second.pop_front();
  if (it->second.empty()) idle_.erase(it);
  KeepIdLocked(**oldest);
  closed = std::move(*oldest);
  lru_.erase(oldest);
}

size_t ClientPool::idle() const {
  MutexLock lock(&mu_);
  return lru_.size();
}

size_t ClientPool::idle(const std::string& endpoint) const {
  MutexLock lock(&mu_);
  auto it = idle_.find(endpoint);
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace hoard::proto
