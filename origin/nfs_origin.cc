#include "origin/nfs_origin.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw-nfs.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <optional>
#include <functional>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
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

// How a failed libnfs call failed, which decides what happens to its
// connection.
enum class Failure {
  kAnswer,      // the server answered with an error: the connection is fine
  kTimeout,     // no answer in time: drop the connection, do not retry
  kConnection,  // the transport broke: drop the connection, retry once
};

Failure Classify(int rc, std::string_view error) {
  // libnfs spells out the protocol status of an error answer.
  if (error.find("NFS3ERR_") != std::string_view::npos || error.find("MNT3ERR_") != std::string_view::npos) {
    return Failure::kAnswer;
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
      return Failure::kAnswer;
    case EINTR:  // libnfs's sync calls return -EINTR for "Command timed out"
    case ETIMEDOUT:
      return Failure::kTimeout;
    default:
      return Failure::kConnection;
  }
}

// A failed libnfs call of the read path. An answer's negative errno goes
// through the one errno table (NFS3ERR_STALE is kStale, NFS3ERR_JUKEBOX's
// EAGAIN kUnavailable) and is re-coded for reading as every origin does; the
// message is libnfs's, which already names the NFS3ERR_ status.
Status StatusFor(int rc, Failure failure, std::string message) {
  if (failure != Failure::kAnswer) return Status::Unavailable(std::move(message));
  return OriginReadError(Status(CodeFromErrno(-rc), std::move(message)));
}

// The result of one attempt of an operation on a connection.
struct Outcome {
  Status status;
  Failure failure = Failure::kAnswer;  // meaningful only when !status.ok()
};

Outcome Done() { return {}; }
Outcome Answer(Status s) { return {std::move(s), Failure::kAnswer}; }

int64_t MtimeNs(uint64_t sec, uint64_t nsec) {
  return static_cast<int64_t>(sec) * 1'000'000'000 + static_cast<int64_t>(nsec);
}

bool ParsePort(std::string_view s, int* port) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1 || v > 65535) return false;
  *port = v;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// URL

Result<NfsUrl> NfsUrl::Parse(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("bad NFS origin URL '" + std::string(url) + "': " + std::string(why) +
                                   " (want nfs://host[:port]/export/path[?mountport=M])");
  };
  constexpr std::string_view kScheme = "nfs://";
  if (!url.starts_with(kScheme)) return bad("it does not start with nfs://");
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("no path");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = rest.substr(slash);

  NfsUrl out;
  std::string_view port;
  if (authority.starts_with('[')) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in host");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("junk after ']'");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
      if (port.empty()) return bad("empty port");
    }
    out.host = std::string(authority);
  }
  if (out.host.empty()) return bad("no host");
  if (out.host.find_first_of("@/?#[] ") != std::string::npos) return bad("bad character in host");
  if (!port.empty() && !ParsePort(port, &out.port)) return bad("port must be 1..65535");

  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    std::string_view key = kv.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    if (key == "mountport") {
      if (!ParsePort(value, &out.mount_port)) return bad("mountport must be 1..65535");
    } else {
      return bad("unknown parameter '" + std::string(key) + "' (only mountport is accepted)");
    }
  }

  // Normalise the path: collapse '/', refuse "." and "..", which the server
  // would resolve and which could climb out of what the URL names.
  out.path = "";
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    if (!IsSafeName(part)) return bad("bad path component '" + std::string(part) + "'");
    out.path += '/';
    out.path += part;
  }
  if (out.path.empty()) out.path = "/";
  return out;
}

// ---------------------------------------------------------------------------
// Connections

namespace {

// One mounted libnfs context and the file handles opened on it.
// Used by one thread at a time (whoever leased it from the pool).
class NfsConnection {
 public:
  explicit NfsConnection(nfs_context* ctx) : ctx_(ctx) {}
  ~NfsConnection() {
    for (Handle& h : handles_) nfs_close(ctx_, h.fh);
    nfs_destroy_context(ctx_);
  }
  NfsConnection(const NfsConnection&) = delete;
  NfsConnection& operator=(const NfsConnection&) = delete;

