#include "testing/mem_ckpt_origin.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

namespace hoard {

struct MemCkptOrigin::Node {
  bool is_dir = false;
  std::map<std::string, std::shared_ptr<Node>, std::less<>> children;  // directories
  std::string data;                                                    // files
  bool complete = false;                                               // files: see the header
  int64_t mtime_ns = 0;
  bool is_symlink = false;
  std::string target;  // symlinks
};

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Quote(std::string_view path) { return "'" + std::string(path) + "'"; }

// An open file: the bytes as of Open.
class SnapshotFile : public OriginFile {
 public:
  SnapshotFile(OriginEntry attrs, std::string data) : attrs_(std::move(attrs)), data_(std::move(data)) {}
  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
    if (offset >= data_.size()) return size_t{0};
    const size_t n = std::min<uint64_t>(len, data_.size() - offset);
    std::memcpy(buf, data_.data() + offset, n);
    return n;
  }
  const OriginEntry& attributes() const override { return attrs_; }
  Result<OriginEntry> Restat() override { return attrs_; }

 private:
  const OriginEntry attrs_;
  const std::string data_;
};

}  // namespace

class MemCkptOrigin::Writer : public CkptWriter {
 public:
  Writer(MemCkptOrigin* origin, std::shared_ptr<Node> file, std::string path)
      : origin_(origin), file_(std::move(file)), path_(std::move(path)) {}

  Status WriteAt(uint64_t offset, const char* data, size_t len) override {
    HOARD_RETURN_IF_ERROR(origin_->Enter(CkptOp::kWrite));
    MutexLock lock(&origin_->mu_);
    if (closed_) return Status::Internal(origin_->source_ + ": write " + Quote(path_) + " after Close");
    return origin_->WriteLocked(*file_, offset, data, len);
  }

  Status Close() override {
    HOARD_RETURN_IF_ERROR(origin_->Enter(CkptOp::kClose));
    MutexLock lock(&origin_->mu_);
    if (closed_) return Status::Internal(origin_->source_ + ": close " + Quote(path_) + " twice");
    closed_ = true;
    file_->complete = true;
    return Status::Ok();
  }

 private:
  MemCkptOrigin* const origin_;
  // The file itself, not its name: it follows renames, as an fd does.
  const std::shared_ptr<Node> file_;
  const std::string path_;
  bool closed_ = false;  // GUARDED_BY(origin_->mu_)
};

bool MemCkptOrigin::HoldsPartial(const Node& node) {
  if (!node.is_dir) return !node.complete;
  return std::any_of(node.children.begin(), node.children.end(),
                     [](const auto& kv) { return HoldsPartial(*kv.second); });
}

MemCkptOrigin::MemCkptOrigin(std::string source) : source_(std::move(source)), root_(std::make_shared<Node>()) {
  root_->is_dir = true;
  root_->mtime_ns = NowNs();
}

MemCkptOrigin::~MemCkptOrigin() = default;

namespace {

class ForwardingCkptOrigin : public CkptOrigin {
 public:
  explicit ForwardingCkptOrigin(CkptOrigin* to) : to_(to) {}
  const std::string& source() const override { return to_->source(); }
  Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) override { return to_->Create(path); }
  Status MakeDirs(std::string_view path) override { return to_->MakeDirs(path); }
  Status Rename(std::string_view from, std::string_view to) override { return to_->Rename(from, to); }
  Status Unlink(std::string_view path) override { return to_->Unlink(path); }
  Status Rmdir(std::string_view path) override { return to_->Rmdir(path); }
  Status Symlink(std::string_view target, std::string_view path) override { return to_->Symlink(target, path); }
  Result<OriginEntry> Stat(std::string_view path) override { return to_->Stat(path); }
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override { return to_->Open(path); }
  Result<uint64_t> FreeBytes() override { return to_->FreeBytes(); }

 private:
  CkptOrigin* to_;
};

}  // namespace

std::unique_ptr<CkptOrigin> MemCkptOrigin::Connection() { return std::make_unique<ForwardingCkptOrigin>(this); }

