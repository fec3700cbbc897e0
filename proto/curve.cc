#include "proto/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>

#include <CLI/CLI.hpp>
#include <zmq_addon.hpp>

#include "common/file_util.h"
#include "common/mutex.h"

namespace hoard::proto {
namespace {

constexpr size_t kZ85KeyLength = 40;
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

// Keys by context handle. Read at every socket creation; written only by
// Enable and ~CurveSecurity.
Mutex registry_mu;
std::map<const void*, std::shared_ptr<const CurveKeys>>& Registry() REQUIRES(registry_mu) {
  static auto* registry = new std::map<const void*, std::shared_ptr<const CurveKeys>>();
  return *registry;
}

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Writes a new file (it must not exist) with `mode`, fsynced.
Status WriteNewFile(const std::string& path, const std::string& data, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::FromErrno(errno, "create " + path);
  HOARD_RETURN_IF_ERROR(PwriteAll(fd.get(), data.data(), data.size(), 0));
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + path);
  return Status::Ok();
}

// A Z85 key from `path`: one line of 40 characters.
Result<std::string> ReadKey(const std::string& path, bool secret) {
  if (secret) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IRWXO) != 0) {
      return Status::InvalidArgument(path + " is readable by other users; chmod 600 it");
    }
  }
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return Status::NotFound(path + " does not exist");
    return text.status();
  }
  std::string key = *text;
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
  uint8_t raw[32];
  if (key.size() != kZ85KeyLength || zmq_z85_decode(raw, key.c_str()) == nullptr) {
    return Status::InvalidArgument(path + " is not a CURVE key (40 Z85 characters; make keys with hoard keys gen)");
  }
  return key;
}

Result<std::string> PublicOf(const std::string& secret, const std::string& path) {
  char pub[kZ85KeyLength + 1];
  if (zmq_curve_public(pub, secret.c_str()) != 0) {
    return Status::InvalidArgument(path + ": cannot derive its public key: " + zmq_strerror(errno));
  }
  return std::string(pub);
}

// A keypair from DIR/NAME.key; DIR/NAME.pub, if present, must match it.
Status ReadKeyPair(const std::string& dir, const char* key_file, const char* pub_file, std::string* pub,
                   std::string* secret) {
  const std::string key_path = JoinPath(dir, key_file);
  HOARD_ASSIGN_OR_RETURN(*secret, ReadKey(key_path, /*secret=*/true));
  HOARD_ASSIGN_OR_RETURN(*pub, PublicOf(*secret, key_path));
  const std::string pub_path = JoinPath(dir, pub_file);
  if (FileExists(pub_path)) {
    HOARD_ASSIGN_OR_RETURN(std::string on_disk, ReadKey(pub_path, /*secret=*/false));
    if (on_disk != *pub) return Status::InvalidArgument(pub_path + " is not the public key of " + key_path);
  }
  return Status::Ok();
}

std::string Decoded(const std::string& z85) {
  std::string raw(32, '\0');
  zmq_z85_decode(reinterpret_cast<uint8_t*>(raw.data()), z85.c_str());
  return raw;
}

}  // namespace

KeyClass KeyClassOfUser(const char* user) {
  const std::string_view u = user != nullptr ? user : "";
  if (u == kUserAdmin) return KeyClass::kAdmin;
  if (u == kUserMember) return KeyClass::kMember;
  return KeyClass::kClient;
}