  nfs_context* ctx() const { return ctx_; }
  std::string_view error() const {
    const char* e = nfs_get_error(ctx_);
    return e != nullptr ? e : "unknown error";
  }
  uint64_t read_max() const {
    uint64_t m = nfs_get_readmax(ctx_);
    return m > 0 ? m : kDefaultReadMax;
  }

  bool HasHandle(std::string_view path) const {
    return std::any_of(handles_.begin(), handles_.end(), [&](const Handle& h) { return h.path == path; });
  }
  // The cached handle for `path` if it is the file `fileid`; else nullptr.
  nfsfh* FindHandle(std::string_view path, uint64_t fileid) {
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
  void PutHandle(std::string path, uint64_t fileid, nfsfh* fh) {
    DropHandle(path);
    handles_.push_front(Handle{std::move(path), fileid, fh});
    if (handles_.size() > kHandlesPerConnection) {
      nfs_close(ctx_, handles_.back().fh);
      handles_.pop_back();
    }
  }
  void DropHandle(std::string_view path) {
    for (auto it = handles_.begin(); it != handles_.end(); ++it) {
      if (it->path == path) {
        nfs_close(ctx_, it->fh);
        handles_.erase(it);
        return;
      }
    }
  }

 private:
  struct Handle {
    std::string path;  // as given to nfs_open
    uint64_t fileid;
    nfsfh* fh;
  };
  nfs_context* const ctx_;
  std::list<Handle> handles_;
};

// What every connection of one origin connects to.
struct NfsTarget {
  std::string source;  // for messages
  NfsUrl url;
  int timeout_ms = 10'000;
};

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

// Connects to the target's server and mounts `export_path`. The whole
// exchange (portmapper, MOUNT, NFS FSINFO) runs under one deadline of
// timeout_ms: libnfs bounds RPCs but not TCP connects.
Result<std::unique_ptr<NfsConnection>> Connect(const NfsTarget& target, const std::string& export_path,
                                               Failure* failure) {
  *failure = Failure::kConnection;
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
      *failure = Failure::kTimeout;
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
    if (*failure == Failure::kAnswer) {
      return StatusFor(wait.status, *failure,
                       target.source + ": mount " + export_path + " on " + target.url.host + ": " + error);
    }
    return fail(error);
  }
  return conn;
}

}  // namespace

// Up to `max` connections to one export. See the header for why leases are
// per call.
class NfsConnectionPool {
 public:
  NfsConnectionPool(NfsTarget target, std::string export_path, std::string root, int max)
      : target_(std::move(target)),
        export_path_(std::move(export_path)),
        base_(root.empty() ? "" : "/" + root),
        max_(std::max(1, max)) {}

  const std::string& source() const { return target_.source; }

  // The path libnfs wants (absolute inside the export) for an origin path.
  std::string Full(std::string_view rel) const {
    if (rel.empty()) return base_.empty() ? "/" : base_;
    return base_ + "/" + std::string(rel);
  }

  // Puts an already mounted connection (from export discovery) in the pool.
  void Adopt(std::unique_ptr<NfsConnection> conn) {
    MutexLock lock(&mu_);
    ++total_;
    idle_.push_back(std::move(conn));
  }

  // Runs `op` (Outcome(NfsConnection&)) on a leased connection. A broken
  // connection is dropped; after a transport failure (not a timeout) the
  // call is tried once more on a fresh connection. `op` may be called twice
  // and must be idempotent given its own progress.
  template <typename Op>
  Status Run(std::string_view prefer_path, Op&& op) {
    for (int attempt = 0;; ++attempt) {
      Result<std::unique_ptr<NfsConnection>> conn = Acquire(prefer_path);
      if (!conn.ok()) return conn.status();
      Outcome out = op(**conn);
      if (out.status.ok() || out.failure == Failure::kAnswer) {
        Release(std::move(*conn));
        return out.status;
      }
      Discard(std::move(*conn));
      if (out.failure == Failure::kTimeout || attempt >= 1) return out.status;
      spdlog::info("{}; retrying on a new connection", out.status.ToString());
    }
  }

