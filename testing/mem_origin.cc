#include "testing/mem_origin.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "origin/origin_path.h"

namespace hoard {

struct MemOrigin::Node {
  EntryType type = EntryType::kDir;
  MemAttributes attrs;
  // Files: the content. Replaced as a whole on rewrite, so a reader copies
  // from its own snapshot outside the lock.
  std::shared_ptr<const std::string> bytes;
  std::string target;  // symlinks
  std::map<std::string, std::shared_ptr<Node>, std::less<>> children;  // directories
};

class MemOrigin::File : public OriginFile {
 public:
  File(MemOrigin* origin, std::shared_ptr<Node> node, OriginEntry attrs)
      : origin_(origin), node_(std::move(node)), attrs_(std::move(attrs)) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
    return origin_->ReadFile(attrs_.path, node_, offset, len, buf);
  }
  const OriginEntry& attributes() const override { return attrs_; }
  Result<OriginEntry> Restat() override { return origin_->RestatFile(attrs_.path, node_); }

 private:
  MemOrigin* const origin_;
  const std::shared_ptr<Node> node_;
  const OriginEntry attrs_;
};

namespace {

uint32_t TypeBits(EntryType type) {
  switch (type) {
    case EntryType::kFile: return S_IFREG;
    case EntryType::kDir: return S_IFDIR;
    case EntryType::kSymlink: return S_IFLNK;
  }
  return 0;
}

uint32_t DefaultPerm(EntryType type) {
  switch (type) {
    case EntryType::kFile: return 0644;
    case EntryType::kDir: return 0755;
    case EntryType::kSymlink: return 0777;
  }
  return 0;
}

}  // namespace

MemOrigin::MemOrigin(std::string source) : source_(std::move(source)), root_(std::make_shared<Node>()) {}

MemOrigin::~MemOrigin() = default;

Status MemOrigin::AddFile(std::string_view path, std::string bytes, const MemAttributes& attrs) {
  auto node = std::make_shared<Node>();
  node->type = EntryType::kFile;
  node->attrs = attrs;
  node->bytes = std::make_shared<const std::string>(std::move(bytes));
  return Add(path, std::move(node));
}

Status MemOrigin::RewriteFile(std::string_view path, std::string bytes, const MemAttributes& attrs) {
  MutexLock lock(&mu_);
  std::shared_ptr<Node> node = FindLocked(path);
  if (node == nullptr || node->type != EntryType::kFile) {
    return Status::NotFound("MemOrigin: no file '" + std::string(path) + "' to rewrite");
  }
  node->attrs = attrs;
  node->bytes = std::make_shared<const std::string>(std::move(bytes));
  return Status::Ok();
}

Status MemOrigin::AddDir(std::string_view path, const MemAttributes& attrs) {
  auto node = std::make_shared<Node>();
  node->type = EntryType::kDir;
  node->attrs = attrs;
  return Add(path, std::move(node));
}

Status MemOrigin::AddSymlink(std::string_view path, std::string target, const MemAttributes& attrs) {
  auto node = std::make_shared<Node>();
  node->type = EntryType::kSymlink;
  node->attrs = attrs;
  node->target = std::move(target);
  return Add(path, std::move(node));
}

Status MemOrigin::Add(std::string_view path, std::shared_ptr<Node> node) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  if (parts.empty()) return Status::InvalidArgument("MemOrigin: cannot replace the root");
  MutexLock lock(&mu_);
  Node* dir = root_.get();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it = dir->children.find(parts[i]);
    if (it == dir->children.end()) {
      it = dir->children.emplace(std::string(parts[i]), std::make_shared<Node>()).first;
    } else if (it->second->type != EntryType::kDir) {
      return Status::InvalidArgument("MemOrigin: parent of '" + std::string(path) + "' is not a directory");
    }
    dir = it->second.get();
  }
  auto it = dir->children.find(parts.back());
  if (it == dir->children.end()) {
    dir->children.emplace(std::string(parts.back()), std::move(node));
    return Status::Ok();
  }
  Node& old = *it->second;
  if (old.type == EntryType::kDir && !old.children.empty() && node->type != EntryType::kDir) {
    return Status::InvalidArgument("MemOrigin: '" + std::string(path) + "' is a non-empty directory");
  }
  if (old.type == node->type) {
    // In place, so that open files and directory children stay attached.
    old.attrs = node->attrs;
    old.bytes = std::move(node->bytes);
    old.target = std::move(node->target);
  } else {
    it->second = std::move(node);
  }
  return Status::Ok();
}

