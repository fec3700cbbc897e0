#include "proto/rpc_server.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <limits>

#include <zmq_addon.hpp>

#include "proto/access.h"
#include "proto/curve.h"
#include "proto/wire_frames.h"

namespace hoard::proto {

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops the connection of a peer that sends a bigger frame. Our own
  // limits are lower, so a message between the two gets a proper error reply.
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxPayloadBytes + kMaxHeaderBytes));
  socket.set(zmq::sockopt::reconnect_ivl, 100);
  socket.set(zmq::sockopt::reconnect_ivl_max, 500);
}

namespace {

// Every listening socket: frames in pieces (proto/wire_frames.h), so a
// connection that has not finished its handshake holds at most one piece;
// and that handshake ends within `handshake` either way.
void ConfigureListener(zmq::socket_t& socket, std::chrono::milliseconds handshake) {
  ConfigureSocket(socket);
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxWireFrameBytes));
  socket.set(zmq::sockopt::handshake_ivl, static_cast<int>(handshake.count()));
}

uint16_t PortOf(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (!endpoint.starts_with("tcp://") || colon == std::string::npos) return 0;
  unsigned port = 0;
  std::from_chars(endpoint.data() + colon + 1, endpoint.data() + endpoint.size(), port);
  return uint16_t(port);
}

}  // namespace

RpcServer::RpcServer(Options options) : options_(std::move(options)) {}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::Start() {
  if (options_.context == nullptr || options_.logger == nullptr) {
    return Status::InvalidArgument("RpcServer needs a zmq context and a logger");
  }
  try {
    router_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::router);
    ConfigureListener(*router_, kControlHandshake);
    // A client keeps its routing id across reconnects (proto/rpc_client.h):
    // its new connection takes the id over from the old one the server has
    // not seen close yet, instead of being refused until it has.
    router_->set(zmq::sockopt::router_handover, 1);
    if (Status s = ApplyServerKeys(*options_.context, *router_); !s.ok()) {
      router_.reset();
      return s.Annotate(options_.name);
    }
    secure_ = KeysFor(*options_.context) != nullptr;
    if (Status s = StartGate(*router_, kControlHandshake, &router_gate_); !s.ok()) {
      router_.reset();
      return s.Annotate(options_.name);
    }
    router_->bind(options_.endpoint);
    bound_endpoint_ = router_->get(zmq::sockopt::last_endpoint);
    router_gate_->set_port(PortOf(bound_endpoint_));
    // A fresh name per server: ZeroMQ releases an inproc name asynchronously,
    // so a name derived from `this` could still be taken by a server that
    // lived at the same address a moment ago.
    static std::atomic<uint64_t> next_id{0};
    if (secure_ && !options_.data_endpoint.empty()) {
      // No CURVE on this socket: its messages are sealed (proto/data_channel.h).
      // It admits a connection only with a live session's token (PLAIN,
      // checked by the ZAP handler), so a stranger never gets to send it a
      // message; one that does not finish its handshake goes after 2 s.
      sessions_ = std::make_unique<DataSessions>();
      plain_domain_ = "hoard-data-" + std::to_string(::getpid()) + "-" + std::to_string(++next_id);
      DataSessions* sessions = sessions_.get();
      RegisterPlainDomain(plain_domain_, [sessions](std::string_view user, std::string_view password) {
        uint64_t id = 0;
        auto [end, ec] = std::from_chars(user.data(), user.data() + user.size(), id);
        if (ec != std::errc() || end != user.data() + user.size()) return std::string();
        return sessions->CheckToken(id, password) ? DataUserId(id) : std::string();
      });
      data_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::router);
      ConfigureListener(*data_, options_.data_handshake);
      data_->set(zmq::sockopt::plain_server, 1);
      data_->set(zmq::sockopt::zap_domain, plain_domain_);
      if (Status s = StartGate(*data_, options_.data_handshake, &data_gate_); !s.ok()) {
        throw zmq::error_t();  // cleaned up below
      }
      data_->bind(options_.data_endpoint);
      data_endpoint_ = data_->get(zmq::sockopt::last_endpoint);
      data_port_ = PortOf(data_endpoint_);
      data_gate_->set_port(uint16_t(data_port_));
    }
    reply_endpoint_ = "inproc://hoard-replies-" + std::to_string(::getpid()) + "-" + std::to_string(++next_id);
    replies_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::pull);
    replies_->set(zmq::sockopt::linger, 0);
    replies_->bind(reply_endpoint_);
  } catch (const zmq::error_t& e) {
    StopGates();
    router_.reset();
    data_.reset();
    replies_.reset();
    if (!plain_domain_.empty()) UnregisterPlainDomain(plain_domain_);
    return Status::Unavailable(options_.name + ": cannot listen on " + options_.endpoint +
                               (options_.data_endpoint.empty() ? "" : " and " + options_.data_endpoint) + ": " +
                               e.what());
  }
  const size_t workers = static_cast<size_t>(std::max(1, options_.workers));
  for (size_t i = 0; i < workers; ++i) {
    worker_out_.push_back(std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::push));
    worker_out_.back()->set(zmq::sockopt::linger, 0);
    worker_out_.back()->connect(reply_endpoint_);
  }
  queue_ = std::make_unique<WorkQueue<Job>>(
      WorkQueue<Job>::Options{.name = "rpc-worker", .threads = workers, .max_items = options_.max_queue,
                              .max_cost = options_.max_queue_bytes},
      [this](Job& job, size_t index) { Serve(job, index); });
  io_thread_ = std::thread([this] { IoLoop(); });
  return Status::Ok();
}