namespace {

// Writes one new keypair DIR/KEY (0600; 0640 of `gid` when gid >= 0) and DIR/PUB.
Status WriteKeyPair(const std::string& dir, const char* key_file, const char* pub_file, int64_t gid) {
  char pub[kZ85KeyLength + 1], secret[kZ85KeyLength + 1];
  if (zmq_curve_keypair(pub, secret) != 0) {
    return Status::Internal(std::string("cannot make a CURVE keypair: ") + zmq_strerror(errno));
  }
  const std::string key_path = JoinPath(dir, key_file);
  HOARD_RETURN_IF_ERROR(WriteNewFile(key_path, std::string(secret) + "\n", gid >= 0 ? 0640 : 0600));
  if (gid >= 0) {
    if (::chown(key_path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0) {
      return Status::FromErrno(errno, "chgrp " + key_path);
    }
    ::chmod(key_path.c_str(), 0640);  // umask may have cut the group bit at create
  }
  return WriteNewFile(JoinPath(dir, pub_file), std::string(pub) + "\n", 0644);
}

// The directory is 0700, or 0750 of the client group: its users must reach
// client.key and the public keys inside.
Status SetDirMode(const std::string& dir, int64_t client_gid) {
  if (client_gid < 0) {
    ::chmod(dir.c_str(), 0700);  // best effort: the directory may be shared on purpose
    return Status::Ok();
  }
  if (::chown(dir.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(client_gid)) != 0) {
    return Status::FromErrno(errno, "chgrp " + dir);
  }
  if (::chmod(dir.c_str(), 0750) != 0) return Status::FromErrno(errno, "chmod " + dir);
  return Status::Ok();
}

}  // namespace

Status GenerateClientKey(const std::string& dir, int64_t client_gid) {
  HOARD_RETURN_IF_ERROR(MakeDirs(dir));
  for (const char* f : {kClientKeyFile, kClientPubFile}) {
    if (FileExists(JoinPath(dir, f))) return Status::AlreadyExists(JoinPath(dir, f) + " exists");
  }
  HOARD_RETURN_IF_ERROR(SetDirMode(dir, client_gid));
  HOARD_RETURN_IF_ERROR(WriteKeyPair(dir, kClientKeyFile, kClientPubFile, client_gid));
  return SyncDir(dir);
}

Status GenerateKeys(const std::string& dir, int64_t client_gid) {
  HOARD_RETURN_IF_ERROR(MakeDirs(dir));
  for (const char* f : {kClusterKeyFile, kClusterPubFile, kAdminKeyFile, kAdminPubFile, kClientKeyFile,
                        kClientPubFile}) {
    if (FileExists(JoinPath(dir, f))) {
      return Status::AlreadyExists(JoinPath(dir, f) +
                                   " exists; new keys would lock out every process that has the old ones");
    }
  }
  HOARD_RETURN_IF_ERROR(SetDirMode(dir, client_gid));
  HOARD_RETURN_IF_ERROR(WriteKeyPair(dir, kClusterKeyFile, kClusterPubFile, -1));
  HOARD_RETURN_IF_ERROR(WriteKeyPair(dir, kAdminKeyFile, kAdminPubFile, -1));
  HOARD_RETURN_IF_ERROR(WriteKeyPair(dir, kClientKeyFile, kClientPubFile, client_gid));
  return SyncDir(dir);
}

Result<CurveKeys> LoadDaemonKeys(const std::string& dir) {
  CurveKeys k;
  HOARD_RETURN_IF_ERROR(ReadKeyPair(dir, kClusterKeyFile, kClusterPubFile, &k.server_public, &k.server_secret));
  k.client_public = k.server_public;
  k.client_secret = k.server_secret;
  HOARD_ASSIGN_OR_RETURN(k.admin_public, ReadKey(JoinPath(dir, kAdminPubFile), /*secret=*/false));
  if (k.admin_public == k.server_public) {
    return Status::InvalidArgument(dir + ": the admin key is the cluster key; make keys with hoard keys gen");
  }
  if (FileExists(JoinPath(dir, kClientPubFile))) {
    HOARD_ASSIGN_OR_RETURN(k.client_class_public, ReadKey(JoinPath(dir, kClientPubFile), /*secret=*/false));
    if (k.client_class_public == k.server_public || k.client_class_public == k.admin_public) {
      return Status::InvalidArgument(dir + ": the client key is the cluster or admin key; make keys with hoard keys gen");
    }
  }
  return k;
}

Result<CurveKeys> LoadClientKeys(const std::string& dir, KeyClass at_most) {
  CurveKeys k;
  // Readable, not just there: a job's user in the client group sees the
  // operator's secrets in the directory listing but may not open them.
  auto usable = [&](const char* f, KeyClass c) {
    return static_cast<uint8_t>(c) <= static_cast<uint8_t>(at_most) && ::access(JoinPath(dir, f).c_str(), R_OK) == 0;
  };
  if (::access(JoinPath(dir, kClusterKeyFile).c_str(), R_OK) == 0) {
    // The servers' key from the secret when at hand (it checks cluster.pub).
    std::string pub, secret;
    HOARD_RETURN_IF_ERROR(ReadKeyPair(dir, kClusterKeyFile, kClusterPubFile, &pub, &secret));
    k.server_public = pub;
    if (usable(kClusterKeyFile, KeyClass::kMember)) {
      k.client_public = pub;
      k.client_secret = secret;
      k.key_class = KeyClass::kMember;
    }
  } else {
    HOARD_ASSIGN_OR_RETURN(k.server_public, ReadKey(JoinPath(dir, kClusterPubFile), /*secret=*/false));
  }
  if (usable(kAdminKeyFile, KeyClass::kAdmin)) {
    HOARD_RETURN_IF_ERROR(ReadKeyPair(dir, kAdminKeyFile, kAdminPubFile, &k.client_public, &k.client_secret));
    k.admin_client = true;
    k.key_class = KeyClass::kAdmin;
  } else if (k.client_secret.empty()) {
    if (!usable(kClientKeyFile, KeyClass::kClient)) {
      return Status::NotFound(dir + " has none of " + kAdminKeyFile + ", " + kClusterKeyFile + ", " + kClientKeyFile +
                              " readable by this user (and allowed by the key class asked for): nothing to connect "
                              "with");
    }
    HOARD_RETURN_IF_ERROR(ReadKeyPair(dir, kClientKeyFile, kClientPubFile, &k.client_public, &k.client_secret));
    k.key_class = KeyClass::kClient;
  }
  return k;
}

CurveSecurity::CurveSecurity(zmq::context_t& context, CurveKeys keys, std::shared_ptr<spdlog::logger> logger)
    : context_(context), keys_(std::move(keys)), logger_(std::move(logger)) {}

Result<std::unique_ptr<CurveSecurity>> CurveSecurity::Enable(zmq::context_t& context, CurveKeys keys,
                                                             std::shared_ptr<spdlog::logger> logger) {
  if (!zmq_has("curve")) return Status::Unavailable("this libzmq was built without CURVE");
  MutexLock lock(&registry_mu);
  if (Registry().count(context.handle()) != 0) return Status::AlreadyExists("this zmq context already has keys");
  std::unique_ptr<CurveSecurity> s(new CurveSecurity(context, std::move(keys), std::move(logger)));
  if (s->keys_.can_serve()) {
    try {
      s->zap_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep);
      s->zap_->set(zmq::sockopt::linger, 0);
      s->zap_->bind(kZapEndpoint);
    } catch (const zmq::error_t& e) {
      return Status::Internal(std::string("cannot start the ZAP handler: ") + e.what());
    }
    s->zap_thread_ = std::thread([p = s.get()] { p->ZapLoop(); });
  }
  Registry().emplace(context.handle(), std::make_shared<const CurveKeys>(s->keys_));
  s->registered_ = true;
  return s;
}