  // An Outcome for a failed libnfs call.
  Outcome Fail(int rc, const NfsConnection& conn, std::string_view op, std::string_view path) const {
    std::string error(conn.error());
    Failure failure = Classify(rc, error);
    std::string msg = target_.source + ": " + std::string(op) + " '" + std::string(path) + "': " + error;
    return {StatusFor(rc, failure, std::move(msg)), failure};
  }

 private:
  Result<std::unique_ptr<NfsConnection>> Acquire(std::string_view prefer_path) {
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
    Failure failure;
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

  void Release(std::unique_ptr<NfsConnection> conn) {
    MutexLock lock(&mu_);
    idle_.push_back(std::move(conn));
    cv_.NotifyOne();
  }

  void Discard(std::unique_ptr<NfsConnection> conn) {
    conn.reset();  // outside the lock: closes a socket
    MutexLock lock(&mu_);
    --total_;
    cv_.NotifyOne();
  }

  const NfsTarget target_;
  const std::string export_path_;
  const std::string base_;  // "" or "/root/in/export"
  const int max_;

  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<NfsConnection>> idle_ GUARDED_BY(mu_);  // most recently used last
  int total_ GUARDED_BY(mu_) = 0;  // idle + leased + being connected
};

// ---------------------------------------------------------------------------
// Reading

namespace {

std::optional<EntryType> TypeOfMode(uint64_t mode) {
  if (S_ISREG(mode)) return EntryType::kFile;
  if (S_ISDIR(mode)) return EntryType::kDir;
  if (S_ISLNK(mode)) return EntryType::kSymlink;
  return std::nullopt;
}

// Reads a symlink's target into `e` (whose path is `rel`).
Outcome ReadLink(NfsConnectionPool& pool, NfsConnection& conn, std::string_view rel, OriginEntry* e) {
  char* target = nullptr;
  int rc = nfs_readlink2(conn.ctx(), pool.Full(rel).c_str(), &target);
  if (rc < 0) return pool.Fail(rc, conn, "readlink", rel);
  e->symlink_target = target != nullptr ? target : "";
  std::free(target);
  e->size = e->symlink_target.size();
  return Done();
}

// Opens `rel` on `conn` and returns its handle and attributes.
Outcome OpenFile(NfsConnectionPool& pool, NfsConnection& conn, std::string_view rel, nfsfh** fh,
                 nfs_stat_64* st) {
  std::string full = pool.Full(rel);
  int rc = nfs_open(conn.ctx(), full.c_str(), O_RDONLY | O_NOFOLLOW, fh);
  // O_NOFOLLOW on the last component: ELOOP says it is a symlink, which the
  // table's kNotDirectory (a symlink where a directory was needed) would not.
  if (rc == -ELOOP) {
    return Answer(Status::InvalidArgument(pool.source() + ": '" + std::string(rel) + "' is a symlink, not a file"));
  }
  if (rc < 0) return pool.Fail(rc, conn, "open", rel);
  rc = nfs_fstat64(conn.ctx(), *fh, st);
  if (rc < 0) {
    Outcome out = pool.Fail(rc, conn, "stat", rel);
    nfs_close(conn.ctx(), *fh);
    return out;
  }
  if (!S_ISREG(st->nfs_mode)) {
    nfs_close(conn.ctx(), *fh);
    return Answer(Status::InvalidArgument(pool.source() + ": '" + std::string(rel) + "' is not a regular file"));
  }
  return Done();
}

class NfsFile : public OriginFile {
 public:
  NfsFile(std::shared_ptr<NfsConnectionPool> pool, OriginEntry attrs, uint64_t fileid)
      : pool_(std::move(pool)), full_(pool_->Full(attrs.path)), attrs_(std::move(attrs)), fileid_(fileid) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
    size_t done = 0;
    Status s = pool_->Run(attrs_.path, [&](NfsConnection& conn) -> Outcome {
      nfsfh* fh = conn.FindHandle(full_, fileid_);
      if (fh == nullptr) {
        nfs_stat_64 st;
        Outcome out = OpenFile(*pool_, conn, attrs_.path, &fh, &st);
        if (!out.status.ok()) return out;
        if (st.nfs_ino != fileid_) {
          nfs_close(conn.ctx(), fh);
          return Answer(Status::Stale(pool_->source() + ": '" + attrs_.path + "' was replaced since it was opened"));
        }
        conn.PutHandle(full_, fileid_, fh);
      }
      const uint64_t max = conn.read_max();
      while (done < len) {
        uint64_t want = std::min<uint64_t>(len - done, max);
        int n = nfs_pread(conn.ctx(), fh, offset + done, want, buf + done);
        if (n < 0) {
          Outcome out = pool_->Fail(n, conn, "read", attrs_.path);
          conn.DropHandle(full_);
          return out;
        }
        if (n == 0) break;  // end of file
        done += static_cast<size_t>(n);
      }
      return Done();
    });
    if (!s.ok()) return s;
    return done;
  }

