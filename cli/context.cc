#include "cli/context.h"

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

std::string Context::CoordinatorEndpoint() const {
  if (!options_.coordinator.empty()) return options_.coordinator;
  if (const char* env = std::getenv("HOARD_COORDINATOR"); env != nullptr && *env != '\0') return env;
  Result<std::string> cluster = ReadFile(JoinPath(LocalDir(), "cluster.json"));
  if (cluster.ok()) {
    nlohmann::json doc = nlohmann::json::parse(*cluster, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("coordinator") && doc["coordinator"].is_string()) {
      return doc["coordinator"].get<std::string>();
    }
  }
  return "tcp://127.0.0.1:7100";
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

int Context::Fail(const Status& status) {
  std::string reason = status.message();
  if (unreachable_) reason += " (is the cluster up? coordinator: " + CoordinatorEndpoint() + ")";
  if (options_.json) {
    nlohmann::json doc = {{"error", reason}, {"code", std::string(CodeName(status.code()))}};
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  std::cerr << "hoard: " << reason << std::endl;
  // 3 only when the coordinator gave no answer at all: an Unavailable it
  // answers with (an origin that is down, a busy server) is a failed
  // operation, and a script must not take it for a cluster that is not there.
  if (status.code() == Code::kInvalidArgument) return 2;
  if (unreachable_) return 3;
  return 1;
}

}  // namespace hoard::cli
