#include "consensus/etcd_kv.h"

#include "common/units.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "consensus/base64.h"

namespace hoard {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;

// The largest reply read: a range of every key hoard keeps fits many times.
constexpr uint64_t kMaxReplyBytes = 512ull << 20;
// Idle keep-alive connections kept per member.
constexpr size_t kIdlePerMember = 4;

// Runs the operation started on `ioc` to its completion: every operation is
// on a beast::tcp_stream with an expiry, so it completes, at the latest with
// beast::error::timeout.
void RunUntilDone(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

// Whether a kept-alive connection was closed by its member while it sat idle
// (a FIN or RST arrived: recv sees the end, or an error), or has bytes nobody
// asked for. Such a connection is dropped before a request is written on it,
// so that a request is not sent where it cannot be answered (a Txn sent is a
// Txn that may have been applied).
bool UnusableWhileIdle(tcp::socket& socket) {
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

std::string B64(const std::string& bytes) { return Base64Encode(bytes); }

// etcd's 64-bit integers are JSON strings (numbers accepted too); absent is
// 0. T is int64_t, or uint64_t for member ids, which use all 64 bits.
template <typename T>
T Int(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<T>();
  T v = 0;
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    std::from_chars(s.data(), s.data() + s.size(), v);
  }
  return v;
}
int64_t I64(const json& j, const char* name) { return Int<int64_t>(j, name); }
uint64_t U64(const json& j, const char* name) { return Int<uint64_t>(j, name); }

// A string field; "" when absent or not a string (json::value would throw).
std::string Str(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An object field; an empty object when absent.
const json& Obj(const json& j, const char* name) {
  static const json kEmpty = json::object();
  auto it = j.find(name);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}

// An array field; an empty array when absent.
const json& Arr(const json& j, const char* name) {
  static const json kEmpty = json::array();
  auto it = j.find(name);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

bool Bool(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

Result<std::string> Bytes(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) return std::string();
  return Base64Decode(it->get_ref<const std::string&>());
}

Result<KvPair> ParseKv(const json& j) {
  KvPair p;
  HOARD_ASSIGN_OR_RETURN(p.key, Bytes(j, "key"));
  HOARD_ASSIGN_OR_RETURN(p.value, Bytes(j, "value"));
  p.create_revision = I64(j, "create_revision");
  p.mod_revision = I64(j, "mod_revision");
  p.version = I64(j, "version");
  p.lease = I64(j, "lease");
  return p;
}

Result<std::vector<KvPair>> ParseKvs(const json& j) {
  std::vector<KvPair> out;
  for (const auto& kv : Arr(j, "kvs")) {
    HOARD_ASSIGN_OR_RETURN(KvPair p, ParseKv(kv));
    out.push_back(std::move(p));
  }
  return out;
}

int64_t HeaderRevision(const json& j) { return I64(Obj(j, "header"), "revision"); }

// The Status for an error etcd gave: its message first (the few kv.h names),
// then its gRPC code.
Status EtcdError(const std::string& where, int grpc_code, const std::string& message) {
  const std::string text = "etcd " + where + ": " + message;
  const auto has = [&](const char* s) { return message.find(s) != std::string::npos; };
  if (has("requested lease not found")) return Status::NotFound(text);
  if (has("required revision has been compacted")) return Status::Stale(text);
  if (has("request is too large")) return Status::InvalidArgument(text);
  if (has("database space exceeded")) return Status::NoSpace(text);
  switch (grpc_code) {
    case 3:   // InvalidArgument
    case 8:   // ResourceExhausted: above gRPC's message limit
    case 9:   // FailedPrecondition
    case 11:  // OutOfRange: a future revision
      return Status::InvalidArgument(text);
    case 5: return Status::NotFound(text);
    case 1:   // Canceled
    case 4:   // DeadlineExceeded
    case 10:  // Aborted
    case 14:  // Unavailable: no leader, request timed out inside etcd
      return Status::Unavailable(text);
    case 7:   // PermissionDenied
    case 16:  // Unauthenticated
      return Status::PermissionDenied(text + " (hoard does not support etcd's authentication)");
    default: return Status::Internal(text);
  }
}

// An error reply: {"error": "...", "code": N, "message": "..."} for a unary
// call, {"error": {"grpc_code": N, "message": "..."}} inside a stream.
Status ErrorFromJson(const std::string& where, const json& j) {
  const json& e = j.at("error");
  if (e.is_object()) {
    return EtcdError(where, static_cast<int>(I64(e, "grpc_code")), Str(e, "message"));
  }
  std::string message = Str(j, "message");
  if (message.empty() && e.is_string()) message = e.get<std::string>();
  return EtcdError(where, static_cast<int>(I64(j, "code")), message);
}

Status ErrorFromReply(const std::string& where, unsigned http_status, const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) return ErrorFromJson(where, j);
  return Status::Internal("etcd " + where + ": HTTP " + std::to_string(http_status) + ": " + body.substr(0, 200));
}

// A unary reply's JSON, or the error it carries.
Result<json> ParseReply(const std::string& where, const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Internal("etcd " + where + ": a reply that is not a JSON object");
  // Unary replies of some calls (lease grant) carry an "error" string that
  // is empty when all went well.
  if (j.contains("error") && !(j["error"].is_string() && j["error"].get<std::string>().empty())) {
    return ErrorFromJson(where, j);
  }
  return j;
}

// The first message of a streamed reply ({"result": {...}}\n...).
Result<json> FirstStreamMessage(const std::string& where, const std::string& body) {
  const std::string line = body.substr(0, body.find('\n'));
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Internal("etcd " + where + ": a stream message that is not a JSON object");
  if (j.contains("error")) return ErrorFromJson(where, j);
  if (!j.contains("result") || !j.at("result").is_object()) {
    return Status::Internal("etcd " + where + ": a stream message without a result");
  }
  return j.at("result");
}

json CompareJson(const KvCompare& c) {
  json j = {{"key", B64(c.key)}};
  switch (c.op) {
    case KvCompare::Op::kEqual: j["result"] = "EQUAL"; break;
    case KvCompare::Op::kNotEqual: j["result"] = "NOT_EQUAL"; break;
    case KvCompare::Op::kLess: j["result"] = "LESS"; break;
    case KvCompare::Op::kGreater: j["result"] = "GREATER"; break;
  }
  // The target's name, and the field that holds what it is compared with.
  const std::string n = std::to_string(c.number);
  switch (c.target) {
    case KvCompare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = n;
      break;
    case KvCompare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = n;
      break;
    case KvCompare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = n;
      break;
    case KvCompare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = B64(c.value);
      break;
  }
  return j;
}

json RangeJson(const std::string& key, const std::string& range_end, int64_t limit) {
  json j = {{"key", B64(key)}};
  if (!range_end.empty()) j["range_end"] = B64(range_end);
  if (limit > 0) j["limit"] = std::to_string(limit);
  return j;
}

json OpJson(const KvOp& op) {
  switch (op.kind) {
    case KvOp::Kind::kPut: {
      json p = {{"key", B64(op.key)}, {"value", B64(op.value)}};
      if (op.lease != 0) p["lease"] = std::to_string(op.lease);
      return {{"request_put", p}};
    }
    case KvOp::Kind::kDelete: {
      json d = {{"key", B64(op.key)}};
      if (!op.range_end.empty()) d["range_end"] = B64(op.range_end);
      return {{"request_delete_range", d}};
    }
    case KvOp::Kind::kRange: return {{"request_range", RangeJson(op.key, op.range_end, op.limit)}};
  }
  return json::object();
}

json OpsJson(const std::vector<KvOp>& ops) {
  json a = json::array();
  for (const auto& op : ops) a.push_back(OpJson(op));
  return a;
}

// "http://host:port" (or "host:port") -> host and port; IPv6 in brackets.
bool SplitHostPort(std::string rest, std::string* host, std::string* port) {
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size()) return false;
  *host = rest.substr(0, colon);
  *port = rest.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return !host->empty() && host->find('/') == std::string::npos &&
         std::all_of(port->begin(), port->end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

struct EtcdKv::Endpoint {
  std::string url;        // http://host:port, as members list their client URLs
  std::string authority;  // host:port, for the Host header
  std::string host;
  std::string port;
};

// A connection to one member, used by one call at a time.
struct EtcdKv::Conn {
  explicit Conn(size_t m) : member(m) {}
  const size_t member;
  net::io_context ioc;  // before the stream, which uses it
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool reused = false;  // it served a request before: the member may have closed it since
};

// What became of one request to one member.
struct EtcdKv::Exchange {
  Status status;      // the network's error; OK when the member replied
  bool sent = false;  // the request was written whole (it may have been applied)
  unsigned http_status = 0;
  std::string body;
};

std::vector<std::string> EtcdKv::SplitEndpoints(const std::string& list) { return SplitCommaList(list); }

Result<std::unique_ptr<EtcdKv>> EtcdKv::Open(Options options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoint");
  std::vector<Endpoint> endpoints;
  for (const auto& e : options.endpoints) {
    std::string rest = e;
    const size_t scheme = rest.find("://");
    if (scheme != std::string::npos) {
      if (rest.substr(0, scheme) != "http") {
        return Status::InvalidArgument("etcd endpoint " + e + ": only http:// is supported (no TLS)");
      }
      rest = rest.substr(scheme + 3);
    }
    Endpoint ep;
    if (!SplitHostPort(rest, &ep.host, &ep.port)) {
      return Status::InvalidArgument("etcd endpoint " + e + ": not http://HOST:PORT");
    }
    ep.authority = rest.back() == '/' ? rest.substr(0, rest.size() - 1) : rest;
    ep.url = "http://" + ep.authority;
    endpoints.push_back(std::move(ep));
  }
  return std::unique_ptr<EtcdKv>(new EtcdKv(std::move(options), std::move(endpoints)));
}

EtcdKv::EtcdKv(Options options, std::vector<Endpoint> endpoints)
    : options_(std::move(options)), endpoints_(std::move(endpoints)) {
  MutexLock l(&mu_);
  skip_until_.resize(endpoints_.size());
}

EtcdKv::~EtcdKv() = default;

std::vector<size_t> EtcdKv::Order() {
  MutexLock l(&mu_);
  const auto now = options_.clock->Now();
  std::vector<size_t> up;
  std::vector<size_t> skipped;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t m = (preferred_ + i) % endpoints_.size();
    (skip_until_[m] > now ? skipped : up).push_back(m);
  }
  up.insert(up.end(), skipped.begin(), skipped.end());
  return up;
}

void EtcdKv::MarkAnswered(size_t m) {
  MutexLock l(&mu_);
  preferred_ = m;
  skip_until_[m] = {};
}

void EtcdKv::MarkFailed(size_t m) {
  std::vector<std::unique_ptr<Conn>> dead;  // closed after the lock is released
  MutexLock l(&mu_);
  skip_until_[m] = options_.clock->Now() + options_.skip_for;
  // Its idle connections are most likely dead too.
  for (auto& c : idle_) {
    if (c->member == m) dead.push_back(std::move(c));
  }
  std::erase(idle_, nullptr);
  if (preferred_ == m) preferred_ = (m + 1) % endpoints_.size();
}

std::unique_ptr<EtcdKv::Conn> EtcdKv::TakeConn(size_t m) {
  {
    MutexLock l(&mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->member == m) {
        std::unique_ptr<Conn> c = std::move(*it);
        idle_.erase(it);
        return c;
      }
    }
  }
  return std::make_unique<Conn>(m);
}

void EtcdKv::ReturnConn(std::unique_ptr<Conn> conn) {
  MutexLock l(&mu_);
  const auto same = static_cast<size_t>(
      std::count_if(idle_.begin(), idle_.end(), [&](const auto& c) { return c->member == conn->member; }));
  if (same < kIdlePerMember) idle_.push_back(std::move(conn));
}

Status EtcdKv::Connect(Conn* c) const {
  const Endpoint& ep = endpoints_[c->member];
  beast::error_code ec;
  tcp::resolver resolver(c->ioc);
  auto results = resolver.resolve(ep.host, ep.port, ec);
  if (ec) return Status::Unavailable("etcd " + ep.url + ": resolve: " + ec.message());
  c->stream.expires_after(options_.connect_timeout);
  c->stream.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  RunUntilDone(c->ioc);
  if (ec == beast::error::timeout) {
    return Status::Unavailable("etcd " + ep.url + ": no connection within " +
                               std::to_string(options_.connect_timeout.count()) + " ms");
  }
  if (ec) return Status::Unavailable("etcd " + ep.url + ": connect: " + ec.message());
  beast::error_code ignored;
  c->stream.socket().set_option(tcp::no_delay(true), ignored);
  return Status::Ok();
}

EtcdKv::Exchange EtcdKv::Send(size_t m, const std::string& path, const std::string& body) {
  const Endpoint& ep = endpoints_[m];
  Exchange ex;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Conn> c = TakeConn(m);
    if (c->reused && UnusableWhileIdle(c->stream.socket())) c = std::make_unique<Conn>(m);
    if (!c->stream.socket().is_open()) {
      ex.status = Connect(c.get());
      if (!ex.status.ok()) return ex;
    }
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, ep.authority);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();

    beast::error_code ec;
    c->stream.expires_after(options_.request_timeout);
    http::async_write(c->stream, req, [&](beast::error_code e, size_t) { ec = e; });
    RunUntilDone(c->ioc);
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    if (!ec) {
      ex.sent = true;
      http::async_read(c->stream, c->buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
      RunUntilDone(c->ioc);
    }
    if (ec) {
      // A kept-alive connection that the member closed while it sat idle
      // fails at once with nothing read: the member never took the request,
      // so it goes again on a new connection. (`sent` stays true: if the
      // member did take it, the caller must still hear "maybe applied".)
      if (attempt == 0 && c->reused && !parser.got_some() && ec != beast::error::timeout) continue;
      ex.status = Status::Unavailable(
          "etcd " + ep.url + path + ": " +
          (ec == beast::error::timeout
               ? "no reply within " + std::to_string(options_.request_timeout.count()) + " ms"
               : ec.message()));
      return ex;
    }
    auto& res = parser.get();
    ex.status = Status::Ok();
    ex.http_status = res.result_int();
    ex.body = std::move(res.body());
    if (res.keep_alive()) {
      c->reused = true;
      ReturnConn(std::move(c));
    }
    return ex;
  }
}

Result<std::string> EtcdKv::Call(const std::string& path, const std::string& body, Retry retry) {
  Status last = Status::Unavailable("etcd " + path + ": no member answered");
  for (size_t m : Order()) {
    Exchange ex = Send(m, path, body);
    if (!ex.status.ok()) {
      MarkFailed(m);
      last = ex.status;
      if (ex.sent && retry == Retry::kAtMostOnce) {
        return Status::Unavailable(ex.status.message() + " (sent: it may have been applied)");
      }
      continue;
    }
    if (ex.http_status == 200) {
      MarkAnswered(m);
      return std::move(ex.body);
    }
    Status err = ErrorFromReply(endpoints_[m].url + path, ex.http_status, ex.body);
    if (err.code() == Code::kUnavailable) {
      // This member has no leader (or etcd timed out inside): try another.
      MarkFailed(m);
      last = err;
      if (retry == Retry::kAtMostOnce) return err;
      continue;
    }
    MarkAnswered(m);
    return err;
  }
  return last;
}

Result<KvRange> EtcdKv::Range(const std::string& key, const std::string& range_end, int64_t limit) {
  HOARD_ASSIGN_OR_RETURN(std::string text,
                         Call("/v3/kv/range", RangeJson(key, range_end, limit).dump(), Retry::kIdempotent));
  HOARD_ASSIGN_OR_RETURN(json j, ParseReply("range", text));
  KvRange r;
  HOARD_ASSIGN_OR_RETURN(r.kvs, ParseKvs(j));
  r.more = Bool(j, "more");
  r.revision = HeaderRevision(j);
  return r;
}

Result<KvTxnResult> EtcdKv::Txn(const std::vector<KvCompare>& compare, const std::vector<KvOp>& success,
                                const std::vector<KvOp>& failure) {
  json req = {{"compare", json::array()}, {"success", OpsJson(success)}, {"failure", OpsJson(failure)}};
  for (const auto& c : compare) req["compare"].push_back(CompareJson(c));
  HOARD_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/txn", req.dump(), Retry::kAtMostOnce));
  HOARD_ASSIGN_OR_RETURN(json j, ParseReply("txn", text));
  KvTxnResult r;
  r.succeeded = Bool(j, "succeeded");
  r.revision = HeaderRevision(j);
  for (const auto& resp : Arr(j, "responses")) {
    if (!resp.is_object() || !resp.contains("response_range")) continue;
    HOARD_ASSIGN_OR_RETURN(std::vector<KvPair> kvs, ParseKvs(Obj(resp, "response_range")));
    r.ranges.push_back(std::move(kvs));
  }
  return r;
}

Result<int64_t> EtcdKv::LeaseGrant(std::chrono::seconds ttl) {
  const json req = {{"TTL", std::to_string(ttl.count())}, {"ID", "0"}};
  HOARD_ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/grant", req.dump(), Retry::kAtMostOnce));
  HOARD_ASSIGN_OR_RETURN(json j, ParseReply("lease grant", text));
  const int64_t id = I64(j, "ID");
  if (id == 0) return Status::Internal("etcd lease grant: a reply without a lease id");
  return id;
}

Result<std::chrono::seconds> EtcdKv::LeaseKeepAlive(int64_t lease) {
  const json req = {{"ID", std::to_string(lease)}};
  // A stream on the gateway: one request in, one reply out, then it ends.
  HOARD_ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/keepalive", req.dump(), Retry::kIdempotent));
  HOARD_ASSIGN_OR_RETURN(json result, FirstStreamMessage("lease keepalive", text));
  // etcd answers a keep-alive of an unknown lease with TTL 0, not an error.
  const int64_t ttl = I64(result, "TTL");
  if (ttl <= 0) return Status::NotFound("etcd lease keepalive: requested lease not found");
  return std::chrono::seconds(ttl);
}

Status EtcdKv::LeaseRevoke(int64_t lease) {
  const json req = {{"ID", std::to_string(lease)}};
  Result<std::string> text = Call("/v3/lease/revoke", req.dump(), Retry::kIdempotent);
  Status s = text.ok() ? ParseReply("lease revoke", *text).status() : text.status();
  if (s.code() == Code::kNotFound) return Status::Ok();  // already gone: what the caller wanted
  return s;
}

Status EtcdKv::Compact(int64_t revision) {
  const json req = {{"revision", std::to_string(revision)}, {"physical", true}};
  HOARD_ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/compaction", req.dump(), Retry::kAtMostOnce));
  return ParseReply("compaction", text).status();
}

Result<KvEvents> EtcdKv::WaitEvents(const std::string& key, const std::string& range_end, int64_t after_revision,
                                    std::chrono::milliseconds timeout) {
  json create = {{"key", B64(key)}, {"start_revision", std::to_string(after_revision + 1)}};
  if (!range_end.empty()) create["range_end"] = B64(range_end);
  const std::string body = json{{"create_request", create}}.dump();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last = Status::Unavailable("etcd watch: no member answered");
  for (size_t m : Order()) {
    bool answered = false;
    Result<KvEvents> r = WatchOnce(m, body, after_revision, deadline, &answered);
    if (answered) {
      MarkAnswered(m);
      return r;
    }
    MarkFailed(m);
    last = r.status();
  }
  return last;
}

Result<KvEvents> EtcdKv::WatchOnce(size_t m, const std::string& body, int64_t after_revision,
                                   std::chrono::steady_clock::time_point deadline, bool* answered) {
  const Endpoint& ep = endpoints_[m];
  const std::string where = ep.url + "/v3/watch";
  *answered = false;
  // A connection of its own: closing it is how the watch ends.
  Conn c(m);
  HOARD_RETURN_IF_ERROR(Connect(&c));
  http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
  req.set(http::field::host, ep.authority);
  req.set(http::field::content_type, "application/json");
  // gRPC metadata through the gateway: etcd refuses (and later cancels) the
  // watch on a member without a leader, which would otherwise wait in
  // silence while the rest of the cluster moves on.
  req.set("Grpc-Metadata-hasleader", "true");
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  c.stream.expires_after(options_.request_timeout);
  http::async_write(c.stream, req, [&](beast::error_code e, size_t) { ec = e; });
  RunUntilDone(c.ioc);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  if (!ec) {
    http::async_read_header(c.stream, c.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    RunUntilDone(c.ioc);
  }
  if (ec) return Status::Unavailable("etcd " + where + ": " + ec.message());
  if (parser.get().result_int() != 200) {
    http::async_read(c.stream, c.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    RunUntilDone(c.ioc);
    Status err = ErrorFromReply(where, parser.get().result_int(), parser.get().body());
    *answered = err.code() != Code::kUnavailable;
    return err;
  }

  // The stream: one JSON message per line. The first says the watch was
  // created; then batches of events.
  bool created = false;
  size_t consumed = 0;
  for (;;) {
    std::string& text = parser.get().body();
    for (size_t nl; (nl = text.find('\n', consumed)) != std::string::npos; consumed = nl + 1) {
      json j = json::parse(text.begin() + static_cast<std::ptrdiff_t>(consumed),
                           text.begin() + static_cast<std::ptrdiff_t>(nl), nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) return Status::Internal("etcd " + where + ": a stream message that is not JSON");
      if (j.contains("error")) {
        Status err = ErrorFromJson(where, j);
        *answered = err.code() != Code::kUnavailable;
        return err;
      }
      const json& result = Obj(j, "result");
      created = created || Bool(result, "created");
      if (const int64_t compacted = I64(result, "compact_revision"); compacted > 0) {
        *answered = true;
        return Status::Stale("etcd " + where + ": mvcc: required revision has been compacted (after " +
                             std::to_string(after_revision) + ", compacted at " + std::to_string(compacted) + ")");
      }
      if (Bool(result, "canceled")) {
        *answered = true;
        return Status::Unavailable("etcd " + where + ": watch canceled: " + Str(result, "cancel_reason"));
      }
      KvEvents out;
      {
        for (const auto& e : Arr(result, "events")) {
          KvEvent ev;
          ev.type = Str(e, "type") == "DELETE" ? KvEvent::Type::kDelete : KvEvent::Type::kPut;
          HOARD_ASSIGN_OR_RETURN(ev.kv, ParseKv(Obj(e, "kv")));
          out.events.push_back(std::move(ev));
        }
      }
      if (!out.events.empty()) {
        *answered = true;
        out.revision = out.events.back().kv.mod_revision;
        return out;
      }
    }
    if (parser.is_done()) return Status::Unavailable("etcd " + where + ": the watch stream ended");
    // Until the watch is created, a member that does not answer is a failed
    // member; after, silence is a wait with nothing to report.
    if (created) {
      c.stream.expires_at(deadline);
    } else {
      c.stream.expires_after(options_.request_timeout);
    }
    http::async_read_some(c.stream, c.buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    RunUntilDone(c.ioc);
    if (ec == beast::error::timeout && created) {
      // Nothing within the timeout. after_revision, not the revision etcd
      // reported at creation: see the top of etcd_kv.h.
      *answered = true;
      return KvEvents{{}, after_revision};
    }
    // The member went away, before or after creating the watch: the caller
    // tries the next one with what is left of its timeout.
    if (ec) return Status::Unavailable("etcd " + where + ": " + ec.message());
  }
}

Result<std::vector<KvMember>> EtcdKv::Members() {
  // Names from the member list, by id and by client URL (for a member that
  // does not answer its own status request).
  std::map<uint64_t, std::string> name_by_id;
  std::map<std::string, std::string> name_by_url;
  if (Result<std::string> text = Call("/v3/cluster/member/list", "{}", Retry::kIdempotent); text.ok()) {
    Result<json> j = ParseReply("member list", *text);
    if (j.ok()) {
      for (const auto& mem : Arr(*j, "members")) {
        const std::string name = Str(mem, "name");
        name_by_id[U64(mem, "ID")] = name;
        for (const auto& url : Arr(mem, "clientURLs")) {
          if (url.is_string()) name_by_url[url.get<std::string>()] = name;
        }
      }
    }
  }
  std::vector<KvMember> out;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    KvMember km;
    km.endpoint = endpoints_[i].url;
    km.name = name_by_url.contains(km.endpoint) ? name_by_url[km.endpoint] : km.endpoint;
    Exchange ex = Send(i, "/v3/maintenance/status", "{}");
    if (!ex.status.ok()) {
      MarkFailed(i);
      km.error = ex.status.message();
    } else if (ex.http_status != 200) {
      km.error = ErrorFromReply(km.endpoint, ex.http_status, ex.body).message();
    } else if (Result<json> j = ParseReply("status", ex.body); !j.ok()) {
      km.error = j.status().message();
    } else {
      const uint64_t id = U64(Obj(*j, "header"), "member_id");
      if (name_by_id.contains(id) && !name_by_id[id].empty()) km.name = name_by_id[id];
      km.leader = id != 0 && id == U64(*j, "leader");
      km.db_size_bytes = I64(*j, "dbSize");
      std::string errors;
      for (const auto& e : Arr(*j, "errors")) {
        if (e.is_string()) errors += (errors.empty() ? "" : "; ") + e.get<std::string>();
      }
      // A member that does not know a leader cannot serve a request.
      if (U64(*j, "leader") == 0 && errors.empty()) errors = "no leader";
      km.healthy = errors.empty();
      km.error = errors;
    }
    out.push_back(std::move(km));
  }
  return out;
}

}  // namespace hoard