  const OriginEntry& attributes() const override { return attrs_; }

  Result<OriginEntry> Restat() override {
    OriginEntry e = attrs_;
    Status s = pool_->Run(attrs_.path, [&](NfsConnection& conn) -> Outcome {
      nfs_stat_64 st;
      nfsfh* fh = conn.FindHandle(full_, fileid_);
      if (fh == nullptr) {
        Outcome out = OpenFile(*pool_, conn, attrs_.path, &fh, &st);
        if (!out.status.ok()) return out;
        conn.PutHandle(full_, st.nfs_ino, fh);
      } else if (int rc = nfs_fstat64(conn.ctx(), fh, &st); rc < 0) {
        Outcome out = pool_->Fail(rc, conn, "stat", attrs_.path);
        conn.DropHandle(full_);
        return out;
      }
      if (st.nfs_ino != fileid_) {
        return Answer(Status::Stale(pool_->source() + ": '" + attrs_.path + "' was replaced since it was opened"));
      }
      e.size = st.nfs_size;
      e.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
      return Done();
    });
    if (!s.ok()) return s;
    return e;
  }

 private:
  const std::shared_ptr<NfsConnectionPool> pool_;
  const std::string full_;
  const OriginEntry attrs_;
  const uint64_t fileid_;
};

}  // namespace

std::vector<std::string> NfsUrl::ExportCandidates() const {
  std::vector<std::string> out;
  for (std::string p = path; !p.empty(); p = p.substr(0, p.rfind('/'))) out.push_back(p);
  if (out.empty() || out.back() != "/") out.push_back("/");
  return out;
}

std::string NfsUrl::BelowExport(const std::string& candidate) const {
  if (candidate == "/") return path.substr(1);
  return candidate.size() < path.size() ? path.substr(candidate.size() + 1) : "";
}

// ---------------------------------------------------------------------------
// NfsOrigin