Status MemCkptOrigin::Enter(CkptOp op) {
  std::chrono::nanoseconds delay;
  {
    MutexLock lock(&mu_);
    delay = delay_;
    if (delay.count() > 0) counters_.max_concurrent_calls = std::max(counters_.max_concurrent_calls, ++in_delay_);
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  MutexLock lock(&mu_);
  if (delay.count() > 0) --in_delay_;
  for (CkptOp key : {op, CkptOp::kAny}) {
    auto it = faults_.find(key);
    if (it == faults_.end()) continue;
    Status s = it->second.first;
    if (--it->second.second <= 0) faults_.erase(it);
    return s;
  }
  return Status::Ok();
}

Result<std::shared_ptr<MemCkptOrigin::Node>> MemCkptOrigin::FindLocked(std::string_view path) const {
  std::shared_ptr<Node> node = root_;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (!node->is_dir) return Status::NotDirectory(source_ + ": " + Quote(path) + ": a parent is a file");
    auto it = node->children.find(path.substr(start, slash - start));
    if (it == node->children.end())
      return Status::NotFound(source_ + ": " + Quote(path) + ": no such file or directory");
    node = it->second;
    start = slash + 1;
  }
  return node;
}

Result<std::pair<std::shared_ptr<MemCkptOrigin::Node>, std::string>> MemCkptOrigin::ParentLocked(
    std::string_view path) const {
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<Node> parent, FindLocked(dir));
  if (!parent->is_dir) return Status::NotDirectory(source_ + ": " + Quote(path) + ": a parent is a file");
  return std::make_pair(std::move(parent), std::string(path.substr(slash == std::string_view::npos ? 0 : slash + 1)));
}

Status MemCkptOrigin::WriteLocked(Node& file, uint64_t offset, const char* data, size_t len) {
  const uint64_t old_size = file.data.size();
  const uint64_t new_size = std::max<uint64_t>(old_size, offset + len);
  if (counters_.used_bytes - old_size + new_size > capacity_) {
    return Status::NoSpace(source_ + ": full (" + std::to_string(capacity_) + " bytes)");
  }
  if (new_size > old_size) file.data.resize(new_size, '\0');
  std::memcpy(file.data.data() + offset, data, len);
  counters_.used_bytes = counters_.used_bytes - old_size + new_size;
  file.mtime_ns = NowNs();
  return Status::Ok();
}

Result<std::unique_ptr<CkptWriter>> MemCkptOrigin::Create(std::string_view path) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kCreate));
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(auto parent, ParentLocked(path));
  std::shared_ptr<Node>& slot = parent.first->children[parent.second];
  if (slot == nullptr) {
    slot = std::make_shared<Node>();
  } else if (slot->is_dir) {
    return Status::IsDirectory(source_ + ": create " + Quote(path) + ": is a directory");
  }
  counters_.used_bytes -= slot->data.size();  // O_TRUNC: the same file, emptied
  slot->data.clear();
  slot->complete = false;
  slot->mtime_ns = NowNs();
  ++counters_.creates;
  return std::unique_ptr<CkptWriter>(new Writer(this, slot, std::string(path)));
}

Status MemCkptOrigin::MakeDirs(std::string_view path) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/true));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kMakeDirs));
  MutexLock lock(&mu_);
  std::shared_ptr<Node> node = root_;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::shared_ptr<Node>& child = node->children[std::string(path.substr(start, slash - start))];
    if (child == nullptr) {
      child = std::make_shared<Node>();
      child->is_dir = true;
      child->mtime_ns = NowNs();
    } else if (!child->is_dir) {
      return Status::NotDirectory(source_ + ": mkdir " + Quote(path) + ": " + Quote(path.substr(0, slash)) +
                                  " is a file");
    }
    node = child;
    start = slash + 1;
  }
  log_.push_back("mkdirs " + std::string(path));
  return Status::Ok();
}

