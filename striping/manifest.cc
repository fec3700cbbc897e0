#include "striping/manifest.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "common/alloc_budget.h"
#include "common/file_util.h"
#include "common/hash.h"

namespace hoard {
namespace {

constexpr uint64_t kMagic = 0x31494E414D445248ULL;  // "HRDMANI1"

// Byte offsets of the header fields.
enum : size_t {
  kOffMagic = 0,
  kOffFormat = 8,
  kOffHeaderSize = 12,
  kOffUid = 16,
  kOffVersion = 24,
  kOffChunkSize = 32,
  kOffEntryCount = 40,
  kOffNamesBytes = 48,
  kOffFileCount = 56,
  kOffTotalBytes = 64,
  kOffTotalChunks = 72,
  kOffCreated = 80,
  kOffChecksum = 88,
};
static_assert(kOffChecksum + 8 == Manifest::kHeaderSize);

template <typename T>
T Get(const char* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof v);
  return v;
}

template <typename T>
void Put(std::string* out, size_t off, T v) {
  std::memcpy(out->data() + off, &v, sizeof v);
}

bool SafeName(std::string_view n) {
  if (n.empty() || n.size() > 255 || n == "." || n == "..") return false;
  return n.find('/') == std::string_view::npos && n.find('\0') == std::string_view::npos;
}

Status Bad(const std::string& what) { return Status::Corruption("manifest: " + what); }

}  // namespace

// ---- reading ---------------------------------------------------------------

uint64_t Manifest::dataset_uid() const { return Get<uint64_t>(data_, kOffUid); }
uint32_t Manifest::version() const { return Get<uint32_t>(data_, kOffVersion); }
uint64_t Manifest::chunk_size() const { return Get<uint64_t>(data_, kOffChunkSize); }
uint32_t Manifest::entry_count() const {
  return static_cast<uint32_t>(Get<uint64_t>(data_, kOffEntryCount));
}
uint64_t Manifest::file_count() const { return Get<uint64_t>(data_, kOffFileCount); }
uint64_t Manifest::total_bytes() const { return Get<uint64_t>(data_, kOffTotalBytes); }
uint64_t Manifest::total_chunks() const { return Get<uint64_t>(data_, kOffTotalChunks); }
int64_t Manifest::created_unix() const { return Get<int64_t>(data_, kOffCreated); }
uint64_t Manifest::checksum() const { return Get<uint64_t>(data_, kOffChecksum); }

std::string_view Manifest::name(uint32_t i) const {
  return {names_ + entries_[i].name_off, entries_[i].name_len};
}

std::string_view Manifest::symlink_target(uint32_t i) const {
  return {names_ + entries_[i].aux, entries_[i].size};
}

std::string Manifest::Path(uint32_t i) const {
  std::vector<uint32_t> chain;
  while (i != 0) {
    chain.push_back(i);
    i = entries_[i].parent;
  }
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (!out.empty()) out += '/';
    out.append(name(*it));
  }
  return out;
}

std::optional<uint32_t> Manifest::Lookup(uint32_t dir, std::string_view n) const {
  const EntryRecord& d = entries_[dir];
  if (!d.is_dir()) return std::nullopt;
  uint32_t lo = d.first_child(), hi = d.first_child() + d.child_count();
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int c = name(mid).compare(n);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return std::nullopt;
}

std::optional<uint32_t> Manifest::Resolve(std::string_view path) const {
  uint32_t cur = 0;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty()) continue;
    std::optional<uint32_t> next = Lookup(cur, part);
    if (!next) return std::nullopt;
    cur = *next;
  }
  return cur;
}