Result<std::unique_ptr<NfsOrigin>> NfsOrigin::Create(const std::string& source, const OriginOptions& options) {
  HOARD_ASSIGN_OR_RETURN(NfsUrl url, NfsUrl::Parse(source));
  NfsTarget target{source, url, std::max(1, options.timeout_ms)};

  // The export: the longest prefix of the path the server lets us mount.
  std::unique_ptr<NfsConnection> conn;
  std::string export_path;
  Status last;
  for (const std::string& candidate : url.ExportCandidates()) {
    Failure failure;
    Result<std::unique_ptr<NfsConnection>> c = Connect(target, candidate, &failure);
    if (c.ok()) {
      conn = std::move(*c);
      export_path = candidate;
      break;
    }
    // Only a refusal from the MOUNT service means "try a shorter prefix";
    // a server that does not answer will not answer the next one either.
    if (failure != Failure::kAnswer) return c.status();
    last = c.status();
  }
  if (conn == nullptr) {
    return Status::NotFound(source + ": no prefix of " + url.path + " is exported by " + url.host + " (" +
                            last.message() + ")");
  }
  const std::string root = url.BelowExport(export_path);
  const uint64_t read_max = conn->read_max();

  auto pool = std::make_shared<NfsConnectionPool>(target, export_path, root, options.max_connections);
  pool->Adopt(std::move(conn));
  std::unique_ptr<NfsOrigin> origin(new NfsOrigin(source, export_path, root, read_max, std::move(pool)));
  Result<OriginEntry> top = origin->Stat("");
  if (!top.ok()) {
    if (top.status().code() != Code::kNotFound) return top.status();
    return Status::NotFound(source + ": " + url.path + " does not exist on " + url.host + " (mounted export " +
                            export_path + ")");
  }
  if (top->type != EntryType::kDir) {
    return Status::InvalidArgument(source + ": " + url.path + " is not a directory");
  }
  spdlog::debug("{}: mounted export {} (root '{}', read max {} bytes)", source, export_path, root, read_max);
  return origin;
}

NfsOrigin::NfsOrigin(std::string source, std::string export_path, std::string root, uint64_t read_max,
                     std::shared_ptr<NfsConnectionPool> pool)
    : source_(std::move(source)),
      export_path_(std::move(export_path)),
      root_(std::move(root)),
      read_max_(read_max),
      pool_(std::move(pool)) {}

NfsOrigin::~NfsOrigin() = default;

Status NfsOrigin::Walk(const std::function<Status(const OriginEntry&)>& visit) {
  // A directory is listed on a leased connection and visited after the lease
  // is returned: `visit` may call back into this origin.
  std::vector<std::string> pending = {""};
  while (!pending.empty()) {
    std::string dir_path = std::move(pending.back());
    pending.pop_back();
    std::vector<OriginEntry> entries;
    Status s = pool_->Run("", [&](NfsConnection& conn) -> Outcome {
      entries.clear();
      nfsdir* dir = nullptr;
      int rc = nfs_opendir(conn.ctx(), pool_->Full(dir_path).c_str(), &dir);
      if (rc < 0) return pool_->Fail(rc, conn, "opendir", dir_path);
      std::unique_ptr<nfsdir, std::function<void(nfsdir*)>> closer(dir, [&](nfsdir* d) { nfs_closedir(conn.ctx(), d); });
      // nfs_opendir has fetched the whole listing (READDIRPLUS: names with
      // attributes); nfs_readdir only iterates it.
      while (nfsdirent* de = nfs_readdir(conn.ctx(), dir)) {
        std::string_view name(de->name);
        if (name == "." || name == "..") continue;
        std::string path = JoinOriginPath(dir_path, name);
        if (!IsSafeName(name)) {
          spdlog::warn("origin {}: skipping unsafe name in '{}'", source_, dir_path);
          continue;
        }
        OriginEntry e;
        switch (de->type) {
          case NF3REG: e.type = EntryType::kFile; e.size = de->size; e.mode = S_IFREG; break;
          case NF3DIR: e.type = EntryType::kDir; e.mode = S_IFDIR; break;
          case NF3LNK: e.type = EntryType::kSymlink; e.mode = S_IFLNK; break;
          default:
            spdlog::debug("origin {}: skipping special file '{}'", source_, path);
            continue;
        }
        e.mode |= de->mode & 07777;
        e.uid = de->uid;
        e.gid = de->gid;
        e.mtime_ns = MtimeNs(static_cast<uint64_t>(de->mtime.tv_sec), de->mtime_nsec);
        e.path = std::move(path);
        if (e.type == EntryType::kSymlink) {
          Outcome out = ReadLink(*pool_, conn, e.path, &e);
          if (!out.status.ok()) {
            if (out.status.code() == Code::kNotFound) continue;  // removed since the listing
            return out;
          }
        }
        entries.push_back(std::move(e));
      }
      return Done();
    });
    if (!s.ok()) {
      if (s.code() == Code::kNotFound && !dir_path.empty()) continue;  // removed since its parent was listed
      return s;
    }
    for (const OriginEntry& e : entries) {
      HOARD_RETURN_IF_ERROR(visit(e));
      if (e.type == EntryType::kDir) pending.push_back(e.path);
    }
  }
  return Status::Ok();
}