Status MemOrigin::Remove(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  if (parts.empty()) return Status::InvalidArgument("MemOrigin: cannot remove the root");
  MutexLock lock(&mu_);
  std::string parent_path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) parent_path = JoinOriginPath(parent_path, parts[i]);
  std::shared_ptr<Node> parent = FindLocked(parent_path);
  if (parent == nullptr || parent->type != EntryType::kDir) {
    return Status::NotFound("MemOrigin: no such path '" + std::string(path) + "'");
  }
  auto it = parent->children.find(parts.back());
  if (it == parent->children.end()) return Status::NotFound("MemOrigin: no such path '" + std::string(path) + "'");
  parent->children.erase(it);
  return Status::Ok();
}

void MemOrigin::FailPath(std::string_view path, Status status, int times) {
  MutexLock lock(&mu_);
  faults_.insert_or_assign(std::string(path), Fault{std::move(status), times});
}

void MemOrigin::FailAll(Status status, int times) {
  MutexLock lock(&mu_);
  fail_all_ = Fault{std::move(status), times};
}

void MemOrigin::ClearFaults() {
  MutexLock lock(&mu_);
  faults_.clear();
  fail_all_.reset();
}

void MemOrigin::SetDelay(std::chrono::nanoseconds delay) {
  MutexLock lock(&mu_);
  delay_ = delay;
}

uint64_t MemOrigin::ReadCount(std::string_view path) const {
  MutexLock lock(&mu_);
  auto it = counters_.find(path);
  return it == counters_.end() ? 0 : it->second.reads;
}

uint64_t MemOrigin::BytesRead(std::string_view path) const {
  MutexLock lock(&mu_);
  auto it = counters_.find(path);
  return it == counters_.end() ? 0 : it->second.bytes;
}

uint64_t MemOrigin::OpenCount(std::string_view path) const {
  MutexLock lock(&mu_);
  auto it = counters_.find(path);
  return it == counters_.end() ? 0 : it->second.opens;
}

uint64_t MemOrigin::TotalReadCount() const {
  MutexLock lock(&mu_);
  return total_.reads;
}

uint64_t MemOrigin::TotalBytesRead() const {
  MutexLock lock(&mu_);
  return total_.bytes;
}

void MemOrigin::ResetCounters() {
  MutexLock lock(&mu_);
  counters_.clear();
  total_ = {};
}

std::shared_ptr<MemOrigin::Node> MemOrigin::FindLocked(std::string_view path) const {
  Result<std::vector<std::string_view>> parts = SplitOriginPath(path);
  if (!parts.ok()) return nullptr;
  std::shared_ptr<Node> node = root_;
  for (std::string_view part : *parts) {
    if (node->type != EntryType::kDir) return nullptr;
    auto it = node->children.find(part);
    if (it == node->children.end()) return nullptr;
    node = it->second;
  }
  return node;
}

Status MemOrigin::TakeFaultLocked(std::string_view path, bool include_fail_all) {
  Fault* fault = nullptr;
  auto consume = [](Fault& f) {
    Status s = f.status;
    if (f.remaining > 0) --f.remaining;
    return s;
  };
  if (include_fail_all && fail_all_.has_value()) {
    if (fail_all_->remaining == 0) {
      fail_all_.reset();
    } else {
      return consume(*fail_all_);
    }
  }
  if (faults_.empty()) return Status::Ok();
  // The longest fault path that is `path` or one of its ancestors.
  std::string_view prefix = path;
  while (true) {
    auto it = faults_.find(prefix);
    if (it != faults_.end()) {
      if (it->second.remaining == 0) {
        faults_.erase(it);
      } else {
        fault = &it->second;
        break;
      }
    }
    if (prefix.empty()) break;
    size_t slash = prefix.rfind('/');
    prefix = slash == std::string_view::npos ? std::string_view() : prefix.substr(0, slash);
  }
  if (fault == nullptr) return Status::Ok();
  return consume(*fault);
}

