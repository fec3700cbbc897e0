// File: origin/nfs_pool.h
//
// Connections to one NFSv3 export, shared by the read origin
// (origin/nfs_origin.h) and the writable checkpoint origin
// (origin/nfs_ckpt_origin.h): connecting and mounting, finding the export,
// leasing a connection per call, and dropping and replacing broken ones.
// Everything speaks libnfs's synchronous API (no kernel NFS client is
// needed, or available on our machines).
//
// Export discovery (NfsConnectionPool::Open): the export is the longest
// prefix of the URL's path the server lets us mount (NfsUrl::
// ExportCandidates); the rest of the path is the origin root inside the
// export. Only a refusal from the MOUNT service moves on to a shorter
// prefix; a server that does not answer fails the Open at once.
//
// Leases: a libnfs context is not thread-safe, so the pool keeps up to
// OriginOptions::max_connections connected and mounted contexts, and each
// call (Run, RunCall) leases one for its duration only; a caller that finds
// all of them leased waits for one. Nobody holds a connection between calls:
// holding one for a file's lifetime would let max_connections open files (or
// one thread holding two) starve or deadlock every other caller. A
// connection instead caches the libnfs handles of the files recently opened
// on it (a handle belongs to the context that opened it), and a call may name
// the path it is about so that a connection that already has its handle is
// preferred.
//
// Failures: every RPC is bounded by OriginOptions::timeout_ms
// (nfs_set_timeout); connecting and mounting, which libnfs does not bound
// (a TCP connect to a host that drops packets waits minutes), run through
// libnfs's async API under our own deadline. libnfs's own reconnect is off:
// a connection that breaks is dropped from the pool, the call is retried
// once on a fresh connection (an idle connection closed by the server fails
// that way), and if that fails too the caller gets kUnavailable. A timeout
// drops the connection without a retry. So a dead or frozen server yields
// kUnavailable within about timeout_ms per RPC, never a hang, and calls
// succeed again once it is back.
//
// Thread-safety: NfsConnectionPool may be used from many threads at once.
// An NfsConnection is used by one thread at a time: whoever leased it.
//
// Invariants: connections idle + leased + being connected <= max (at least
// 1); every connection in the pool is mounted on export_path().
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"
#include "origin/nfs_url.h"
#include "origin/origin.h"

struct nfs_context;
struct nfsfh;

namespace hoard {

// How a failed libnfs call failed, which decides what happens to its
// connection.
enum class NfsFailure {
  kAnswer,      // the server answered with an error: the connection is fine
  kTimeout,     // no answer in time: drop the connection, do not retry
  kConnection,  // the transport broke: drop the connection, retry once
};

// The result of one attempt of an operation on a connection.
struct NfsOutcome {
  Status status;
  NfsFailure failure = NfsFailure::kAnswer;  // meaningful only when !status.ok()

  static NfsOutcome Done() { return {}; }
  // An error decided by the caller, not the transport: the connection stays.
  static NfsOutcome Answer(Status s) { return {std::move(s), NfsFailure::kAnswer}; }
};

// One mounted libnfs context and the file handles opened on it.
class NfsConnection {
 public:
  explicit NfsConnection(nfs_context* ctx) : ctx_(ctx) {}
  ~NfsConnection();  // closes the cached handles, then the context
  NfsConnection(const NfsConnection&) = delete;
  NfsConnection& operator=(const NfsConnection&) = delete;

  nfs_context* ctx() const { return ctx_; }
  // libnfs's message for the last failed call on this context.
  std::string_view error() const;
  // The largest READ the server accepts, in bytes (a safe default before
  // FSINFO has told us).
  uint64_t read_max() const;

  // The handle cache: up to a fixed number of handles, most recently used
  // first; `path` is the full path as given to nfs_open.
  bool HasHandle(std::string_view path) const;
  // The cached handle for `path` if it is the file `fileid`; else nullptr
  // (and a handle of another file at that path is closed).
  nfsfh* FindHandle(std::string_view path, uint64_t fileid);
  // Takes ownership of `fh`, replacing any handle cached for `path`.
  void PutHandle(std::string path, uint64_t fileid, nfsfh* fh);
  void DropHandle(std::string_view path);

