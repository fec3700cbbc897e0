#include "store/disk_usage.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "common/file_util.h"

namespace hoard {
namespace {

// Replaces `path` with `text`: written aside and renamed, so a reader sees
// the old or the new figures, never half of them. Not fsynced (see the top).
Status ReplaceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp);
    HOARD_RETURN_IF_ERROR(PwriteAll(fd.get(), text.data(), text.size(), 0).Annotate(tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno(errno, "rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

// "key value" lines; lines that do not parse are skipped.
Result<std::map<std::string, uint64_t, std::less<>>> ReadFields(const std::string& path) {
  HOARD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::map<std::string, uint64_t, std::less<>> fields;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    uint64_t v = 0;
    const std::string_view num = line.substr(space + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
    if (ec != std::errc() || p != num.data() + num.size()) continue;
    fields.emplace(std::string(line.substr(0, space)), v);
  }
  return fields;
}

uint64_t Field(const std::map<std::string, uint64_t, std::less<>>& fields, std::string_view key) {
  auto it = fields.find(key);
  return it == fields.end() ? 0 : it->second;
}

}  // namespace

std::string NodeUsagePath(std::string_view store_dir) { return JoinPath(store_dir, "node-usage"); }
std::string ReadTierUsagePath(std::string_view read_tier_dir) { return JoinPath(read_tier_dir, "usage"); }
std::string DefaultReadTierDir(std::string_view store_dir) { return JoinPath(store_dir, "read-tier"); }

Status WriteNodeUsage(const std::string& path, const NodeUsageRecord& r) {
  return ReplaceFile(path, "capacity_bytes " + std::to_string(r.capacity_bytes) + "\ndataset_bytes " +
                               std::to_string(r.usage.dataset_bytes) + "\ndataset_wanted_bytes " +
                               std::to_string(r.dataset_wanted_bytes) + "\ncheckpoint_bytes " +
                               std::to_string(r.usage.checkpoint_bytes) + "\nread_tier_bytes " +
                               std::to_string(r.usage.read_tier_bytes) + "\n");
}

Result<NodeUsageRecord> ReadNodeUsage(const std::string& path) {
  HOARD_ASSIGN_OR_RETURN(auto fields, ReadFields(path));
  NodeUsageRecord r;
  r.capacity_bytes = Field(fields, "capacity_bytes");
  r.usage.dataset_bytes = Field(fields, "dataset_bytes");
  r.usage.checkpoint_bytes = Field(fields, "checkpoint_bytes");
  r.usage.read_tier_bytes = Field(fields, "read_tier_bytes");
  r.dataset_wanted_bytes = Field(fields, "dataset_wanted_bytes");
  return r;
}

Status WriteReadTierUsage(const std::string& path, const ReadTierUsage& u) {
  return ReplaceFile(path, "used_bytes " + std::to_string(u.used_bytes) + "\nreserved_bytes " +
                               std::to_string(u.reserved_bytes) + "\n");
}

Result<ReadTierUsage> ReadReadTierUsage(const std::string& path) {
  HOARD_ASSIGN_OR_RETURN(auto fields, ReadFields(path));
  ReadTierUsage u;
  u.used_bytes = Field(fields, "used_bytes");
  u.reserved_bytes = std::max(u.used_bytes, Field(fields, "reserved_bytes"));
  return u;
}

uint64_t ReadTierAllowance(const NodeUsageRecord& node) {
  if (node.capacity_bytes == 0) return UINT64_MAX;
  const uint64_t held = node.usage.checkpoint_bytes + std::max(node.usage.dataset_bytes, node.dataset_wanted_bytes);
  return node.capacity_bytes - std::min(held, node.capacity_bytes);
}

ReadTierBudget::ReadTierBudget(Options options) : options_(std::move(options)) {
  if (!options_.disk_free) {
    options_.disk_free = [dir = options_.dir]() -> std::optional<uint64_t> {
      struct statvfs st;
      if (::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
      return uint64_t(st.f_bavail) * st.f_frsize;
    };
  }
}

uint64_t ReadTierBudget::Allowed(uint64_t tier_used) const {
  uint64_t allowed = options_.size_bytes;
  if (!options_.node_usage_path.empty()) {
    // No file yet: the agent has not started on this store, and then only
    // the size and the disk bound the tier (as before capacities were shared).
    if (Result<NodeUsageRecord> node = ReadNodeUsage(options_.node_usage_path); node.ok()) {
      allowed = std::min(allowed, ReadTierAllowance(*node));
    }
  }
  if (options_.min_free_bytes > 0) {
    if (std::optional<uint64_t> free = options_.disk_free()) {
      // The tier's own bytes are free space to it: it may keep them, or
      // trade them for others, but not take more of what is left.
      const uint64_t room = tier_used + *free;
      allowed = std::min(allowed, room - std::min(room, options_.min_free_bytes));
    }
  }
  return allowed;
}

}  // namespace hoard
