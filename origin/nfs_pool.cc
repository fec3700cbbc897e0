#include "origin/nfs_pool.h"

#include <poll.h>

#include <nfsc/libnfs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "origin/origin_path.h"

namespace hoard {
namespace {

// Open handles a connection keeps for files read recently; closing a
// read-only NFSv3 handle is local (no RPC), so evicting one is cheap.
constexpr size_t kHandlesPerConnection = 16;
// libnfs reports 0 before FSINFO; a safe READ size until then.
constexpr uint64_t kDefaultReadMax = 1 << 20;
// How often the connect loop wakes up to let libnfs check its timers.
constexpr int kPollSliceMs = 100;

using Clock = std::chrono::steady_clock;

NfsFailure Classify(int rc, std::string_view error) {
  // libnfs spells out the protocol status of an error answer.
  if (error.find("NFS3ERR_") != std::string_view::npos || error.find("MNT3ERR_") != std::string_view::npos) {
    return NfsFailure::kAnswer;
  }
  switch (-rc) {
    case ENOENT:
    case ENOTDIR:
    case EACCES:
    case EPERM:
    case ELOOP:
    case EISDIR:
    case ESTALE:
    case ENAMETOOLONG:
    case EINVAL:
    case EFBIG:
    case EOVERFLOW:
    // What the writable checkpoint origin can get back (RunCall).
    case EEXIST:
    case ENOTEMPTY:
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EXDEV:
      return NfsFailure::kAnswer;
    case EINTR:  // libnfs's sync calls return -EINTR for "Command timed out"
    case ETIMEDOUT:
      return NfsFailure::kTimeout;
    default:
      return NfsFailure::kConnection;
  }
}

// A failed libnfs call of the read path. An answer's negative errno goes
// through the one errno table (NFS3ERR_STALE is kStale, NFS3ERR_JUKEBOX's
// EAGAIN kUnavailable) and is re-coded for reading as every origin does; the
// message is libnfs's, which already names the NFS3ERR_ status.
Status StatusFor(int rc, NfsFailure failure, std::string message) {
  if (failure != NfsFailure::kAnswer) return Status::Unavailable(std::move(message));
  return OriginReadError(Status(CodeFromErrno(-rc), std::move(message)));
}

struct MountWait {
  bool done = false;
  int status = 0;
  std::string error;
};

void MountDone(int status, nfs_context* /*nfs*/, void* data, void* private_data) {
  auto* w = static_cast<MountWait*>(private_data);
  w->done = true;
  w->status = status;
  if (status != 0 && data != nullptr) w->error = static_cast<const char*>(data);
}

}  // namespace

// ---------------------------------------------------------------------------
// Connecting

// Connects to the target's server and mounts `export_path`. The whole
// exchange (portmapper, MOUNT, NFS FSINFO) runs under one deadline of
// timeout_ms: libnfs bounds RPCs but not TCP connects.
Result<std::unique_ptr<NfsConnection>> NfsConnectionPool::Connect(const Target& target,
                                                                  const std::string& export_path,
                                                                  NfsFailure* failure) {
  *failure = NfsFailure::kConnection;
  MountWait wait;  // outlives `conn`: destroying a context may run its callback
  nfs_context* ctx = nfs_init_context();
  if (ctx == nullptr) return Status::Internal("nfs_init_context failed");
  auto conn = std::make_unique<NfsConnection>(ctx);
  nfs_set_timeout(ctx, target.timeout_ms);
  // Reconnecting is ours to do (see the header): libnfs's gives up at once
  // on a refused connection and never again recovers the context.
  nfs_set_autoreconnect(ctx, 0);
  // Walk and Stat must see the server's current directories.
  nfs_set_dircache(ctx, 0);
  if (target.url.port != 0 || target.url.mount_port != 0) {
    // libnfs 4.0 has no setters for the ports: they come as URL arguments,
    // which nfs_parse_url_* apply to the context.
    std::string args = "nfs://server/?";
    if (target.url.port != 0) args += "nfsport=" + std::to_string(target.url.port);
    if (target.url.mount_port != 0) {
      if (target.url.port != 0) args += "&";
      args += "mountport=" + std::to_string(target.url.mount_port);
    }
    nfs_url* parsed = nfs_parse_url_incomplete(ctx, args.c_str());
    if (parsed == nullptr) return Status::Internal("libnfs refused port arguments: " + std::string(conn->error()));
    nfs_destroy_url(parsed);
  }

  auto fail = [&](std::string_view why) {
    std::string hint;
    if (target.url.mount_port == 0) {
      hint = " (the MOUNT port comes from the portmapper on " + target.url.host +
             ":111; add ?mountport= to the URL to skip it)";
    }
    return Status::Unavailable(target.source + ": mount " + export_path + " on " + target.url.host + ": " +
                               std::string(why) + hint);
  };
  if (nfs_mount_async(ctx, target.url.host.c_str(), export_path.c_str(), &MountDone, &wait) != 0) {
    return fail(conn->error());
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(target.timeout_ms);
  while (!wait.done) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *failure = NfsFailure::kTimeout;
      return fail("no answer within " + std::to_string(target.timeout_ms) + " ms");
    }
    pollfd pfd{};
    pfd.fd = nfs_get_fd(ctx);
    pfd.events = static_cast<short>(nfs_which_events(ctx));
    int n = ::poll(&pfd, pfd.fd >= 0 ? 1 : 0, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
    if (n < 0 && errno != EINTR) return fail(std::string("poll: ") + std::strerror(errno));
    if (nfs_service(ctx, n > 0 ? pfd.revents : 0) < 0 && !wait.done) return fail(conn->error());
  }
  if (wait.status != 0) {
    std::string error = wait.error.empty() ? std::string(conn->error()) : wait.error;
    *failure = Classify(wait.status, error);
    if (*failure == NfsFailure::kAnswer) {
      return StatusFor(wait.status, *failure,
                       target.source + ": mount " + export_path + " on " + target.url.host + ": " + error);
    }
    return fail(error);
  }
  return conn;
}

// ---------------------------------------------------------------------------
// NfsConnection

NfsConnection::~NfsConnection() {
  for (Handle& h : handles_) nfs_close(ctx_, h.fh);
  nfs_destroy_context(ctx_);
}

std::string_view NfsConnection::error() const {
  const char* e = nfs_get_error(ctx_);
  return e != nullptr ? e : "unknown error";
}

uint64_t NfsConnection::read_max() const {
  uint64_t m = nfs_get_readmax(ctx_);
  return m > 0 ? m : kDefaultReadMax;
}

bool NfsConnection::HasHandle(std::string_view path) const {
  return std::any_of(handles_.begin(), handles_.end(), [&](const Handle& h) { return h.path == path; });
}

nfsfh* NfsConnection::FindHandle(std::string_view path, uint64_t fileid) {
  for (auto it = handles_.begin(); it != handles_.end(); ++it) {
    if (it->path != path) continue;
    if (it->fileid != fileid) {
      DropHandle(path);
      return nullptr;
    }
    handles_.splice(handles_.begin(), handles_, it);  // most recent first
    return it->fh;
  }
  return nullptr;
}

void NfsConnection::PutHandle(std::string path, uint64_t fileid, nfsfh* fh) {
  DropHandle(path);
  handles_.push_front(Handle{std::move(path), fileid, fh});
  if (handles_.size() > kHandlesPerConnection) {
    nfs_close(ctx_, handles_.back().fh);
    handles_.pop_back();
  }
}

void NfsConnection::DropHandle(std::string_view path) {
  for (auto it = handles_.begin(); it != handles_.end(); ++it) {
    if (it->path == path) {
      nfs_close(ctx_, it->fh);
      handles_.erase(it);
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// NfsConnectionPool

Result<std::shared_ptr<NfsConnectionPool>> NfsConnectionPool::Open(const std::string& source,
                                                                   const OriginOptions& options) {
  HOARD_ASSIGN_OR_RETURN(NfsUrl url, NfsUrl::Parse(source));
  Target target{source, url, std::max(1, options.timeout_ms)};

  // The export: the longest prefix of the path the server lets us mount.
  std::unique_ptr<NfsConnection> conn;
  std::string export_path;
  Status last;
  for (const std::string& candidate : url.ExportCandidates()) {
    NfsFailure failure;
    Result<std::unique_ptr<NfsConnection>> c = Connect(target, candidate, &failure);
    if (c.ok()) {
      conn = std::move(*c);
      export_path = candidate;
      break;
    }
    // Only a refusal from the MOUNT service means "try a shorter prefix";
    // a server that does not answer will not answer the next one either.
    if (failure != NfsFailure::kAnswer) return c.status();
    last = c.status();
  }
  if (conn == nullptr) {
    return Status::NotFound(source + ": no prefix of " + url.path + " is exported by " + url.host + " (" +
                            last.message() + ")");
  }
  std::string root = url.BelowExport(export_path);
  const uint64_t read_max = conn->read_max();
  std::shared_ptr<NfsConnectionPool> pool(new NfsConnectionPool(std::move(target), std::move(export_path),
                                                                std::move(root), read_max, options.max_connections));
  pool->Adopt(std::move(conn));
  return pool;
}

NfsConnectionPool::NfsConnectionPool(Target target, std::string export_path, std::string root, uint64_t read_max,
                                     int max)
    : target_(std::move(target)),
      export_path_(std::move(export_path)),
      root_(std::move(root)),
      base_(root_.empty() ? "" : "/" + root_),
      read_max_(read_max),
      max_(std::max(1, max)) {}

NfsConnectionPool::~NfsConnectionPool() = default;

std::string NfsConnectionPool::Full(std::string_view rel) const {
  if (rel.empty()) return base_.empty() ? "/" : base_;
  return base_ + "/" + std::string(rel);
}

void NfsConnectionPool::Adopt(std::unique_ptr<NfsConnection> conn) {
  MutexLock lock(&mu_);
  ++total_;
  idle_.push_back(std::move(conn));
}

Status NfsConnectionPool::Run(std::string_view prefer_path, const std::function<NfsOutcome(NfsConnection&)>& op) {
  for (int attempt = 0;; ++attempt) {
    Result<std::unique_ptr<NfsConnection>> conn = Acquire(prefer_path);
    if (!conn.ok()) return conn.status();
    NfsOutcome out = op(**conn);
    if (out.status.ok() || out.failure == NfsFailure::kAnswer) {
      Release(std::move(*conn));
      return out.status;
    }
    Discard(std::move(*conn));
    if (out.failure == NfsFailure::kTimeout || attempt >= 1) return out.status;
    spdlog::info("{}; retrying on a new connection", out.status.ToString());
  }
}

NfsOutcome NfsConnectionPool::Fail(int rc, const NfsConnection& conn, std::string_view op,
                                   std::string_view path) const {
  std::string error(conn.error());
  NfsFailure failure = Classify(rc, error);
  std::string msg = target_.source + ": " + std::string(op) + " '" + std::string(path) + "': " + error;
  return {StatusFor(rc, failure, std::move(msg)), failure};
}

Status NfsConnectionPool::RunCall(std::string_view what, std::string_view path,
                                  const std::function<int(nfs_context*)>& op) {
  return Run(path, [&](NfsConnection& conn) -> NfsOutcome {
    const int rc = op(conn.ctx());
    if (rc >= 0) return NfsOutcome::Done();
    std::string error(conn.error());
    const NfsFailure failure = Classify(rc, error);
    std::string msg = source() + ": " + std::string(what) + " '" + std::string(path) + "': " + error;
    if (failure != NfsFailure::kAnswer) return {Status::Unavailable(std::move(msg)), failure};
    // Not re-coded as the read path is: the checkpoint namespace needs
    // kNotDirectory and kIsDirectory. FromErrno keeps strerror's text, which
    // checkpoint/drain_health.cc reads to tell permission errors apart.
    return NfsOutcome::Answer(Status::FromErrno(-rc, msg));
  });
}

Result<std::unique_ptr<NfsConnection>> NfsConnectionPool::Acquire(std::string_view prefer_path) {
  {
    MutexLock lock(&mu_);
    // Waiting cannot deadlock: a lease lasts one call, and every RPC of a
    // call is bounded by the timeout.
    while (idle_.empty() && total_ >= max_) cv_.Wait(&mu_);
    if (!idle_.empty()) {
      const std::string prefer = prefer_path.empty() ? "" : Full(prefer_path);
      auto it = std::find_if(idle_.begin(), idle_.end(),
                             [&](const auto& c) { return !prefer.empty() && c->HasHandle(prefer); });
      if (it == idle_.end()) it = std::prev(idle_.end());  // the most recently used
      std::unique_ptr<NfsConnection> conn = std::move(*it);
      idle_.erase(it);
      return conn;
    }
    ++total_;  // reserve the slot; connect outside the lock
  }
  NfsFailure failure;
  Result<std::unique_ptr<NfsConnection>> conn = Connect(target_, export_path_, &failure);
  if (!conn.ok()) {
    MutexLock lock(&mu_);
    --total_;
    cv_.NotifyOne();
    // An export that mounted before and now does not is the server's
    // trouble, not the caller's: retry later.
    if (conn.status().code() != Code::kUnavailable) return Status::Unavailable(conn.status().message());
  }
  return conn;
}

void NfsConnectionPool::Release(std::unique_ptr<NfsConnection> conn) {
  MutexLock lock(&mu_);
  idle_.push_back(std::move(conn));
  cv_.NotifyOne();
}

void NfsConnectionPool::Discard(std::unique_ptr<NfsConnection> conn) {
  conn.reset();  // outside the lock: closes a socket
  MutexLock lock(&mu_);
  --total_;
  cv_.NotifyOne();
}

}  // namespace hoard
