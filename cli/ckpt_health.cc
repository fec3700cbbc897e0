#include "cli/ckpt_health.h"

#include <algorithm>

#include "cli/json.h"
#include "cli/progress.h"

namespace hoard::cli {
namespace {

std::string Party(const std::string& node) { return node.empty() ? "coordinator" : node; }

double Age(int64_t since_ms, int64_t now_ms) {
  return since_ms > 0 ? std::max(0.0, double(now_ms - since_ms) / 1000) : 0;
}

// "no_space" -> "no space"; "io_error" -> "I/O error".
std::string Words(const std::string& reason) {
  if (reason == "io_error") return "I/O error";
  std::string w = reason;
  for (char& c : w) c = c == '_' ? ' ' : c;
  return w.empty() ? "error" : w;
}

}  // namespace

nlohmann::json ToJson(const proto::CkptDrainError& e, int64_t now_ms) {
  if (e.since_unix_ms == 0) return nullptr;
  return {{"path", e.path},
          {"id", Id(e.id)},
          {"gen", e.gen},
          {"code", std::string(CodeName(CodeFromWire(e.code)))},
          {"reason", e.reason},
          {"error", e.error},
          {"node", Party(e.node)},
          {"since_unix_ms", e.since_unix_ms},
          {"last_unix_ms", e.last_unix_ms},
          {"age_seconds", Age(e.since_unix_ms, now_ms)},
          {"failures", e.failures},
          {"lost_uploads", e.lost_uploads}};
}

nlohmann::json ToJson(const proto::CkptJobStatus& j, int64_t now_ms) {
  nlohmann::json levels = nlohmann::json::object();
  for (size_t l = 0; l < j.files_by_level.size() && l < 4; ++l) {
    levels[proto::CkptLevelName(static_cast<proto::CkptLevel>(l))] = j.files_by_level[l];
  }
  return {{"job", j.job},
          {"files", j.files},
          {"bytes", j.bytes},
          {"files_by_level", levels},
          {"undrained_bytes", j.undrained_bytes},
          {"undrained_files", j.undrained_files},
          {"oldest_undrained_age_seconds", Age(j.oldest_undrained_unix_ms, now_ms)},
          {"overdue_files", j.overdue_files},
          {"failing_files", j.failing_files},
          {"drain_error", ToJson(j.drain_error, now_ms)}};
}

nlohmann::json ToJson(const proto::CkptOriginHealth& h, int64_t now_ms) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const std::string& n : h.nodes) nodes.push_back(Party(n));
  return {{"source", h.source},
          {"failing", h.failing},
          {"code", std::string(CodeName(h.failing ? CodeFromWire(h.code) : Code::kOk))},
          {"reason", h.reason},
          {"error", h.error},
          {"nodes", nodes},
          {"since_unix_ms", h.since_unix_ms},
          {"last_unix_ms", h.last_unix_ms},
          {"age_seconds", h.failing ? Age(h.since_unix_ms, now_ms) : 0.0},
          {"failing_files", h.failing_files},
          {"looping_files", h.looping_files}};
}

std::string ShortDrainError(const proto::CkptDrainError& e, int64_t now_ms) {
  if (e.since_unix_ms == 0) return "-";
  std::string s = Words(e.reason) + " for " + Duration(Age(e.since_unix_ms, now_ms));
  if (e.lost_uploads > 0) s += ", " + std::to_string(e.lost_uploads) + " uploads lost";
  return s;
}

std::string DrainErrorLines(const std::vector<proto::CkptDrainError>& errors, int64_t now_ms) {
  std::string out;
  for (const auto& e : errors) {
    out += "  " + e.path + ": " + ShortDrainError(e, now_ms) + ", " + std::to_string(e.failures) +
           (e.failures == 1 ? " attempt" : " attempts") + " (" + Party(e.node) + "): " + e.error + "\n";
  }
  return out;
}

std::string OriginLine(const proto::CkptOriginHealth& h, int64_t now_ms) {
  std::string line = "checkpoint origin" + (h.source.empty() ? std::string() : " " + h.source) + ": ";
  if (!h.failing) return line + "ok";
  std::string who;
  for (const std::string& n : h.nodes) who += (who.empty() ? "" : ", ") + Party(n);
  line += "FAILING for " + Duration(Age(h.since_unix_ms, now_ms)) + ": " + Words(h.reason) + " (" + who + "): " +
          h.error;
  if (h.failing_files > 0) line += "; " + std::to_string(h.failing_files) + " files failing";
  if (h.looping_files > 0) {
    line += "; " + std::to_string(h.looping_files) + " uploaded again and again, never published";
  }
  return line;
}

}  // namespace hoard::cli
