#include "origin/nfs_url.h"

#include <charconv>

#include "origin/origin.h"

namespace hoard {
namespace {

bool ParsePort(std::string_view s, int* port) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1 || v > 65535) return false;
  *port = v;
  return true;
}

}  // namespace

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

}  // namespace hoard
