// File: proto/curve.h
//
// CURVE authentication and encryption of every hoard connection.
//
// Keys. A cluster has three CURVE keypairs, made by `hoard keys gen DIR`
// (GenerateKeys), each in Z85 text, one key per file:
//   DIR/cluster.key (0600), DIR/cluster.pub  the cluster's keypair: the servers'
//                                            key, and the key members (nodes,
//                                            mounts) connect with
//   DIR/admin.key (0600),   DIR/admin.pub    the operator's keypair, for the
//                                            operations that change the cluster
//   DIR/client.key (0600, or 0640 root:GROUP with --client-group), client.pub
//                                            the job hooks' and users' keypair:
//                                            warm, leases, reads (proto/access.h)
// A daemon needs cluster.key and admin.pub, and client.pub to admit clients
// (LoadDaemonKeys; a directory from before the client key has none, and its
// daemons admit no client: `hoard keys client DIR` adds the pair). The CLI
// needs cluster.pub (or cluster.key) for the servers' key, and connects with
// the strongest secret key it can read: admin.key, else cluster.key, else
// client.key (LoadClientKeys), so a job's hook running as the job's user in
// the client group uses client.key. A public key is always derived from its secret key when
// the secret is at hand; a .pub file beside it that disagrees is an error.
//
// Who may do what. Every server socket is a CURVE server with the cluster
// key. A ZAP handler (one thread per process) admits a client whose public key
// is the cluster key (User-Id "member"), the admin key (User-Id "admin") or the
// client key (User-Id "client"), and refuses any other: the handshake fails, and the server never sees a
// message from it, let alone answers. A client without CURVE (or with a server
// key that is not the cluster's) cannot complete the handshake either. The
// server then checks each request's User-Id against proto/access.h.
//
// Binding. CurveSecurity::Enable attaches keys to a zmq context: every
// RpcServer and RpcClient made on that context afterwards uses them. A context
// without keys makes plain (insecure) sockets; daemons refuse to run that way
// unless given --insecure (DaemonSecurity). The context is the one thing every
// component that makes sockets is already handed, which is why the keys ride on
// it rather than on each component's options.
//
// Thread-safety: Enable and the destructor from one thread, while no socket of
// the context is being created; KeysFor from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/result.h"
#include "proto/message_types.h"

namespace CLI {
class App;
}

namespace hoard::proto {

inline constexpr const char* kClusterKeyFile = "cluster.key";
inline constexpr const char* kClusterPubFile = "cluster.pub";
inline constexpr const char* kAdminKeyFile = "admin.key";
inline constexpr const char* kAdminPubFile = "admin.pub";
inline constexpr const char* kClientKeyFile = "client.key";
inline constexpr const char* kClientPubFile = "client.pub";

// The User-Id the ZAP handler gives each admitted key; RpcServer reads it.
inline constexpr const char* kUserMember = "member";
inline constexpr const char* kUserAdmin = "admin";
inline constexpr const char* kUserClient = "client";

// The key class of a ZAP User-Id (null or unknown: kClient, the least).
KeyClass KeyClassOfUser(const char* user);

// Z85 keys, 40 characters each.
struct CurveKeys {
  std::string server_public;  // the cluster's public key: what clients expect of a server
  std::string client_public;  // the key this process connects with (cluster's or admin's)
  std::string client_secret;
  // Set only for a process that serves (a daemon): its server secret, and the
  // admin key its ZAP handler admits besides the cluster's.
  std::string server_secret;
  std::string admin_public;
  std::string client_class_public;  // the client key's; empty: no client is admitted

  bool admin_client = false;  // the client key is the admin key
  KeyClass key_class = KeyClass::kMember;  // what the key this process connects with may do