 private:
  struct Handle {
    std::string path;  // as given to nfs_open
    uint64_t fileid;
    nfsfh* fh;
  };
  nfs_context* const ctx_;
  std::list<Handle> handles_;
};

class NfsConnectionPool {
 public:
  // Parses `source` (origin/nfs_url.h), connects, finds the export and
  // mounts it; the pool starts with that one connection. Does not check the
  // root inside the export (the read origin does). kInvalidArgument for a
  // bad URL, kNotFound if no prefix of the path is exported, kUnavailable if
  // the server does not answer in time.
  static Result<std::shared_ptr<NfsConnectionPool>> Open(const std::string& source, const OriginOptions& options);
  ~NfsConnectionPool();

  const std::string& source() const { return target_.source; }
  const NfsUrl& url() const { return target_.url; }
  // The export that was mounted, e.g. "/srv/data".
  const std::string& export_path() const { return export_path_; }
  // The origin root inside the export ("" when the URL names the export).
  const std::string& root_in_export() const { return root_; }
  // The first connection's largest READ, in bytes.
  uint64_t read_max() const { return read_max_; }

  // The path libnfs wants (absolute inside the export) for an origin path.
  std::string Full(std::string_view rel) const;

  // Runs `op` on a leased connection, preferring one that has the handle
  // of `prefer_path` (an origin path; "" for no preference). A broken
  // connection is dropped; after a transport failure (not a timeout) the call
  // is tried once more on a fresh connection, so `op` may be called twice and
  // must be idempotent given its own progress. Gives `op`'s status.
  Status Run(std::string_view prefer_path, const std::function<NfsOutcome(NfsConnection&)>& op);

  // An outcome for a failed libnfs call `op` on `path`, as the read path
  // codes it: an answer's errno through CodeFromErrno and OriginReadError
  // (origin/origin_path.h), a timeout or a broken transport kUnavailable.
  NfsOutcome Fail(int rc, const NfsConnection& conn, std::string_view op, std::string_view path) const;

  // The write primitive of the checkpoint origin: Run for a plain libnfs
  // call. `op` returns 0 (or any value >= 0) or a libnfs error (a negative
  // errno). A timeout or a broken transport gives kUnavailable, and after a
  // broken transport (not a timeout) `op` runs once more on a fresh
  // connection, so `op` must be idempotent or detect its second run itself.
  // An error answer from the server gives Status::FromErrno(-rc, "SOURCE:
  // WHAT 'PATH': libnfs's message"), so EEXIST, ENOTEMPTY, ENOTDIR,
  // ENOSPC... keep their POSIX meaning (NFS3ERR_STALE is kStale,
  // NFS3ERR_JUKEBOX kUnavailable), unlike Fail. Handles opened by `op` belong
  // to that connection: close them in `op`.
  Status RunCall(std::string_view what, std::string_view path, const std::function<int(nfs_context*)>& op);

 private:
  // What every connection of the pool connects to.
  struct Target {
    std::string source;  // for messages
    NfsUrl url;
    int timeout_ms = 10'000;
  };

  // Connects to the target's server and mounts `export_path`, all under one
  // deadline of timeout_ms; `failure` says how it failed.
  static Result<std::unique_ptr<NfsConnection>> Connect(const Target& target, const std::string& export_path,
                                                        NfsFailure* failure);
  NfsConnectionPool(Target target, std::string export_path, std::string root, uint64_t read_max, int max);

  // Puts an already mounted connection (from export discovery) in the pool.
  void Adopt(std::unique_ptr<NfsConnection> conn) EXCLUDES(mu_);
  // An idle connection (preferring one with prefer_path's handle), or a new
  // one while fewer than max_ exist; otherwise waits for one.
  Result<std::unique_ptr<NfsConnection>> Acquire(std::string_view prefer_path) EXCLUDES(mu_);
  void Release(std::unique_ptr<NfsConnection> conn) EXCLUDES(mu_);
  void Discard(std::unique_ptr<NfsConnection> conn) EXCLUDES(mu_);

  const Target target_;
  const std::string export_path_;
  const std::string root_;
  const std::string base_;  // "" or "/root/in/export"
  const uint64_t read_max_;
  const int max_;

  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<NfsConnection>> idle_ GUARDED_BY(mu_);  // most recently used last
  int total_ GUARDED_BY(mu_) = 0;                                     // idle + leased + being connected
};

}  // namespace hoard