namespace {

// Checks the structure described in manifest.h. `data` is the whole manifest.
Status Validate(const char* data, size_t size) {
  if (size < Manifest::kHeaderSize) return Bad("shorter than its header");
  if (Get<uint64_t>(data, kOffMagic) != kMagic) return Bad("bad magic");
  if (Get<uint32_t>(data, kOffFormat) != Manifest::kFormat) {
    return Bad("unsupported format " + std::to_string(Get<uint32_t>(data, kOffFormat)));
  }
  if (Get<uint32_t>(data, kOffHeaderSize) != Manifest::kHeaderSize) return Bad("bad header size");
  const uint64_t entries = Get<uint64_t>(data, kOffEntryCount);
  const uint64_t names_bytes = Get<uint64_t>(data, kOffNamesBytes);
  const uint64_t chunk_size = Get<uint64_t>(data, kOffChunkSize);
  if (entries == 0 || entries > Manifest::kMaxEntries) return Bad("bad entry count");
  if (names_bytes > Manifest::kMaxNamesBytes) return Bad("names blob too large");
  if (!ValidChunkSize(chunk_size)) return Bad("bad chunk size");
  if (Manifest::kHeaderSize + entries * sizeof(EntryRecord) + names_bytes != size) {
    return Bad("size does not match its counts");
  }
  const char* body = data + Manifest::kHeaderSize;
  if (Checksum64(body, size - Manifest::kHeaderSize) != Get<uint64_t>(data, kOffChecksum)) {
    return Bad("checksum mismatch");
  }

  const auto* e = reinterpret_cast<const EntryRecord*>(body);
  const char* names = body + entries * sizeof(EntryRecord);
  if (!e[0].is_dir() || e[0].parent != 0 || e[0].name_len != 0) return Bad("entry 0 is not the root");

  uint64_t children_total = 0, files = 0, bytes = 0, chunks = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    const EntryRecord& r = e[i];
    const std::string idx = "entry " + std::to_string(i);
    if (!r.is_dir() && !r.is_file() && !r.is_symlink()) return Bad(idx + ": unsupported type");
    if (uint64_t(r.name_off) + r.name_len > names_bytes) return Bad(idx + ": name out of bounds");
    if (i > 0) {
      std::string_view n(names + r.name_off, r.name_len);
      if (!SafeName(n)) return Bad(idx + ": unsafe name");
      // Parents precede children, so the parent graph has no cycles.
      if (r.parent >= i) return Bad(idx + ": parent does not precede it");
      const EntryRecord& p = e[r.parent];
      if (!p.is_dir() || i < p.first_child() || i >= uint64_t(p.first_child()) + p.child_count()) {
        return Bad(idx + ": not within its parent's children");
      }
      if (i > p.first_child()) {
        std::string_view prev(names + e[i - 1].name_off, e[i - 1].name_len);
        if (!(prev < n)) return Bad(idx + ": children not strictly sorted");
      }
    }
    if (r.is_dir()) {
      if (r.child_count() > 0 && (r.first_child() <= i || uint64_t(r.first_child()) + r.child_count() > entries)) {
        return Bad(idx + ": children out of bounds");
      }
      children_total += r.child_count();
    } else if (r.is_file()) {
      if (r.first_chunk() != chunks) return Bad(idx + ": chunk numbering has a gap");
      // Bounded so that no sum below can wrap.
      if (r.size > Manifest::kMaxFileBytes) return Bad(idx + ": file larger than any dataset allows");
      chunks += ChunkCount(r.size, chunk_size);
      if (chunks > Manifest::kMaxChunks) return Bad("too many chunks");
      bytes += r.size;
      ++files;
    } else if (r.aux > names_bytes || r.size > names_bytes - r.aux) {
      return Bad(idx + ": symlink target out of bounds");
    }
  }
  // Every non-root entry lies in its parent's range; if the ranges add up to
  // exactly entries-1, no range overlaps another.
  if (children_total != entries - 1) return Bad("directory ranges overlap");
  if (files != Get<uint64_t>(data, kOffFileCount) || bytes != Get<uint64_t>(data, kOffTotalBytes) ||
      chunks != Get<uint64_t>(data, kOffTotalChunks)) {
    return Bad("totals do not match the entries");
  }
  return Status::Ok();
}

// Validate under the decode budget of the manifest's size, like every
// decoder (common/alloc_budget.h). It allocates nothing per entry (the bytes
// are the index, used in place), so the budget only keeps it that way.
Status ValidateWithinBudget(const char* data, size_t size) {
  Status status;
  const std::exception_ptr failure =
      RunWithAllocBudget(DecodeBudget(size), [&] { status = Validate(data, size); });
  if (failure) return Bad(ExceptionMessage(failure));
  return status;
}

}  // namespace