void MemOrigin::Sleep() const {
  std::chrono::nanoseconds d;
  {
    MutexLock lock(&mu_);
    d = delay_;
  }
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

OriginEntry MemOrigin::EntryOf(const std::string& path, const Node& node) const {
  OriginEntry e;
  e.path = path;
  e.type = node.type;
  e.mode = TypeBits(node.type) | (node.attrs.perm != 0 ? (node.attrs.perm & 07777) : DefaultPerm(node.type));
  e.uid = node.attrs.uid;
  e.gid = node.attrs.gid;
  e.mtime_ns = node.attrs.mtime_ns;
  if (node.type == EntryType::kFile) e.size = node.bytes->size();
  if (node.type == EntryType::kSymlink) {
    e.symlink_target = node.target;
    e.size = node.target.size();
  }
  return e;
}

Status MemOrigin::Walk(const std::function<Status(const OriginEntry&)>& visit) {
  Sleep();
  // Collected under the lock, visited outside it: `visit` may call back into
  // this origin.
  std::vector<OriginEntry> entries;
  Status fault;
  {
    MutexLock lock(&mu_);
    fault = TakeFaultLocked("");
    std::vector<std::pair<std::string, std::shared_ptr<Node>>> stack = {{"", root_}};
    while (fault.ok() && !stack.empty()) {
      auto [dir_path, dir] = std::move(stack.back());
      stack.pop_back();
      for (const auto& [name, child] : dir->children) {
        std::string path = JoinOriginPath(dir_path, name);
        // Only path faults here: a FailAll was consumed once for the call.
        fault = TakeFaultLocked(path, /*include_fail_all=*/false);
        if (!fault.ok()) break;
        entries.push_back(EntryOf(path, *child));
        if (child->type == EntryType::kDir) stack.emplace_back(std::move(path), child);
      }
    }
  }
  for (const OriginEntry& e : entries) HOARD_RETURN_IF_ERROR(visit(e));
  return fault;
}

Result<OriginEntry> MemOrigin::Stat(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  Sleep();
  MutexLock lock(&mu_);
  HOARD_RETURN_IF_ERROR(TakeFaultLocked(path));
  std::shared_ptr<Node> node = FindLocked(path);
  if (node == nullptr) return Status::NotFound("MemOrigin: no such path '" + std::string(path) + "'");
  return EntryOf(std::string(path), *node);
}

Result<std::unique_ptr<OriginFile>> MemOrigin::Open(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  Sleep();
  MutexLock lock(&mu_);
  auto counter = counters_.try_emplace(std::string(path)).first;
  ++counter->second.opens;
  ++total_.opens;
  HOARD_RETURN_IF_ERROR(TakeFaultLocked(path));
  std::shared_ptr<Node> node = FindLocked(path);
  if (node == nullptr) return Status::NotFound("MemOrigin: no such path '" + std::string(path) + "'");
  if (node->type != EntryType::kFile) {
    return Status::InvalidArgument("MemOrigin: '" + std::string(path) + "' is not a regular file");
  }
  OriginEntry attrs = EntryOf(std::string(path), *node);
  return std::unique_ptr<OriginFile>(new File(this, std::move(node), std::move(attrs)));
}

Result<OriginEntry> MemOrigin::RestatFile(const std::string& path, const std::shared_ptr<Node>& node) {
  MutexLock lock(&mu_);
  HOARD_RETURN_IF_ERROR(TakeFaultLocked(path));
  return EntryOf(path, *node);
}

Result<size_t> MemOrigin::ReadFile(const std::string& path, const std::shared_ptr<Node>& node, uint64_t offset,
                                   size_t len, char* buf) {
  Sleep();
  std::shared_ptr<const std::string> bytes;
  {
    MutexLock lock(&mu_);
    Counters& c = counters_[path];
    ++c.reads;
    ++total_.reads;
    HOARD_RETURN_IF_ERROR(TakeFaultLocked(path));
    bytes = node->bytes;
  }
  size_t n = 0;
  if (offset < bytes->size()) n = std::min<uint64_t>(len, bytes->size() - offset);
  if (n > 0) std::memcpy(buf, bytes->data() + offset, n);
  MutexLock lock(&mu_);
  counters_[path].bytes += n;
  total_.bytes += n;
  return n;
}

}  // namespace hoard