Status MemCkptOrigin::Rename(std::string_view from, std::string_view to) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, from, /*root_ok=*/false));
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, to, /*root_ok=*/false));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kRename));
  MutexLock lock(&mu_);
  const std::string what = source_ + ": rename " + Quote(from) + " to " + Quote(to);
  HOARD_ASSIGN_OR_RETURN(auto src, ParentLocked(from));
  auto src_it = src.first->children.find(src.second);
  if (src_it == src.first->children.end()) return Status::NotFound(what + ": no such file or directory");
  const std::shared_ptr<Node> moving = src_it->second;
  HOARD_ASSIGN_OR_RETURN(auto dst, ParentLocked(to));
  if (moving->is_dir && to.size() > from.size() && to.starts_with(from) && to[from.size()] == '/') {
    return Status::InvalidArgument(what + ": a directory cannot move into itself");
  }
  auto dst_it = dst.first->children.find(dst.second);
  if (dst_it != dst.first->children.end()) {
    const Node& old = *dst_it->second;
    if (dst_it->second == moving) {  // the same file: nothing to do, as rename(2)
      log_.push_back("rename " + std::string(from) + " " + std::string(to));
      return Status::Ok();
    }
    if (old.is_dir && !moving->is_dir) return Status::IsDirectory(what + ": the target is a directory");
    if (!old.is_dir && moving->is_dir) return Status::NotDirectory(what + ": the target is not a directory");
    if (old.is_dir && !old.children.empty()) return Status::NotEmpty(what + ": the target directory is not empty");
    counters_.used_bytes -= old.data.size();
  }
  if (HoldsPartial(*moving)) ++counters_.partial_renames;
  ++counters_.renames;
  src.first->children.erase(src_it);  // before the insert: `from` and `to` may share the parent
  dst.first->children[dst.second] = moving;
  log_.push_back("rename " + std::string(from) + " " + std::string(to));
  return Status::Ok();
}

Status MemCkptOrigin::Unlink(std::string_view path) { return Remove(CkptOp::kUnlink, path); }

Status MemCkptOrigin::Rmdir(std::string_view path) { return Remove(CkptOp::kRmdir, path); }

Status MemCkptOrigin::Symlink(std::string_view target, std::string_view path) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kSymlink));
  MutexLock lock(&mu_);
  const std::string what = source_ + ": symlink " + Quote(path);
  HOARD_ASSIGN_OR_RETURN(auto parent, ParentLocked(path));
  if (parent.first->children.contains(parent.second)) return Status::AlreadyExists(what + ": exists");
  auto node = std::make_shared<Node>();
  node->is_symlink = true;
  node->complete = true;
  node->target = std::string(target);
  node->mtime_ns = NowNs();
  parent.first->children[parent.second] = node;
  log_.push_back("symlink " + std::string(path) + " " + std::string(target));
  return Status::Ok();
}

Status MemCkptOrigin::Remove(CkptOp op, std::string_view path) {
  const bool rmdir = op == CkptOp::kRmdir;
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
  HOARD_RETURN_IF_ERROR(Enter(op));
  MutexLock lock(&mu_);
  const std::string what = source_ + (rmdir ? ": rmdir " : ": unlink ") + Quote(path);
  HOARD_ASSIGN_OR_RETURN(auto parent, ParentLocked(path));
  auto it = parent.first->children.find(parent.second);
  if (it == parent.first->children.end()) return Status::NotFound(what + ": no such file or directory");
  const Node& node = *it->second;
  if (!rmdir && node.is_dir) return Status::IsDirectory(what + ": is a directory");
  if (rmdir && !node.is_dir) return Status::NotDirectory(what + ": not a directory");
  if (rmdir && !node.children.empty()) return Status::NotEmpty(what + ": not empty");
  counters_.used_bytes -= node.data.size();
  parent.first->children.erase(it);
  log_.push_back((rmdir ? "rmdir " : "unlink ") + std::string(path));
  return Status::Ok();
}

