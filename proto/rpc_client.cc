#include "proto/rpc_client.h"

#include <algorithm>

#include <zmq_addon.hpp>

#include "proto/curve.h"
#include "proto/rpc_server.h"

namespace hoard::proto {

using Clock = std::chrono::steady_clock;

// How often a waiting call checks that its connection is still up.
constexpr std::chrono::milliseconds kConnectionCheck{25};

RpcClient::RpcClient(zmq::context_t& context, std::string endpoint)
    : context_(context), endpoint_(std::move(endpoint)) {
  Reconnect();
}

void RpcClient::Reconnect() {
  socket_.reset();
  try {
    auto s = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    ConfigureSocket(*s);
    ApplyClientKeys(context_, *s);
    // Queue only to connected peers: a send to a dead peer waits (up to the
    // call's deadline) instead of buffering for a peer that may never return.
    s->set(zmq::sockopt::immediate, 1);
    s->set(zmq::sockopt::tcp_maxrt, kUnackedTimeoutMs);  // TCP_USER_TIMEOUT on Linux
    s->set(zmq::sockopt::tcp_keepalive, 1);
    s->set(zmq::sockopt::tcp_keepalive_idle, kKeepaliveIdleS);
    s->set(zmq::sockopt::tcp_keepalive_intvl, 1);
    s->set(zmq::sockopt::tcp_keepalive_cnt, 1);
    s->connect(endpoint_);
    socket_ = std::move(s);
    connect_error_.clear();
  } catch (const zmq::error_t& e) {
    // A malformed endpoint (from a peer's registration) or no file
    // descriptors left: every call fails cleanly instead of throwing.
    connect_error_ = e.what();
  }
}

Result<Envelope> RpcClient::Exchange(std::string header, uint64_t id, std::chrono::milliseconds timeout,
                                     const std::string_view* payload) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) frames.emplace_back(payload->data(), payload->size());
  return CallRaw(std::move(frames), id, timeout);
}

Result<Envelope> RpcClient::CallRaw(std::vector<zmq::message_t> frames, uint64_t id,
                                    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  answered_ = false;
  if (!socket_) Reconnect();
  if (!socket_) return Status::Unavailable("cannot connect to '" + endpoint_ + "': " + connect_error_);
  try {
    const auto connect = std::min(timeout, connect_timeout_);
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, connect);
    if (!(item.revents & ZMQ_POLLOUT)) {
      return Status::Unavailable("cannot reach " + endpoint_ + " within " + std::to_string(connect.count()) +
                                 " ms");
    }
    if (!zmq::send_multipart(*socket_, frames, zmq::send_flags::dontwait)) {
      return Status::Unavailable("cannot send to " + endpoint_);
    }
  } catch (const zmq::error_t& e) {
    Reconnect();
    return Status::Unavailable("send to " + endpoint_ + ": " + e.what());
  }
  return Receive(id, deadline);
}

Result<Envelope> RpcClient::Receive(uint64_t id, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Status::Unavailable("no reply from " + endpoint_ + " in time");
    }
    std::vector<zmq::message_t> frames;
    try {
      zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::min(left, kConnectionCheck));
      if (!(item.revents & ZMQ_POLLIN)) {
        // With ZMQ_IMMEDIATE the socket is writable only while a connection
        // is up. Once it dropped (the peer's process died, or heartbeats
        // timed out) the request is lost: the peer answers on the connection
        // it came in on, so waiting out the deadline would only stall the
        // caller. A reconnect takes reconnect_ivl (100 ms), longer than one
        // check, so a drop is seen before a new connection hides it.
        if (!(socket_->get(zmq::sockopt::events) & ZMQ_POLLOUT)) {
          Reconnect();  // a fresh socket: no stale reply can reach the next call
          return Status::Unavailable("connection to " + endpoint_ + " lost while waiting for the reply");
        }
        continue;
      }
      if (!zmq::recv_multipart(*socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) continue;
    } catch (const zmq::error_t& e) {
      Reconnect();
      return Status::Unavailable("receive from " + endpoint_ + ": " + e.what());
    }
    if (!frames.empty() && frames[0].size() == 0) frames.erase(frames.begin());  // delimiter
    uint64_t got_id = 0;
    Result<Envelope> env = DecodeMessage(frames, &got_id);
    // A reply with another id answers an earlier call that timed out. Id 0 is
    // a server that could not read our id (busy, or our header was bad).
    if (got_id != id && got_id != 0) continue;
    answered_ = true;
    if (!env.ok()) return env.status().Annotate("bad reply from " + endpoint_);
    if (env->type == MsgType::kError || !env->status.ok()) {
      if (env->status.ok()) return Status::Internal("error reply without a status from " + endpoint_);
      return env->status;
    }
    return env;
  }
}

ClientPool::Lease ClientPool::Acquire(const std::string& endpoint) {
  {
    std::lock_guard lock(mu_);
    auto& idle = idle_[endpoint];
    if (!idle.empty()) {
      auto client = std::move(idle.back());
      idle.pop_back();
      return Lease(this, std::move(client));
    }
  }
  auto client = std::make_unique<RpcClient>(context_, endpoint);
  client->set_connect_timeout(connect_timeout_);
  return Lease(this, std::move(client));
}

void ClientPool::Release(std::unique_ptr<RpcClient> client) {
  std::lock_guard lock(mu_);
  auto& idle = idle_[client->endpoint()];
  if (idle.size() < max_idle_) idle.push_back(std::move(client));
}

}  // namespace hoard::proto
