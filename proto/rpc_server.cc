#include "proto/rpc_server.h"

#include <unistd.h>

#include <atomic>
#include <chrono>

#include <zmq_addon.hpp>

#include "proto/access.h"
#include "proto/curve.h"

namespace hoard::proto {

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops the connection of a peer that sends a bigger frame. Our own
  // limits are lower, so a message between the two gets a proper error reply.
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxPayloadBytes + kMaxHeaderBytes));
  socket.set(zmq::sockopt::reconnect_ivl, 100);
  socket.set(zmq::sockopt::reconnect_ivl_max, 500);
}

RpcServer::RpcServer(Options options) : options_(std::move(options)) {}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::Start() {
  if (options_.context == nullptr || options_.logger == nullptr) {
    return Status::InvalidArgument("RpcServer needs a zmq context and a logger");
  }
  try {
    router_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::router);
    ConfigureSocket(*router_);
    if (Status s = ApplyServerKeys(*options_.context, *router_); !s.ok()) {
      router_.reset();
      return s.Annotate(options_.name);
    }
    secure_ = KeysFor(*options_.context) != nullptr;
    router_->bind(options_.endpoint);
    bound_endpoint_ = router_->get(zmq::sockopt::last_endpoint);
    if (secure_ && !options_.data_endpoint.empty()) {
      // No CURVE on this socket: its messages are sealed (proto/data_channel.h).
      data_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::router);
      ConfigureSocket(*data_);
      data_->bind(options_.data_endpoint);
      data_endpoint_ = data_->get(zmq::sockopt::last_endpoint);
      data_port_ = static_cast<uint32_t>(std::stoul(data_endpoint_.substr(data_endpoint_.rfind(':') + 1)));
      sessions_ = std::make_unique<DataSessions>();
    }
    // A fresh name per server: ZeroMQ releases an inproc name asynchronously,
    // so a name derived from `this` could still be taken by a server that
    // lived at the same address a moment ago.
    static std::atomic<uint64_t> next_id{0};
    reply_endpoint_ = "inproc://hoard-replies-" + std::to_string(::getpid()) + "-" + std::to_string(++next_id);
    replies_ = std::make_unique<zmq::socket_t>(*options_.context, zmq::socket_type::pull);
    replies_->set(zmq::sockopt::linger, 0);
    replies_->bind(reply_endpoint_);
  } catch (const zmq::error_t& e) {
    router_.reset();
    data_.reset();
    replies_.reset();
    return Status::Unavailable(options_.name + ": cannot listen on " + options_.endpoint +
                               (options_.data_endpoint.empty() ? "" : " and " + options_.data_endpoint) + ": " +
                               e.what());
  }
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  io_thread_ = std::thread([this] { IoLoop(); });
  return Status::Ok();
}

void RpcServer::Stop() {
  {
    // Set under mu_: a worker between checking the predicate and blocking
    // would otherwise miss the wakeup, and the join below would never return.
    std::lock_guard lock(mu_);
    if (stopping_.exchange(true)) return;
  }
  cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  if (io_thread_.joinable()) io_thread_.join();
  router_.reset();
  data_.reset();
  replies_.reset();
}