CurveSecurity::~CurveSecurity() {
  if (registered_) {
    MutexLock lock(&registry_mu);
    Registry().erase(context_.handle());
  }
  stopping_ = true;
  if (zap_thread_.joinable()) zap_thread_.join();
  zap_.reset();
}

namespace {

Mutex plain_mu;
std::map<std::string, PlainCheck>& PlainDomains() REQUIRES(plain_mu) {
  static auto* domains = new std::map<std::string, PlainCheck>();
  return *domains;
}

}  // namespace

void RegisterPlainDomain(const std::string& domain, PlainCheck check) {
  MutexLock lock(&plain_mu);
  PlainDomains()[domain] = std::move(check);
}

void UnregisterPlainDomain(const std::string& domain) {
  MutexLock lock(&plain_mu);
  PlainDomains().erase(domain);
}

void CurveSecurity::ZapLoop() {
  const std::string cluster = Decoded(keys_.server_public), admin = Decoded(keys_.admin_public);
  const std::string client = keys_.client_class_public.empty() ? "" : Decoded(keys_.client_class_public);
  while (!stopping_.load()) {
    std::vector<zmq::message_t> req;
    try {
      zmq::pollitem_t item{zap_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      if (!zmq::recv_multipart(*zap_, std::back_inserter(req))) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      logger_->error("ZAP handler: {}", e.what());
      continue;
    }
    // RFC 27: version, request id, domain, address, identity, mechanism,
    // credentials. Anything else from libzmq would be a bug; refuse it.
    std::string user;
    std::string address = req.size() > 3 ? req[3].to_string() : "?";
    if (req.size() == 7 && req[0].to_string_view() == "1.0" && req[5].to_string_view() == "CURVE") {
      const std::string_view key = req[6].to_string_view();
      if (key == cluster) user = kUserMember;
      else if (key == admin) user = kUserAdmin;
      else if (!client.empty() && key == client) user = kUserClient;
    } else if (req.size() == 8 && req[0].to_string_view() == "1.0" && req[5].to_string_view() == "PLAIN") {
      PlainCheck check;
      {
        MutexLock lock(&plain_mu);
        auto it = PlainDomains().find(req[2].to_string());
        if (it != PlainDomains().end()) check = it->second;
      }
      if (check) user = check(req[6].to_string_view(), req[7].to_string_view());
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    reply.emplace_back(req.size() > 1 ? req[1].to_string_view() : std::string_view());
    reply.emplace_back(std::string_view(user.empty() ? "400" : "200"));
    reply.emplace_back(std::string_view(user.empty() ? "unknown key" : "OK"));
    reply.emplace_back(std::string_view(user));
    reply.emplace_back(std::string_view());
    if (user.empty()) {
      // Rate-limited by the handshake itself (a full CURVE exchange each).
      if (refused_.fetch_add(1) % 100 == 0) {
        logger_->warn("refused a connection from {} with an unknown key ({} so far)", address, refused_.load());
      }
    }
    try {
      zmq::send_multipart(*zap_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      logger_->error("ZAP handler: {}", e.what());
    }
  }
}

std::shared_ptr<const CurveKeys> KeysFor(const zmq::context_t& context) {
  MutexLock lock(&registry_mu);
  auto it = Registry().find(const_cast<zmq::context_t&>(context).handle());
  return it == Registry().end() ? nullptr : it->second;
}

Status ApplyServerKeys(zmq::context_t& context, zmq::socket_t& socket) {
  std::shared_ptr<const CurveKeys> k = KeysFor(context);
  if (k == nullptr) return Status::Ok();
  if (!k->can_serve()) return Status::InvalidArgument("these keys cannot serve: cluster.key and admin.pub needed");
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, k->server_secret);
  // The ZAP handler of the context was bound by Enable, before any server
  // socket: libzmq consults it for every CURVE handshake (without one it
  // would admit any key).
  socket.set(zmq::sockopt::zap_domain, "hoard");
  return Status::Ok();
}

void ApplyClientKeys(zmq::context_t& context, zmq::socket_t& socket) {
  std::shared_ptr<const CurveKeys> k = KeysFor(context);
  if (k == nullptr) return;
  socket.set(zmq::sockopt::curve_serverkey, k->server_public);
  socket.set(zmq::sockopt::curve_publickey, k->client_public);
  socket.set(zmq::sockopt::curve_secretkey, k->client_secret);
}

Result<std::unique_ptr<CurveSecurity>> DaemonSecurity(zmq::context_t& context, const std::string& keys_dir,
                                                      bool insecure, std::shared_ptr<spdlog::logger> logger) {
  if (keys_dir.empty()) {
    if (!insecure) {
      return Status::InvalidArgument(
          "no --keys DIR: every connection is authenticated and encrypted with the cluster's keys (make them with "
          "hoard keys gen DIR); --insecure runs without, for a trusted network only");
    }
    logger->warn("--insecure: connections are neither authenticated nor encrypted");
    return std::unique_ptr<CurveSecurity>();
  }
  if (insecure) return Status::InvalidArgument("--keys and --insecure contradict each other");
  HOARD_ASSIGN_OR_RETURN(CurveKeys keys, LoadDaemonKeys(keys_dir));
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<CurveSecurity> s, CurveSecurity::Enable(context, std::move(keys), logger));
  logger->info("CURVE keys from {}", keys_dir);
  return s;
}

void AddSecurityFlags(CLI::App& app, SecurityFlags* flags) {
  app.add_option("--keys", flags->keys_dir,
                 "Directory with the cluster's CURVE keys (cluster.key, admin.pub; made by hoard keys gen)");
  app.add_flag("--insecure", flags->insecure,
               "Run without --keys: no authentication, no encryption (a trusted network only)");
}

}  // namespace hoard::proto