  bool can_serve() const { return !server_secret.empty(); }
};

// Writes the six key files into `dir` (created 0700 if missing). Refuses
// (kAlreadyExists) if any of them exists: new keys would lock out every
// process that has the old ones. `client_gid` >= 0: client.key is 0640 and
// owned by that group, and the directory 0750 of that group, so the group's
// users (job hooks) can read client.key and the public keys, never the other
// secrets (0600). Changing a file's group needs root (or membership).
Status GenerateKeys(const std::string& dir, int64_t client_gid = -1);
// Adds client.key and client.pub to a directory made before the client key
// (same modes as GenerateKeys). kAlreadyExists if client.key exists.
Status GenerateClientKey(const std::string& dir, int64_t client_gid = -1);

// The keys a daemon runs with: cluster.key, admin.pub and (if present)
// client.pub from `dir`.
Result<CurveKeys> LoadDaemonKeys(const std::string& dir);
// The keys the CLI connects with: the cluster's public key, and the first of
// admin.key, cluster.key, client.key that this process can read, skipping
// those of a class above `at_most` (a hook running as root asks for the
// client key: least privilege). NotFound if none is left.
Result<CurveKeys> LoadClientKeys(const std::string& dir, KeyClass at_most = KeyClass::kAdmin);

// Keys attached to a zmq context, with the ZAP handler of a serving process.
class CurveSecurity {
 public:
  // Attaches `keys` to `context`; with server keys, starts the ZAP handler
  // (bound before this returns, so no server socket ever runs without it:
  // libzmq would admit every key then). At most one per context.
  static Result<std::unique_ptr<CurveSecurity>> Enable(zmq::context_t& context, CurveKeys keys,
                                                       std::shared_ptr<spdlog::logger> logger);
  // Detaches the keys and stops the ZAP handler. Destroy before the context.
  ~CurveSecurity();
  CurveSecurity(const CurveSecurity&) = delete;
  CurveSecurity& operator=(const CurveSecurity&) = delete;

  const CurveKeys& keys() const { return keys_; }
  // Handshakes the ZAP handler refused (unknown keys).
  uint64_t refused() const { return refused_.load(); }

 private:
  CurveSecurity(zmq::context_t& context, CurveKeys keys, std::shared_ptr<spdlog::logger> logger);
  void ZapLoop();

  zmq::context_t& context_;
  CurveKeys keys_;
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<zmq::socket_t> zap_;  // the ZAP thread's after Enable
  std::thread zap_thread_;
  std::atomic<bool> stopping_{false};
  bool registered_ = false;  // in the registry (Enable succeeded)
  std::atomic<uint64_t> refused_{0};
};

// The keys attached to `context`, or null (plain sockets).
std::shared_ptr<const CurveKeys> KeysFor(const zmq::context_t& context);

// ZMTP PLAIN handshakes on sockets of ZAP domain `domain` (a data socket's:
// proto/data_channel.h) are checked by `check`, which returns the User-Id to
// admit the connection with, or "" to refuse it. The ZAP handler refuses a
// PLAIN handshake of a domain with no check. Register before the socket
// binds; unregister before whatever `check` uses goes away.
using PlainCheck = std::function<std::string(std::string_view user, std::string_view password)>;
void RegisterPlainDomain(const std::string& domain, PlainCheck check);
void UnregisterPlainDomain(const std::string& domain);

// Makes `socket` a CURVE server or client with the keys of its context; does
// nothing on a context without keys. kInvalidArgument for a server on a
// context whose keys cannot serve (the CLI's).
Status ApplyServerKeys(zmq::context_t& context, zmq::socket_t& socket);
void ApplyClientKeys(zmq::context_t& context, zmq::socket_t& socket);

// The two options every daemon takes, --keys DIR and --insecure.
struct SecurityFlags {
  std::string keys_dir;
  bool insecure = false;
};
void AddSecurityFlags(CLI::App& app, SecurityFlags* flags);

// What a daemon's main() does with --keys DIR and --insecure: loads the keys
// and enables them on `context`; with neither, refuses (kInvalidArgument with
// the reason); with --insecure alone, warns and returns null.
Result<std::unique_ptr<CurveSecurity>> DaemonSecurity(zmq::context_t& context, const std::string& keys_dir,
                                                      bool insecure, std::shared_ptr<spdlog::logger> logger);

}  // namespace hoard::proto
