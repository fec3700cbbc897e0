#include "coordinator/audit.h"

#include "proto/access.h"

namespace hoard {
namespace {

void Field(std::string* out, std::string_view key, std::string_view value) {
  *out += ' ';
  *out += key;
  *out += '=';
  const bool quote = value.empty() || value.find_first_of(" =\"\\\t\n") != std::string_view::npos;
  if (!quote) {
    *out += value;
    return;
  }
  *out += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') *out += '\\';
    if (c == '\n') {
      *out += "\\n";
      continue;
    }
    *out += c;
  }
  *out += '"';
}

}  // namespace

std::string AuditLine(proto::KeyClass key_class, std::string_view op, std::string_view target,
                      const proto::Caller* caller, const Status& outcome) {
  std::string out = "key=";
  out += proto::KeyClassName(key_class);
  Field(&out, "op", op);
  if (!target.empty()) Field(&out, "target", target);
  if (caller != nullptr) {
    if (caller->uid >= 0) Field(&out, "claimed_uid", std::to_string(caller->uid));
    if (!caller->job.empty()) Field(&out, "claimed_job", caller->job);
    if (!caller->host.empty()) Field(&out, "claimed_host", caller->host);
  }
  Field(&out, "result", outcome.ok() ? std::string("ok") : outcome.ToString());
  return out;
}

}  // namespace hoard