void RpcServer::Stop() {
  if (stopping_.exchange(true)) return;
  // Workers first: the requests still queued are dropped unanswered, those
  // running finish while the I/O thread still takes their replies.
  if (queue_) queue_->Stop();
  if (io_thread_.joinable()) io_thread_.join();
  worker_out_.clear();
  StopGates();
  router_.reset();
  data_.reset();
  replies_.reset();
  if (!plain_domain_.empty()) UnregisterPlainDomain(plain_domain_);
}

Status RpcServer::StartGate(zmq::socket_t& socket, std::chrono::milliseconds handshake,
                            std::unique_ptr<HandshakeGate>* gate) {
  Result<std::unique_ptr<HandshakeGate>> g = HandshakeGate::Start(
      *options_.context, socket, {.max_pending = options_.max_pending_handshakes, .handshake_timeout = handshake});
  if (!g.ok()) return g.status();
  *gate = std::move(*g);
  return Status::Ok();
}

void RpcServer::StopGates() {
  if (router_gate_) router_gate_->Stop();
  if (data_gate_) data_gate_->Stop();
}

uint64_t RpcServer::handshakes_cut() const {
  return (router_gate_ ? router_gate_->cut() : 0) + (data_gate_ ? data_gate_->cut() : 0);
}

size_t RpcServer::handshakes_pending() const {
  return (router_gate_ ? router_gate_->pending() : 0) + (data_gate_ ? data_gate_->pending() : 0);
}

void RpcServer::IoLoop() {
  // Slots: 0 router, 1 replies, 2 data (if any), then the handshake gates'
  // monitors.
  std::vector<zmq::pollitem_t> items = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                        {replies_->handle(), 0, ZMQ_POLLIN, 0}};
  if (data_) items.push_back({data_->handle(), 0, ZMQ_POLLIN, 0});
  const size_t data_slot = data_ ? 2 : std::numeric_limits<size_t>::max();
  std::vector<HandshakeGate*> gates;
  for (HandshakeGate* g : {router_gate_.get(), data_gate_.get()}) {
    if (g == nullptr) continue;
    gates.push_back(g);
    items.push_back({g->events().handle(), 0, ZMQ_POLLIN, 0});
  }
  while (!stopping_.load()) {
    try {
      zmq::poll(items, std::chrono::milliseconds(100));
      // Every round, not only on events: a pending handshake also leaves the
      // count by growing old.
      for (HandshakeGate* g : gates) g->OnEvents(HandshakeGate::Clock::now());
      if (items[1].revents & ZMQ_POLLIN) {
        // Drain replies first, so callers get answers before new work starts.
        // A worker's first frame names the socket the request came from.
        while (true) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(*replies_, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          zmq::socket_t& to = frames[0].to_string_view() == "D" ? *data_ : *router_;
          zmq::send_multipart(to, std::span(frames).subspan(1), zmq::send_flags::dontwait);
          if (options_.on_reply_sent) options_.on_reply_sent();
        }
      }
      for (size_t socket : {size_t{0}, data_slot}) {
        if (socket >= items.size() || !(items[socket].revents & ZMQ_POLLIN)) continue;
        const bool sealed = socket == data_slot;
        zmq::socket_t& in = sealed ? *data_ : *router_;
        HandshakeGate* gate = sealed ? data_gate_.get() : router_gate_.get();
        while (true) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(in, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          if (gate != nullptr && gate->watching() && frames.size() > 1) {
            gate->Delivered(zmq_msg_get(frames[1].handle(), ZMQ_SRCFD));
          }
          Job job;
          job.from_data = sealed;
          job.route.push_back(std::move(frames[0]));
          size_t first = 1;
          if (frames.size() > 1 && frames[1].size() == 0) {  // REQ-style delimiter
            job.route.push_back(std::move(frames[1]));
            first = 2;
          }
          // The User-Id the ZAP handler gave the connection rides on every
          // frame it delivers (not on the identity ROUTER made up).
          if (frames.size() > first) {
            const char* user = zmq_msg_gets(frames[first].handle(), "User-Id");
            if (sealed) job.user = user != nullptr ? user : "";
            else job.key_class = !secure_ ? KeyClass::kInsecure : KeyClassOfUser(user);
          }
          for (size_t i = first; i < frames.size(); ++i) job.frames.push_back(std::move(frames[i]));
          if (sealed && !AdmitSealed(job)) continue;
          size_t bytes = 0;
          for (const auto& f : job.frames) bytes += f.size();
          job.bytes = bytes;
          // Bounded by count and by bytes: frames up to the socket's size cap
          // are accepted before they are decoded. (WorkQueue would take one
          // request over max_queue_bytes into an empty queue; not here.)
          if (bytes > options_.max_queue_bytes || !queue_->Push(std::move(job), bytes)) {
            if (stopping_.load()) continue;  // Stop dropped the queue: no answer, as for those queued
            std::vector<zmq::message_t> reply;
            for (auto& r : job.route) reply.push_back(std::move(r));
            reply.emplace_back(EncodeError(0, Status::Unavailable(options_.name + " is busy; retry")));
            zmq::send_multipart(in, reply, zmq::send_flags::dontwait);
          }
        }
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      options_.logger->error("{}: socket error: {}", options_.name, e.what());
    }
  }
}