Result<Manifest> Manifest::Parse(std::string bytes) {
  auto owned = std::make_shared<std::string>(std::move(bytes));
  // std::string storage is allocated with operator new: aligned for EntryRecord.
  HOARD_RETURN_IF_ERROR(ValidateWithinBudget(owned->data(), owned->size()));
  Manifest m;
  m.data_ = owned->data();
  m.size_ = owned->size();
  m.storage_ = std::move(owned);
  m.entries_ = reinterpret_cast<const EntryRecord*>(m.data_ + kHeaderSize);
  m.names_ = m.data_ + kHeaderSize + m.entry_count() * sizeof(EntryRecord);
  return m;
}

Result<Manifest> Manifest::Load(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open manifest " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat manifest " + path);
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderSize) return Bad(path + " is shorter than its header");
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) return Status::FromErrno(errno, "mmap manifest " + path);
  std::shared_ptr<const void> storage(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  Status s = ValidateWithinBudget(static_cast<const char*>(map), size);
  if (!s.ok()) return s.Annotate(path);
  Manifest m;
  m.data_ = static_cast<const char*>(map);
  m.size_ = size;
  m.storage_ = std::move(storage);
  m.entries_ = reinterpret_cast<const EntryRecord*>(m.data_ + kHeaderSize);
  m.names_ = m.data_ + kHeaderSize + m.entry_count() * sizeof(EntryRecord);
  return m;
}

// ---- building --------------------------------------------------------------

ManifestBuilder::ManifestBuilder(uint64_t dataset_uid, uint32_t version, uint64_t chunk_size)
    : uid_(dataset_uid), version_(version), chunk_size_(chunk_size) {
  root_.mode = S_IFDIR | 0755;
}

void ManifestBuilder::SetRoot(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime_ns) {
  root_.mode = mode;
  root_.uid = uid;
  root_.gid = gid;
  root_.mtime_ns = mtime_ns;
}

void ManifestBuilder::Add(std::string path, uint32_t mode, uint32_t uid, uint32_t gid, uint64_t size,
                          int64_t mtime_ns, std::string symlink_target) {
  items_.push_back(Item{std::move(path), std::move(symlink_target), size, mtime_ns, mode, uid, gid});
}