void RpcServer::IoLoop() {
  std::vector<zmq::pollitem_t> items = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                        {replies_->handle(), 0, ZMQ_POLLIN, 0}};
  if (data_) items.push_back({data_->handle(), 0, ZMQ_POLLIN, 0});
  while (!stopping_.load()) {
    try {
      zmq::poll(items, std::chrono::milliseconds(100));
      if (items[1].revents & ZMQ_POLLIN) {
        // Drain replies first, so callers get answers before new work starts.
        // A worker's first frame names the socket the request came from.
        while (true) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(*replies_, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          zmq::socket_t& to = frames[0].to_string_view() == "D" ? *data_ : *router_;
          zmq::send_multipart(to, std::span(frames).subspan(1), zmq::send_flags::dontwait);
        }
      }
      for (size_t socket : {size_t{0}, size_t{2}}) {
        if (socket >= items.size() || !(items[socket].revents & ZMQ_POLLIN)) continue;
        const bool sealed = socket == 2;
        zmq::socket_t& in = sealed ? *data_ : *router_;
        while (true) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(in, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
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
          if (frames.size() > first && !sealed) {
            const char* user = zmq_msg_gets(frames[first].handle(), "User-Id");
            job.admin = !secure_ || (user != nullptr && std::string_view(user) == kUserAdmin);
          }
          for (size_t i = first; i < frames.size(); ++i) job.frames.push_back(std::move(frames[i]));
          if (sealed && !AdmitSealed(job)) continue;
          size_t bytes = 0;
          for (const auto& f : job.frames) bytes += f.size();
          std::unique_lock lock(mu_);
          // Bounded by count and by bytes: frames up to the socket's size cap
          // are accepted before they are decoded.
          if (queue_.size() >= options_.max_queue || queued_bytes_ + bytes > options_.max_queue_bytes) {
            lock.unlock();
            std::vector<zmq::message_t> reply;
            for (auto& r : job.route) reply.push_back(std::move(r));
            reply.emplace_back(EncodeError(0, Status::Unavailable(options_.name + " is busy; retry")));
            zmq::send_multipart(in, reply, zmq::send_flags::dontwait);
            continue;
          }
          queued_bytes_ += bytes;
          job.bytes = bytes;
          queue_.push_back(std::move(job));
          lock.unlock();
          cv_.notify_one();
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
  } else if (seal->frames == 0 || seal->frames + 1 != job.frames.size()) {
    status = Status::InvalidArgument("data channel: the seal covers " + std::to_string(seal->frames) +
                                     " frames, the message has " + std::to_string(job.frames.size() - 1));
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

void RpcServer::WorkerLoop(int index) {
  zmq::socket_t out(*options_.context, zmq::socket_type::push);
  out.set(zmq::sockopt::linger, 0);
  out.connect(reply_endpoint_);
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_.load() || !queue_.empty(); });
      if (stopping_.load()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job.bytes;
    }
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
      zmq::send_multipart(out, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      options_.logger->error("{}: worker {} cannot pass a reply on: {}", options_.name, index, e.what());
    }
  }
}

bool RpcServer::Unseal(Job& job, std::string* header) {
  Status status = OpenMessage(job.session->key, SealDirection::kRequest, job.frames);
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
  job.admin = job.session->admin;
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

Result<DataChannel> RpcServer::OpenChannel(bool admin) {
  if (!sessions_) return Status::InvalidArgument(options_.name + " has no data channel");
  Result<std::shared_ptr<DataSessions::Session>> session = sessions_->Create(admin);
  if (!session.ok()) return session.status();
  const auto& key = (*session)->key;
  return DataChannel{.session = key.session, .key = std::string(key.key.begin(), key.key.end()), .port = data_port_};
}

void RpcServer::Process(Job& job, std::string* header, std::string* payload) {
  uint64_t id = 0;
  Result<Envelope> env = DecodeMessage(job.frames, &id);
  Status status;
  if (!env.ok()) {
    status = env.status();
  } else {
    if (env->type == MsgType::kOpenDataChannel && !job.from_data) {
      // Answered here, not by a handler: the key is this server's. Never over
      // the data channel itself: its key must come over CURVE.
      Result<DataChannel> channel = OpenChannel(job.admin);
      *header = channel.ok() ? EncodeHeader(MsgType::kDataChannel, id, Status::Ok(), *channel)
                             : EncodeError(id, channel.status());
      return;
    }
    auto it = handlers_.find(static_cast<uint16_t>(env->type));
    if (RequiresAdmin(env->type) && !job.admin) {
      // An answer, not bad input: no warning (the ZAP handler already
      // vouched for the key).
      *header = EncodeError(id, Status::PermissionDenied(std::string(TypeName(env->type)) +
                                                         " changes the cluster and needs the admin key"));
      return;
    }
    if (it == handlers_.end()) {
      status = Status::InvalidArgument(std::string(TypeName(env->type)) + " is not served by " + options_.name);
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

void RpcServer::LogRejected(const std::string& why) {
  // At most 10 lines a second, so garbage on the port cannot flood the log.
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard lock(log_mu_);
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