bool RpcServer::AdmitSealed(Job& job) {
  Status status;
  if (job.frames.empty()) {
    status = Status::InvalidArgument("empty message on the data channel");
  } else if (Result<SealInfo> seal = ParseSeal(job.frames[0].to_string_view()); !seal.ok()) {
    status = seal.status().Annotate("data channel");
  } else if (Result<size_t> n = FramesAfterJoin(job.frames, 1); !n.ok()) {
    status = n.status().Annotate("data channel");
  } else if (seal->frames == 0 || seal->frames != *n) {
    status = Status::InvalidArgument("data channel: the seal covers " + std::to_string(seal->frames) +
                                     " frames, the message has " + std::to_string(*n));
  } else if (job.user != DataUserId(seal->session)) {
    // A connection may only speak for the session it was admitted with.
    status = Status::PermissionDenied("data channel: a message sealed for another session than the connection's");
  } else if (!(job.session = sessions_->Find(seal->session))) {
    // Not bad input: the session was evicted, or this server restarted. The
    // client opens a new one when it sees an unsealed answer other than
    // kUnavailable, which is "busy" (the queue is full), not "forgotten".
    status = Status::NotFound("data channel: no such session on " + options_.name);
  } else {
    job.seal = *seal;
    return true;
  }
  if (status.code() != Code::kNotFound) {
    rejected_.fetch_add(1);
    LogRejected(status.ToString());
  }
  std::vector<zmq::message_t> reply;
  for (auto& r : job.route) reply.push_back(std::move(r));
  reply.emplace_back(EncodeError(0, status));
  zmq::send_multipart(*data_, reply, zmq::send_flags::dontwait);
  return false;
}

void RpcServer::Serve(Job& job, size_t index) {
  if (stopping_.load()) return;  // Stop began: like a queued request, not answered
  std::string header, payload;
  try {
    if (!job.session || Unseal(job, &header)) Process(job, &header, &payload);
  } catch (const std::exception& e) {
    // A handler must never take the daemon down (bad_alloc on a huge
    // request, a library throwing): answer, log, keep serving.
    options_.logger->error("{}: request failed with an exception: {}", options_.name, e.what());
    payload.clear();
    header = EncodeError(0, Status::Internal(std::string("server error: ") + e.what()));
  }
  std::vector<zmq::message_t> reply = ReplyFrames(job, std::move(header), std::move(payload));
  try {
    zmq::send_multipart(*worker_out_[index], reply);
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return;  // the context is going away with the server
    options_.logger->error("{}: worker {} cannot pass a reply on: {}", options_.name, index, e.what());
  }
}

bool RpcServer::Unseal(Job& job, std::string* header) {
  // Joined here, on a worker, not on the I/O thread: a chunk is a 64 MiB copy.
  Status status = FromWire(job.frames, 1);
  if (status.ok()) status = OpenMessage(job.session->key, SealDirection::kRequest, job.frames);
  if (status.ok() && !DataSessions::Accept(*job.session, job.seal.seq)) {
    status = Status::PermissionDenied("data channel: request id " + std::to_string(job.seal.seq) + " replayed");
  }
  if (!status.ok()) {
    rejected_.fetch_add(1);
    LogRejected(status.ToString());
    *header = EncodeError(0, status);
    job.session.reset();  // answer unsealed: the client cannot trust this session any more
    return false;
  }
  job.key_class = job.session->key_class;
  return true;
}