Result<std::string> ManifestBuilder::Finish(int64_t created_unix) {
  if (!ValidChunkSize(chunk_size_)) return Status::InvalidArgument("invalid chunk size");
  if (!S_ISDIR(root_.mode)) return Status::InvalidArgument("the dataset root must be a directory");
  const size_t n = items_.size() + 1;  // + root
  if (n > Manifest::kMaxEntries) return Status::InvalidArgument("too many entries");

  // Item i+1 is items_[i]; 0 is the root. Find every item's parent by path.
  std::unordered_map<std::string_view, uint32_t> dirs;
  dirs.reserve(n);
  dirs.emplace(std::string_view(), 0);
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    if (!S_ISDIR(it.mode) && !S_ISREG(it.mode) && !S_ISLNK(it.mode)) {
      return Status::InvalidArgument("unsupported file type: " + it.path);
    }
    if (S_ISDIR(it.mode) && !dirs.emplace(it.path, static_cast<uint32_t>(i + 1)).second) {
      return Status::InvalidArgument("path given twice: " + it.path);
    }
  }
  std::vector<std::vector<uint32_t>> children(n);
  std::vector<std::string_view> names(n);
  for (size_t i = 0; i < items_.size(); ++i) {
    std::string_view p = items_[i].path;
    size_t slash = p.rfind('/');
    std::string_view parent = slash == std::string_view::npos ? std::string_view() : p.substr(0, slash);
    names[i + 1] = slash == std::string_view::npos ? p : p.substr(slash + 1);
    if (!SafeName(names[i + 1])) return Status::InvalidArgument("unsafe name in path: " + items_[i].path);
    auto d = dirs.find(parent);
    if (d == dirs.end()) return Status::InvalidArgument("parent directory missing for " + items_[i].path);
    children[d->second].push_back(static_cast<uint32_t>(i + 1));
  }

  // Breadth-first layout: order[k] is the item placed at entry k.
  std::vector<uint32_t> order;
  order.reserve(n);
  order.push_back(0);
  std::vector<uint32_t> first_child(n, 0);
  for (size_t k = 0; k < order.size(); ++k) {
    uint32_t item = order[k];
    auto& kids = children[item];
    std::sort(kids.begin(), kids.end(), [&](uint32_t a, uint32_t b) { return names[a] < names[b]; });
    for (size_t j = 1; j < kids.size(); ++j) {
      if (names[kids[j - 1]] == names[kids[j]]) {
        return Status::InvalidArgument("path given twice: " + items_[kids[j] - 1].path);
      }
    }
    first_child[item] = static_cast<uint32_t>(order.size());
    order.insert(order.end(), kids.begin(), kids.end());
  }
  std::vector<uint32_t> entry_of(n);
  for (size_t k = 0; k < n; ++k) entry_of[order[k]] = static_cast<uint32_t>(k);

  std::string names_blob;
  std::vector<EntryRecord> recs(n);
  uint64_t chunks = 0, files = 0, bytes = 0;
  for (size_t k = 0; k < n; ++k) {
    uint32_t item = order[k];
    const Item& it = item == 0 ? root_ : items_[item - 1];
    EntryRecord& r = recs[k];
    std::memset(&r, 0, sizeof r);
    r.mode = it.mode;
    r.uid = it.uid;
    r.gid = it.gid;
    r.mtime_ns = it.mtime_ns;
    if (item != 0) {
      std::string_view p = it.path;
      size_t slash = p.rfind('/');
      std::string_view parent = slash == std::string_view::npos ? std::string_view() : p.substr(0, slash);
      r.parent = entry_of[dirs.at(parent)];
      r.name_off = static_cast<uint32_t>(names_blob.size());
      r.name_len = static_cast<uint16_t>(names[item].size());
      names_blob.append(names[item]);
    }
    if (S_ISDIR(it.mode)) {
      r.aux = uint64_t(first_child[item]) | (uint64_t(children[item].size()) << 32);
      for (uint32_t c : children[item]) r.size += S_ISDIR(items_[c - 1].mode) ? 1 : 0;
    } else if (S_ISREG(it.mode)) {
      r.size = it.size;
      r.aux = chunks;
      FileKey key = MakeFileKey(uid_, it.path, it.size, it.mtime_ns);
      r.key_lo = key.lo;
      r.key_hi = key.hi;
      chunks += ChunkCount(it.size, chunk_size_);
      bytes += it.size;
      ++files;
    } else {
      r.size = it.target.size();
      r.aux = names_blob.size();
      names_blob.append(it.target);
    }
    if (names_blob.size() > Manifest::kMaxNamesBytes) return Status::InvalidArgument("names too large");
  }

  std::string out(Manifest::kHeaderSize, '\0');
  out.append(reinterpret_cast<const char*>(recs.data()), recs.size() * sizeof(EntryRecord));
  out.append(names_blob);
  Put<uint64_t>(&out, kOffMagic, kMagic);
  Put<uint32_t>(&out, kOffFormat, Manifest::kFormat);
  Put<uint32_t>(&out, kOffHeaderSize, Manifest::kHeaderSize);
  Put<uint64_t>(&out, kOffUid, uid_);
  Put<uint32_t>(&out, kOffVersion, version_);
  Put<uint64_t>(&out, kOffChunkSize, chunk_size_);
  Put<uint64_t>(&out, kOffEntryCount, n);
  Put<uint64_t>(&out, kOffNamesBytes, names_blob.size());
  Put<uint64_t>(&out, kOffFileCount, files);
  Put<uint64_t>(&out, kOffTotalBytes, bytes);
  Put<uint64_t>(&out, kOffTotalChunks, chunks);
  Put<int64_t>(&out, kOffCreated, created_unix);
  Put<uint64_t>(&out, kOffChecksum,
                Checksum64(out.data() + Manifest::kHeaderSize, out.size() - Manifest::kHeaderSize));
  return out;
}

}  // namespace hoard
