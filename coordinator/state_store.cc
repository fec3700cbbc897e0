#include "coordinator/state_store.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/msgpack_codec.h"

namespace hoard {
namespace {

// state.msgpack formats: 1 was the whole state rewritten on every change (no
// log); 2 is a snapshot that the log continues.
constexpr uint32_t kLegacyFormat = 1;
constexpr uint32_t kSnapshotFormat = 2;

// Both formats of state.msgpack are maps with a "format" key.
struct SnapshotFormat {
  uint32_t format = 0;
  MSGPACK_DEFINE_MAP(format);
};

// Format 2. The state is packed separately so that its checksum can be
// checked before it is decoded.
struct SnapshotFile {
  uint32_t format = kSnapshotFormat;
  uint64_t seq = 0;  // the last log record the state includes
  uint64_t checksum = 0;  // Checksum64 of state
  std::vector<char> state;  // a packed CoordinatorState
  MSGPACK_DEFINE_MAP(format, seq, checksum, state);
};

// One commit: what changed since the previous one.
struct LogRecord {
  uint64_t seq = 0;
  uint64_t epoch = 0;
  uint64_t placement_epoch = 0;
  std::vector<proto::NodeInfo> nodes;  // added or changed
  std::vector<std::string> removed_nodes;
  std::vector<proto::DatasetMeta> datasets;  // added or changed
  std::vector<std::string> removed_datasets;
  // The quotas, whole, when they changed (a record without them keeps them).
  bool quotas_changed = false;
  std::map<std::string, uint64_t> quotas;
  std::vector<proto::Lease> leases;  // taken or renewed
  std::vector<std::string> removed_leases;  // LeaseKeys
  MSGPACK_DEFINE_MAP(seq, epoch, placement_epoch, nodes, removed_nodes, datasets, removed_datasets, quotas_changed,
                     quotas, leases, removed_leases);
};

// The key each kind of entry is journaled by.
const std::string& KeyOf(const proto::NodeInfo& n) { return n.name; }
const std::string& KeyOf(const proto::DatasetMeta& d) { return d.name; }
// A dataset name has no NUL (IsValidName), so (dataset, job) keys sort by
// dataset then job and never collide.
std::string KeyOf(const proto::Lease& l) { return l.dataset + '\0' + l.job; }


// Added or changed entries (with their bytes) and removed names, between
// `saved` and `now`; false if `now` names an entry twice.
template <typename T>
struct Diff {
  std::vector<std::pair<const T*, std::string>> upserts;
  std::vector<std::string> removed;
};
template <typename T, typename Saved>
bool ComputeDiff(const Saved& saved, const std::vector<T>& now, Diff<T>* diff) {
  // Walk both in name order. The coordinator passes sorted lists, so this is
  // O(n) with no sort; Save runs under the coordinator's lock on every change.
  std::vector<const T*> order;
  order.reserve(now.size());
  for (const T& x : now) order.push_back(&x);
  auto by_name = [](const T* a, const T* b) { return KeyOf(*a) < KeyOf(*b); };
  if (!std::is_sorted(order.begin(), order.end(), by_name)) std::sort(order.begin(), order.end(), by_name);
  msgpack::sbuffer buf;
  auto it = saved.begin();
  for (size_t i = 0; i < order.size(); ++i) {
    const T& x = *order[i];
    const auto key = KeyOf(x);
    if (i > 0 && KeyOf(*order[i - 1]) == key) return false;
    for (; it != saved.end() && it->first < key; ++it) diff->removed.push_back(it->first);
    buf.clear();
    msgpack::pack(buf, x);
    const std::string_view bytes(buf.data(), buf.size());
    if (it != saved.end() && it->first == key) {
      if (it->second.bytes != bytes) diff->upserts.emplace_back(&x, std::string(bytes));
      ++it;
    } else {
      diff->upserts.emplace_back(&x, std::string(bytes));
    }
  }
  for (; it != saved.end(); ++it) diff->removed.push_back(it->first);
  return true;
}

}  // namespace

StateStore::StateStore(std::string dir) : StateStore(std::move(dir), Options()) {}

StateStore::StateStore(std::string dir, Options options) : dir_(std::move(dir)), options_(std::move(options)) {
  if (!options_.logger) options_.logger = spdlog::default_logger();
  journal_ = JournalOrFile(std::move(options_.journal), "the coordinator state journal", JoinPath(dir_, "state.log"),
                           JoinPath(dir_, "state.msgpack"), &log_name_, &snapshot_name_);
}

std::string StateStore::ManifestPath(const proto::DatasetMeta& meta) const {
  char uid[17];
  std::snprintf(uid, sizeof uid, "%016llx", static_cast<unsigned long long>(meta.uid));
  return JoinPath(dir_, "manifests/" + meta.name + "-" + uid + "-v" + std::to_string(meta.version) +
                            ".manifest");
}

void StateStore::Note(std::string line) {
  options_.logger->warn("coordinator state: {}", line);
  recovered_.push_back(std::move(line));
}

CoordinatorState StateStore::SavedState() const {
  CoordinatorState s;
  s.epoch = epoch_;
  s.placement_epoch = placement_epoch_;
  for (const auto& [name, e] : nodes_) s.nodes.push_back(e.value);
  for (const auto& [name, e] : datasets_) s.datasets.push_back(e.value);
  s.quotas = quotas_;
  for (const auto& [key, e] : leases_) s.leases.push_back(e.value);
  return s;
}

Result<uint64_t> StateStore::LoadSnapshot(std::string_view bytes, SnapshotKind* kind) {
  *kind = SnapshotKind::kCurrent;
  uint64_t snapshot_seq = 0;
  const std::string& path = snapshot_name_;
  const std::string advice = "; restore it from a backup, or move it and " + log_name_ + " away to start empty";
  CoordinatorState state;
  try {
    SnapshotFormat f;
    SnapshotFile file;
    // Format 2's state is decoded on its own budget, once its checksum held.
    DecodeState(bytes.data(), bytes.size(), [&](const msgpack::object& tree) {
      tree.convert(f);
      if (f.format == kLegacyFormat) tree.convert(state);
      if (f.format == kSnapshotFormat) tree.convert(file);
    });
    if (f.format == kLegacyFormat) {
      *kind = SnapshotKind::kLegacy;
      Note("upgraded " + path + " from format 1 (one file rewritten per change) to a snapshot plus " + log_name_);
    } else if (f.format == kSnapshotFormat) {
      if (Checksum64(file.state.data(), file.state.size()) != file.checksum) {
        return Status::Corruption("coordinator state " + path + " fails its checksum" + advice);
      }
      UnpackState(file.state.data(), file.state.size(), &state);
      snapshot_seq = file.seq;
    } else {
      return Status::Corruption("coordinator state " + path + " has format " + std::to_string(f.format) +
                                ", this coordinator reads formats 1 and 2");
    }
  } catch (const std::exception& e) {
    return Status::Corruption("coordinator state " + path + " is unreadable (" + e.what() + ")" + advice);
  }
  epoch_ = state.epoch;
  placement_epoch_ = state.placement_epoch;
  quotas_ = state.quotas;
  for (auto& n : state.nodes) {
    std::string b = PackState(n);
    std::string name = n.name;
    if (!nodes_.emplace(name, Entry<proto::NodeInfo>{std::move(n), std::move(b)}).second) {
      return Status::Corruption("coordinator state " + path + " names node " + name + " twice" + advice);
    }
  }
  for (auto& d : state.datasets) {
    std::string b = PackState(d);
    std::string name = d.name;
    if (!datasets_.emplace(name, Entry<proto::DatasetMeta>{std::move(d), std::move(b)}).second) {
      return Status::Corruption("coordinator state " + path + " names dataset " + name + " twice" + advice);
    }
  }
  for (auto& l : state.leases) {
    std::string b = PackState(l);
    std::string key = KeyOf(l);
    leases_.insert_or_assign(std::move(key), Entry<proto::Lease>{std::move(l), std::move(b)});
  }
  return snapshot_seq;
}

Status StateStore::ApplyRecord(std::string_view payload, uint64_t seq) {
  const std::string where = "the record with sequence number " + std::to_string(seq) + " in " + log_name_;
  LogRecord r;
  try {
    UnpackState(payload.data(), payload.size(), &r);
  } catch (const std::exception& e) {
    return Status::Corruption(where + " passes its checksum but cannot be decoded (" + e.what() + ")");
  }
  if (r.seq != seq) {
    return Status::Corruption(where + " has sequence number " + std::to_string(r.seq) + " where " +
                              std::to_string(seq) + " was expected");
  }
  for (const auto& name : r.removed_nodes) {
    if (nodes_.erase(name) == 0) return Status::Corruption(where + " removes node " + name + ", which does not exist");
  }
  for (const auto& name : r.removed_datasets) {
    if (datasets_.erase(name) == 0) {
      return Status::Corruption(where + " removes dataset " + name + ", which does not exist");
    }
  }
  for (auto& n : r.nodes) {
    std::string b = PackState(n);
    std::string name = n.name;
    nodes_.insert_or_assign(std::move(name), Entry<proto::NodeInfo>{std::move(n), std::move(b)});
  }
  for (auto& d : r.datasets) {
    std::string b = PackState(d);
    std::string name = d.name;
    datasets_.insert_or_assign(std::move(name), Entry<proto::DatasetMeta>{std::move(d), std::move(b)});
  }
  if (r.quotas_changed) quotas_ = std::move(r.quotas);
  // A lease's removal is not checked against the table: leases are not part
  // of the placement, and a record removing one twice harms nothing.
  for (const auto& key : r.removed_leases) leases_.erase(key);
  for (auto& l : r.leases) {
    std::string b = PackState(l);
    std::string key = KeyOf(l);
    leases_.insert_or_assign(std::move(key), Entry<proto::Lease>{std::move(l), std::move(b)});
  }
  epoch_ = r.epoch;
  placement_epoch_ = r.placement_epoch;
  return Status::Ok();
}

Result<CoordinatorState> StateStore::Open() {
  recovered_.clear();
  nodes_.clear();
  datasets_.clear();
  quotas_.clear();
  leases_.clear();
  epoch_ = placement_epoch_ = 0;
  open_ = false;
  HOARD_RETURN_IF_ERROR(MakeDirs(JoinPath(dir_, "manifests")));
  // One coordinator per directory: two appending to one log would leave a
  // log that refuses to replay.
  HOARD_ASSIGN_OR_RETURN(lock_fd_, LockFile(JoinPath(dir_, "LOCK"), "the coordinator state " + dir_));

  // The snapshot is decoded once, when the journal asks for its sequence
  // number (the number is inside it); a journal that keeps the number apart
  // may not ask, and it is decoded below.
  SnapshotKind snapshot = SnapshotKind::kNone;
  Status snapshot_error;
  uint64_t snapshot_seq = 0;
  auto load = [&](std::string_view bytes) -> Result<uint64_t> {
    Result<uint64_t> seq = LoadSnapshot(bytes, &snapshot);
    if (!seq.ok()) snapshot_error = seq.status();
    if (seq.ok()) snapshot_seq = *seq;
    return seq;
  };
  Result<Journal::Loaded> loaded = journal_->Open(load);
  // A history that cannot be trusted: say what to do.
  auto refuse = [&](const Status& s) {
    return Status::Corruption(s.message() + ". Restore the data directory from a backup, or move " + log_name_ +
                              " away to start from the snapshot " + snapshot_name_ + " alone (sequence " +
                              std::to_string(snapshot_seq) + "; changes after it are lost)");
  };
  if (!loaded.ok()) {
    if (!snapshot_error.ok() || loaded.status().code() != Code::kCorruption) return loaded.status();
    return refuse(loaded.status());
  }
  if (snapshot == SnapshotKind::kNone && !loaded->snapshot.empty()) {
    HOARD_RETURN_IF_ERROR(load(loaded->snapshot).status());
  }
  snapshot_seq = loaded->snapshot_seq;
  for (std::string& line : loaded->repaired) Note(std::move(line));
  if (snapshot == SnapshotKind::kNone && !loaded->records.empty()) {
    Note("no snapshot " + snapshot_name_ + ": rebuilt the state from " + log_name_ + " alone");
  }
  for (size_t i = 0; i < loaded->records.size(); ++i) {
    if (Status s = ApplyRecord(loaded->records[i], snapshot_seq + 1 + i); !s.ok()) return refuse(s);
  }
  // None yet, or an old format: write one in the current format at once.
  if (snapshot != SnapshotKind::kCurrent) HOARD_RETURN_IF_ERROR(WriteSnapshot());
  snapshot_not_before_ = 0;
  open_ = true;

  // Remove manifests no dataset refers to (a crash between SaveManifest and
  // Save, or a remove whose unlink did not happen).
  std::set<std::string> wanted;
  for (const auto& [name, d] : datasets_) wanted.insert(ManifestPath(d.value));
  const std::string mdir = JoinPath(dir_, "manifests");
  if (DIR* dir = ::opendir(mdir.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string full = JoinPath(mdir, name);
      if (!wanted.count(full)) std::remove(full.c_str());
    }
    ::closedir(dir);
  }
  return SavedState();
}

Status StateStore::WriteSnapshot() {
  SnapshotFile file;
  file.seq = journal_->seq();
  msgpack::sbuffer state;
  msgpack::pack(state, SavedState());
  file.state.assign(state.data(), state.data() + state.size());
  file.checksum = Checksum64(file.state.data(), file.state.size());
  return journal_->WriteSnapshot(PackState(file));
}

void StateStore::MaybeSnapshot() {
  const uint64_t records = journal_->records_since_snapshot();
  if (records < snapshot_not_before_) return;
  if (records < options_.snapshot_every_records && journal_->bytes_since_snapshot() < options_.snapshot_every_bytes) {
    return;
  }
  if (Status s = WriteSnapshot(); !s.ok()) {
    // The commit is durable in the journal; only restarts get slower.
    snapshot_not_before_ = records + options_.snapshot_every_records;
    options_.logger->warn("cannot snapshot the coordinator state (the log grows; retrying in {} commits): {}",
                          options_.snapshot_every_records, s.ToString());
    return;
  }
  snapshot_not_before_ = 0;
}

Status StateStore::Save(const CoordinatorState& state) {
  if (!open_) return Status::Internal("StateStore::Save before a successful Open");
  Diff<proto::NodeInfo> nodes;
  Diff<proto::DatasetMeta> datasets;
  if (!ComputeDiff(nodes_, state.nodes, &nodes)) return Status::InvalidArgument("a node name appears twice");
  if (!ComputeDiff(datasets_, state.datasets, &datasets)) {
    return Status::InvalidArgument("a dataset name appears twice");
  }
  const bool quotas_changed = state.quotas != quotas_;
  Diff<proto::Lease> leases;
  if (!ComputeDiff(leases_, state.leases, &leases)) return Status::InvalidArgument("a lease appears twice");
  if (nodes.upserts.empty() && nodes.removed.empty() && datasets.upserts.empty() && datasets.removed.empty() &&
      leases.upserts.empty() && leases.removed.empty() && state.epoch == epoch_ &&
      state.placement_epoch == placement_epoch_ && !quotas_changed) {
    return Status::Ok();  // already durable
  }

  LogRecord r;
  r.seq = journal_->seq() + 1;
  r.epoch = state.epoch;
  r.placement_epoch = state.placement_epoch;
  for (const auto& [n, bytes] : nodes.upserts) r.nodes.push_back(*n);
  for (const auto& [d, bytes] : datasets.upserts) r.datasets.push_back(*d);
  r.removed_nodes = nodes.removed;
  r.removed_datasets = datasets.removed;
  r.quotas_changed = quotas_changed;
  if (quotas_changed) r.quotas = state.quotas;
  for (const auto& [l, bytes] : leases.upserts) r.leases.push_back(*l);
  r.removed_leases = leases.removed;
  HOARD_RETURN_IF_ERROR(journal_->Append(PackState(r)));

  // Durable: the in-memory copy follows.
  epoch_ = state.epoch;
  placement_epoch_ = state.placement_epoch;
  quotas_ = state.quotas;
  for (const auto& name : nodes.removed) nodes_.erase(name);
  for (const auto& name : datasets.removed) datasets_.erase(name);
  for (auto& [n, bytes] : nodes.upserts) nodes_.insert_or_assign(n->name, Entry<proto::NodeInfo>{*n, std::move(bytes)});
  for (auto& [d, bytes] : datasets.upserts) {
    datasets_.insert_or_assign(d->name, Entry<proto::DatasetMeta>{*d, std::move(bytes)});
  }
  for (const auto& key : leases.removed) leases_.erase(key);
  for (auto& [l, bytes] : leases.upserts) leases_.insert_or_assign(KeyOf(*l), Entry<proto::Lease>{*l, std::move(bytes)});
  MaybeSnapshot();
  return Status::Ok();
}

Status StateStore::SaveManifest(const proto::DatasetMeta& meta, std::string_view bytes) {
  return WriteFileAtomic(ManifestPath(meta), bytes);
}

Result<Manifest> StateStore::LoadManifest(const proto::DatasetMeta& meta) const {
  return Manifest::Load(ManifestPath(meta));
}

Status StateStore::RemoveManifest(const proto::DatasetMeta& meta) {
  if (std::remove(ManifestPath(meta).c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "remove manifest of " + meta.name);
  }
  return Status::Ok();
}

}  // namespace hoard
