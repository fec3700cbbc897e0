// File: cli/context.h
//
// What every `hoard` command shares: the global options, how the coordinator
// is found, and how results and errors are printed.
//
// Coordinator discovery, first match wins:
//   --coordinator ENDPOINT, $HOARD_COORDINATOR, the local cluster started by
//   `hoard local up` (DIR/cluster.json, DIR = --dir or $HOARD_LOCAL_DIR or
//   /tmp/hoard), then tcp://127.0.0.1:7100. Each may be a comma-separated
//   list of the coordinators of an HA cluster: calls go to whichever leads
//   (proto/leader_client.h), waiting up to 15 s for a takeover.
//
// Keys (proto/curve.h), first match wins: --keys DIR, $HOARD_KEYS, the keys
// of the local cluster when the coordinator came from its cluster.json, else
// none (a plain connection, which only a coordinator run with --insecure
// accepts). The CLI connects with the strongest secret key in DIR it can read
// (admin.key, cluster.key, client.key: proto/access.h), or no stronger than
// --key-class / $HOARD_KEY_CLASS (job hooks ask for "client").
//
// Output: human text on stdout by default; with --json exactly one JSON
// document on stdout (progress goes to stderr). A failure prints one line
// "hoard: REASON" on stderr (and {"error": ..., "code": ...} with --json,
// with what the command saw so far beside them: FailWith) and the command
// exits non-zero: 2 for bad usage or bad input (an InvalidArgument status), 3 when the coordinator could not be reached (the
// last call got no answer at all, or only standbys answered and none led; a coordinator that refuses our key looks
// the same: a CURVE handshake it refuses gets no answer), 4 when it refused
// the request because it needs the admin key (PermissionDenied), 1 for any
// other failure, including an Unavailable status the coordinator answered with
// (e.g. an NFS origin that is down). Field names: docs/cli-json.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/result.h"
#include "proto/curve.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard::cli {

inline constexpr const char* kDefaultLocalDir = "/tmp/hoard";

struct GlobalOptions {
  std::string coordinator;  // empty: discover
  std::string local_dir;    // empty: $HOARD_LOCAL_DIR or kDefaultLocalDir
  std::string keys;         // empty: $HOARD_KEYS, else the local cluster's, else none
  // The strongest key class to connect with: "admin" (default), "member" or
  // "client"; empty: $HOARD_KEY_CLASS, else "admin".
  std::string key_class;
  bool json = false;
  int timeout_ms = 10000;   // per request
};

class Context {
 public:
  explicit Context(GlobalOptions options);

  const GlobalOptions& options() const { return options_; }
  bool json() const { return options_.json; }
  std::string LocalDir() const;
  // The coordinator endpoint (or list), by the discovery order above.
  std::string CoordinatorEndpoint() const;
  // The keys directory, by the order above; empty for none.
  std::string KeysDir() const;

  // Calls the coordinator with the configured timeout (or `timeout`).
  template <typename Req>
  Result<typename Req::Reply> Call(const Req& req, std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    if (!client_) {
      if (Status s = CheckEndpoint(); !s.ok()) return s;
      if (Status s = EnableKeys(); !s.ok()) return s;
      client_ = std::make_unique<proto::LeaderClient>(zmq_, CoordinatorEndpoint());
      // A coordinator that is not there should be reported in seconds; the
      // request timeout is for slow answers (a big walk, a busy server).
      client_->set_connect_timeout(std::chrono::milliseconds(std::min(options_.timeout_ms, 2000)));
    }
    auto t = timeout.count() > 0 ? timeout : std::chrono::milliseconds(options_.timeout_ms);
    if (call_deadline_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*call_deadline_ -
                                                                              std::chrono::steady_clock::now());
      t = std::min(t, std::max(left, kMinCappedCall));
    }
    auto r = client_->Call(req, t);
    unreachable_ = !client_->last_call_answered() || r.status().code() == Code::kNotLeader;
    timed_out_ = client_->last_call_timed_out();
    return r;
  }

  // Until ClearCallDeadline, every Call ends by `deadline` (but is given at
  // least kMinCappedCall): a wait bounded in time (WaitUntil riding out a
  // coordinator that does not answer) is not overrun by a whole request
  // timeout.
  void SetCallDeadline(std::chrono::steady_clock::time_point deadline) { call_deadline_ = deadline; }
  void ClearCallDeadline() { call_deadline_.reset(); }
  static constexpr std::chrono::milliseconds kMinCappedCall{200};

  // The context of Call's client, for calls to other servers (node agents):
  // its keys are loaded by the first Call.
  zmq::context_t& zmq() { return zmq_; }

  // The last call got no answer at all (no coordinator there, or it died).
  bool unreachable() const { return unreachable_; }
  // ... because its timeout passed while the coordinator was connected: it
  // got the request and may still be working on it (unreachable() too).
  bool timed_out() const { return timed_out_; }

  // Prints `doc` (with --json) or `text` (otherwise) and returns 0.
  int Done(const nlohmann::json& doc, const std::string& text);
  // Prints the failure as described above and returns the exit code. With
  // `reached`, a call that got no answer is not reported as an unreachable
  // coordinator (exit 1, not 3): the caller knows it got the request.
  int Fail(const Status& status, bool reached = false);
  // Fail, where the JSON error document is `doc` (an object: what the
  // command saw before it failed, e.g. a wait's last progress) with "error"
  // and "code" added, so a script keeps the state along with the reason.
  int FailWith(const Status& status, nlohmann::json doc, bool reached = false);

 private:
  // Loads the keys (KeysDir) onto zmq_, once.
  Status EnableKeys();
  // InvalidArgument (exit 2) for an endpoint (of the list) that is not tcp:// or ipc://.
  Status CheckEndpoint() const;
  // The local cluster's record (DIR/cluster.json), or null.
  nlohmann::json LocalRecord() const;

  GlobalOptions options_;
  zmq::context_t zmq_;
  std::unique_ptr<proto::CurveSecurity> security_;  // before client_: outlives it
  std::unique_ptr<proto::LeaderClient> client_;
  bool unreachable_ = false;  // the last call got no answer at all: exit status 3
  bool timed_out_ = false;
  std::optional<std::chrono::steady_clock::time_point> call_deadline_;  // see SetCallDeadline
};

// What this process says of itself in requests that carry a Caller (the
// audit log's claims): its uid, `job`, and the host's name.
proto::Caller SelfCaller(const std::string& job);

}  // namespace hoard::cli