Result<OriginEntry> MemCkptOrigin::Stat(std::string_view path) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/true));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kStat));
  MutexLock lock(&mu_);
  Result<std::shared_ptr<Node>> node = FindLocked(path);
  if (!node.ok()) return Status::NotFound(node.status().message());  // as every origin's Stat
  OriginEntry e;
  e.path = std::string(path);
  e.type = (*node)->is_dir ? EntryType::kDir : (*node)->is_symlink ? EntryType::kSymlink : EntryType::kFile;
  e.mode = (*node)->is_dir ? (S_IFDIR | 0755) : (S_IFREG | 0644);
  e.size = (*node)->is_dir ? 0 : (*node)->data.size();
  e.mtime_ns = (*node)->mtime_ns;
  return e;
}

Result<std::unique_ptr<OriginFile>> MemCkptOrigin::Open(std::string_view path) {
  HOARD_RETURN_IF_ERROR(CheckCkptPath(source_, path, /*root_ok=*/false));
  HOARD_ASSIGN_OR_RETURN(OriginEntry e, Stat(path));
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kOpen));
  if (e.type != EntryType::kFile) return Status::InvalidArgument(source_ + ": " + Quote(path) + " is not a file");
  MutexLock lock(&mu_);
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<Node> node, FindLocked(path));
  e.size = node->data.size();
  return std::unique_ptr<OriginFile>(new SnapshotFile(std::move(e), node->data));
}

Result<uint64_t> MemCkptOrigin::FreeBytes() {
  HOARD_RETURN_IF_ERROR(Enter(CkptOp::kFreeBytes));
  MutexLock lock(&mu_);
  return capacity_ > counters_.used_bytes ? capacity_ - counters_.used_bytes : 0;
}

void MemCkptOrigin::FailNext(CkptOp op, Status status, int times) {
  MutexLock lock(&mu_);
  if (times <= 0) return;
  faults_[op] = {std::move(status), times};
}

void MemCkptOrigin::ClearFaults() {
  MutexLock lock(&mu_);
  faults_.clear();
}

int MemCkptOrigin::FaultsLeft(CkptOp op) const {
  MutexLock lock(&mu_);
  auto it = faults_.find(op);
  return it == faults_.end() ? 0 : it->second.second;
}

void MemCkptOrigin::SetCapacity(uint64_t bytes) {
  MutexLock lock(&mu_);
  capacity_ = bytes;
}

void MemCkptOrigin::SetDelay(std::chrono::nanoseconds delay) {
  MutexLock lock(&mu_);
  delay_ = delay;
}

void MemCkptOrigin::ForEach(const Node& dir, const std::string& prefix,
                            const std::function<void(const std::string&, const Node&)>& visit) {
  for (const auto& [name, child] : dir.children) {
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    visit(path, *child);
    if (child->is_dir) ForEach(*child, path, visit);
  }
}

std::map<std::string, std::string> MemCkptOrigin::Files() const {
  MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  ForEach(*root_, "", [&](const std::string& path, const Node& n) {
    if (!n.is_dir && !n.is_symlink && n.complete) out[path] = n.data;
  });
  return out;
}

std::map<std::string, std::string> MemCkptOrigin::Symlinks() const {
  MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  ForEach(*root_, "", [&](const std::string& path, const Node& n) {
    if (n.is_symlink) out[path] = n.target;
  });
  return out;
}

std::set<std::string> MemCkptOrigin::PartialFiles() const {
  MutexLock lock(&mu_);
  std::set<std::string> out;
  ForEach(*root_, "", [&](const std::string& path, const Node& n) {
    if (!n.is_dir && !n.complete) out.insert(path);
  });
  return out;
}

bool MemCkptOrigin::Exists(std::string_view path) const {
  if (!CheckCkptPath(source_, path, /*root_ok=*/true).ok()) return false;
  MutexLock lock(&mu_);
  return FindLocked(path).ok();
}

std::vector<std::string> MemCkptOrigin::NamespaceLog() const {
  MutexLock lock(&mu_);
  return log_;
}

MemCkptOrigin::Counters MemCkptOrigin::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace hoard
