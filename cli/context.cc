#include "cli/context.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/file_util.h"

namespace hoard::cli {

Context::Context(GlobalOptions options) : options_(std::move(options)) {}

std::string Context::LocalDir() const {
  if (!options_.local_dir.empty()) return options_.local_dir;
  if (const char* env = std::getenv("HOARD_LOCAL_DIR"); env != nullptr && *env != '\0') return env;
  return kDefaultLocalDir;
}

nlohmann::json Context::LocalRecord() const {
  Result<std::string> cluster = ReadFile(JoinPath(LocalDir(), "cluster.json"));
  if (!cluster.ok()) return nullptr;
  nlohmann::json doc = nlohmann::json::parse(*cluster, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() ? doc : nlohmann::json(nullptr);
}

std::string Context::CoordinatorEndpoint() const {
  if (!options_.coordinator.empty()) return options_.coordinator;
  if (const char* env = std::getenv("HOARD_COORDINATOR"); env != nullptr && *env != '\0') return env;
  nlohmann::json doc = LocalRecord();
  if (doc.is_object() && doc.contains("coordinator") && doc["coordinator"].is_string()) {
    return doc["coordinator"].get<std::string>();
  }
  return "tcp://127.0.0.1:7100";
}

proto::Caller SelfCaller(const std::string& job) {
  proto::Caller c;
  c.uid = static_cast<int64_t>(::getuid());
  c.job = job;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) c.host = host;
  return c;
}

std::string Context::KeysDir() const {
  if (!options_.keys.empty()) return options_.keys;
  if (const char* env = std::getenv("HOARD_KEYS"); env != nullptr && *env != '\0') return env;
  // The local cluster's keys go with its coordinator only.
  if (!options_.coordinator.empty()) return "";
  if (const char* env = std::getenv("HOARD_COORDINATOR"); env != nullptr && *env != '\0') return "";
  nlohmann::json doc = LocalRecord();
  if (doc.is_object() && doc.contains("keys") && doc["keys"].is_string()) return doc["keys"].get<std::string>();
  return "";
}

Status Context::EnableKeys() {
  if (security_) return Status::Ok();
  const std::string dir = KeysDir();
  if (dir.empty()) return Status::Ok();
  // Keys that cannot be read are bad input (exit 2), whatever the cause: a
  // missing file must not read as "no such dataset" (NotFound) to a script.
  std::string cls = options_.key_class;
  if (cls.empty()) {
    if (const char* env = std::getenv("HOARD_KEY_CLASS"); env != nullptr) cls = env;
  }
  proto::KeyClass at_most = proto::KeyClass::kAdmin;
  if (cls == "client") at_most = proto::KeyClass::kClient;
  else if (cls == "member") at_most = proto::KeyClass::kMember;
  else if (!cls.empty() && cls != "admin") {
    return Status::InvalidArgument("key class '" + cls + "': use admin, member or client");
  }
  Result<proto::CurveKeys> keys = proto::LoadClientKeys(dir, at_most);
  if (!keys.ok()) return Status::InvalidArgument("keys: " + keys.status().message());
  Result<std::unique_ptr<proto::CurveSecurity>> s =
      proto::CurveSecurity::Enable(zmq_, std::move(*keys), spdlog::default_logger());
  if (!s.ok()) return s.status();
  security_ = std::move(*s);
  return Status::Ok();
}

int Context::Done(const nlohmann::json& doc, const std::string& text) {
  // Names (paths, dataset sources) need not be UTF-8; dump() would throw.
  if (options_.json) {
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else if (!text.empty()) {
    std::cout << text;
    if (text.back() != '\n') std::cout << '\n';
    std::cout.flush();
  }
  return 0;
}

Status Context::CheckEndpoint() const {
  const std::string list = CoordinatorEndpoint();
  std::vector<std::string> eps = proto::SplitEndpoints(list);
  if (eps.empty()) eps.push_back(list);
  for (const std::string& ep : eps) {
    if (ep.rfind("tcp://", 0) != 0 && ep.rfind("ipc://", 0) != 0) {
      return Status::InvalidArgument("coordinator endpoint '" + ep +
                                     "': use tcp://HOST:PORT (or ipc://PATH), several separated by commas");
    }
  }
  return Status::Ok();
}

int Context::Fail(const Status& status, bool reached) {
  return FailWith(status, nlohmann::json::object(), reached);
}

int Context::FailWith(const Status& status, nlohmann::json doc, bool reached) {
  const bool unreachable = unreachable_ && !reached;
  std::string reason = status.message();
  if (unreachable) {
    const std::string keys = KeysDir();
    reason += " (is the cluster up? coordinator: " + CoordinatorEndpoint() +
              (keys.empty() ? "; no keys: if the cluster has keys, pass --keys DIR or set HOARD_KEYS"
                            : "; keys: " + keys + ", which it must accept") + ")";
  }
  if (options_.json) {
    if (!doc.is_object()) doc = nlohmann::json::object();
    doc["error"] = reason;
    doc["code"] = std::string(CodeName(status.code()));
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  std::cerr << "hoard: " << reason << std::endl;
  // 3 only when the coordinator gave no answer at all: an Unavailable it
  // answers with (an origin that is down, a busy server) is a failed
  // operation, and a script must not take it for a cluster that is not there.
  if (status.code() == Code::kInvalidArgument) return 2;
  if (unreachable) return 3;
  if (status.code() == Code::kPermissionDenied) return 4;
  return 1;
}

}  // namespace hoard::cli