std::vector<zmq::message_t> RpcServer::ReplyFrames(Job& job, std::string header, std::string payload) {
  std::vector<zmq::message_t> reply;
  reply.emplace_back(job.from_data ? "D" : "C", 1);
  for (auto& r : job.route) reply.push_back(std::move(r));
  if (job.session) {
    std::vector<SealIo> io = {SealInPlace(header)};
    if (!payload.empty()) io.push_back(SealInPlace(payload));
    Result<std::string> seal = Seal(job.session->key, SealDirection::kReply, job.seal.seq, io);
    if (seal.ok()) {
      reply.emplace_back(seal->data(), seal->size());
    } else {
      header = EncodeError(0, seal.status());
      payload.clear();
    }
  }
  reply.emplace_back(header.data(), header.size());
  if (!payload.empty()) {
    // Hand the payload's buffer to ZeroMQ instead of copying it (chunks are MiBs).
    auto* owned = new std::string(std::move(payload));
    reply.emplace_back(owned->data(), owned->size(),
                       [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
  }
  return reply;
}

Result<DataChannel> RpcServer::OpenChannel(KeyClass key_class, const std::string& owner) {
  if (!sessions_) return Status::InvalidArgument(options_.name + " has no data channel");
  Result<std::shared_ptr<DataSessions::Session>> session = sessions_->Create(key_class, owner);
  if (!session.ok()) return session.status();
  const auto& key = (*session)->key;
  return DataChannel{.session = key.session, .key = std::string(key.key.begin(), key.key.end()), .port = data_port_,
                     .token = (*session)->token};
}

void RpcServer::Process(Job& job, std::string* header, std::string* payload) {
  uint64_t id = 0;
  Status joined = job.session ? Status::Ok() : FromWire(job.frames);  // Unseal joined a sealed one
  Result<Envelope> env = joined.ok() ? DecodeMessage(job.frames, &id) : Result<Envelope>(joined);
  Status status;
  if (!env.ok()) {
    status = env.status();
  } else {
    if (env->type == MsgType::kOpenDataChannel && !job.from_data) {
      // Answered here, not by a handler: the key is this server's. Never over
      // the data channel itself: its key must come over CURVE.
      // One session per client routing id: a new one replaces its own old
      // one (the same client reconnected, or a pool's new client with a
      // closed one's id: proto/rpc_client.h), never another client's.
      Result<DataChannel> channel = OpenChannel(job.key_class, job.route.empty() ? "" : job.route[0].to_string());
      *header = channel.ok() ? EncodeHeader(MsgType::kDataChannel, id, Status::Ok(), *channel)
                             : EncodeError(id, channel.status());
      return;
    }
    auto it = handlers_.find(static_cast<uint16_t>(env->type));
    if (!MayCall(job.key_class, env->type)) {
      // An answer, not bad input: no warning (the ZAP handler already
      // vouched for the key).
      *header = EncodeError(id, Status::PermissionDenied(std::string(TypeName(env->type)) + " needs " +
                                                         NeededKey(env->type) + "; this connection has the " +
                                                         KeyClassName(job.key_class) + " key"));
      return;
    }
    env->key_class = job.key_class;
    if (it == handlers_.end()) {
      status = Status::InvalidArgument(std::string(TypeName(env->type)) + " is not served by " + options_.name);
    } else if (Status gated = gate_ ? gate_(static_cast<uint16_t>(env->type)) : Status::Ok(); !gated.ok()) {
      // An answer, like a handler's error (a standby naming the leader).
      *header = EncodeError(id, gated);
      return;
    } else {
      bool malformed = false;
      status = it->second(*env, header, payload, &malformed);
      if (status.ok()) return;
      if (!malformed) {
        // A handler's own error is an answer, not bad input: no warning.
        payload->clear();
        *header = EncodeError(id, status);
        return;
      }
    }
  }
  rejected_.fetch_add(1);
  LogRejected(status.ToString());
  payload->clear();
  *header = EncodeError(id, status);
}

size_t RpcServer::queued() const { return queue_ ? queue_->queued() : 0; }

void RpcServer::LogRejected(const std::string& why) {
  // At most 10 lines a second, so garbage on the port cannot flood the log.
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  MutexLock lock(&log_mu_);
  if (now != log_window_start_) {
    if (log_count_ > 10) {
      options_.logger->warn("{}: {} more malformed requests not logged", options_.name, log_count_ - 10);
    }
    log_window_start_ = now;
    log_count_ = 0;
  }
  if (++log_count_ <= 10) options_.logger->warn("{}: rejected a request: {}", options_.name, why);
}

}  // namespace hoard::proto
