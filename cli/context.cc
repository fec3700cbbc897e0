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
  if (options_.json) {
    std::cout << doc.dump(2) << std::endl;
  } else if (!text.empty()) {
    std::cout << text;
    if (text.back() != '\n') std::cout << '\n';
    std::cout.flush();
  }
  return 0;
}

int Context::Fail(const Status& status) {
  std::string reason = status.message();
  if (status.code() == Code::kUnavailable && unreachable_) {
    reason += " (is the cluster up? coordinator: " + CoordinatorEndpoint() + ")";
  }
  if (options_.json) {
    nlohmann::json doc = {{"error", reason}, {"code", std::string(CodeName(status.code()))}};
    std::cout << doc.dump(2) << std::endl;
  }
  std::cerr << "hoard: " << reason << std::endl;
  switch (status.code()) {
    case Code::kInvalidArgument: return 2;
    case Code::kUnavailable: return 3;
    default: return 1;
  }
}

}  // namespace hoard::cli