Result<OriginEntry> NfsOrigin::Stat(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  OriginEntry e;
  Status s = pool_->Run(path, [&](NfsConnection& conn) -> Outcome {
    nfs_stat_64 st;
    int rc = nfs_lstat64(conn.ctx(), pool_->Full(path).c_str(), &st);
    if (rc < 0) return pool_->Fail(rc, conn, "stat", path);
    std::optional<EntryType> type = TypeOfMode(st.nfs_mode);
    if (!type) {
      return Answer(Status::InvalidArgument(source_ + ": '" + std::string(path) +
                                            "' is a special file (fifo, socket or device)"));
    }
    e = OriginEntry{};
    e.path = std::string(path);
    e.type = *type;
    e.mode = static_cast<uint32_t>(st.nfs_mode);
    e.uid = static_cast<uint32_t>(st.nfs_uid);
    e.gid = static_cast<uint32_t>(st.nfs_gid);
    e.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
    if (*type == EntryType::kFile) e.size = st.nfs_size;
    if (*type == EntryType::kSymlink) return ReadLink(*pool_, conn, path, &e);
    return Done();
  });
  if (!s.ok()) return s;
  return e;
}

Status NfsOrigin::RunCall(std::string_view what, std::string_view path,
                          const std::function<int(nfs_context*)>& op) {
  return pool_->Run(path, [&](NfsConnection& conn) -> Outcome {
    const int rc = op(conn.ctx());
    if (rc >= 0) return Done();
    std::string error(conn.error());
    const Failure failure = Classify(rc, error);
    std::string msg = source_ + ": " + std::string(what) + " '" + std::string(path) + "': " + error;
    if (failure != Failure::kAnswer) return {Status::Unavailable(std::move(msg)), failure};
    // Not re-coded as the read path is: the checkpoint namespace needs
    // kNotDirectory and kIsDirectory. FromErrno keeps strerror's text, which
    // checkpoint/drain_health.cc reads to tell permission errors apart.
    return Answer(Status::FromErrno(-rc, msg));
  });
}

std::string NfsOrigin::NfsPath(std::string_view path) const { return pool_->Full(path); }

Result<std::unique_ptr<OriginFile>> NfsOrigin::Open(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  if (parts.empty()) return Status::InvalidArgument(source_ + ": cannot open the root directory");
  OriginEntry attrs;
  uint64_t fileid = 0;
  Status s = pool_->Run(path, [&](NfsConnection& conn) -> Outcome {
    nfsfh* fh = nullptr;
    nfs_stat_64 st;
    Outcome out = OpenFile(*pool_, conn, path, &fh, &st);
    if (!out.status.ok()) return out;
    // Kept open on this connection for the ReadAt calls that usually follow.
    conn.PutHandle(pool_->Full(path), st.nfs_ino, fh);
    fileid = st.nfs_ino;
    attrs.path = std::string(path);
    attrs.type = EntryType::kFile;
    attrs.mode = static_cast<uint32_t>(st.nfs_mode);
    attrs.uid = static_cast<uint32_t>(st.nfs_uid);
    attrs.gid = static_cast<uint32_t>(st.nfs_gid);
    attrs.size = st.nfs_size;
    attrs.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
    return Done();
  });
  if (!s.ok()) return s;
  return std::unique_ptr<OriginFile>(new NfsFile(pool_, std::move(attrs), fileid));
}

}  // namespace hoard
