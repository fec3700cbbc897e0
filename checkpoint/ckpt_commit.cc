#include "checkpoint/ckpt_commit.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>

#include "store/replica_store.h"
#include "common/fan_out.h"
#include "common/hash.h"

namespace hoard::fuse {

Result<std::shared_ptr<LocalFile>> OpenLocalFile(const std::string& dir, uint64_t id, bool truncate) {
  HOARD_RETURN_IF_ERROR(MakeDirs(dir));
  auto f = std::make_shared<LocalFile>();
  f->id = id;
  f->path = dir + "/" + std::to_string(id);
  struct stat st;
  for (int attempt = 0;; ++attempt) {
    f->fd = UniqueFd(::open(f->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!f->fd.valid()) return Status::FromErrno(errno, "open " + f->path);
    // Shared: several handles never exclude each other; the node agent's
    // exclusive attempt (eviction) fails while any is held.
    if (::flock(f->fd.get(), LOCK_SH) != 0) return Status::FromErrno(errno, "flock " + f->path);
    // Evicted between our open and our lock: open the name again.
    if (::fstat(f->fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + f->path);
    if (st.st_nlink > 0) break;
    if (attempt >= 3) return Status::IoError(f->path + " keeps being deleted while opened");
  }
  if (truncate) {
    // The stamp goes before the bytes do (store/replica_store.h).
    ReplicaStore::ClearGeneration(f->fd.get());
    if (::ftruncate(f->fd.get(), 0) != 0) return Status::FromErrno(errno, "truncate " + f->path);
  }
  if (::fstat(f->fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + f->path);
  {
    // Not shared yet; the lock only satisfies the analysis.
    MutexLock lock(&f->mu);
    f->size = static_cast<uint64_t>(st.st_size);
  }
  return f;
}

void LocalFile::WillChange() {
  // A dirty file has no stamp: cleared by the first change since the
  // commit (or the open) that left it clean.
  if (!dirty) ReplicaStore::ClearGeneration(fd.get());
  dirty = true;
}

Committer::Committer(Options options, proto::ClientPool* pool, proto::LeaderPool* coordinator,
                     std::function<std::shared_ptr<const ClusterView>()> current_view)
    : options_(std::move(options)),
      pool_(pool),
      coordinator_(coordinator),
      current_view_(std::move(current_view)),
      tasks_({.keep_idle = static_cast<size_t>(std::max(1, options_.parallel_puts))}) {}

std::vector<uint32_t> Committer::ReplicaCandidates(const ClusterView& view, uint64_t id, uint32_t index,
                                                   const std::string& self) {
  std::vector<std::pair<uint64_t, uint32_t>> scored;
  const auto& nodes = view.map().nodes;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].up || nodes[i].name == self) continue;
    scored.emplace_back(proto::CkptHolderScore(id, index, nodes[i].name), i);
  }
  std::sort(scored.begin(), scored.end(), std::greater<>());
  std::vector<uint32_t> out;
  for (const auto& [score, i] : scored) out.push_back(i);
  return out;
}

std::vector<std::string> Committer::Replicate(const ClusterView& view, const std::vector<uint32_t>& candidates,
                                              size_t want, const proto::PutCkptChunk& put,
                                              const std::string& bytes) {
  std::vector<std::string> holders;
  for (uint32_t c : candidates) {
    if (holders.size() >= want) break;
    const proto::NodeInfo& node = view.node(c);
    auto lease = pool_->Acquire(node.endpoint);
    const std::string_view payload(bytes);
    Result<proto::CkptPutReply> r = lease->Call(put, options_.peer_timeout, nullptr, &payload);
    if (r.ok()) {
      holders.push_back(node.name);
    } else {
      options_.logger->warn("checkpoint file {} chunk {}: not stored on {}: {}; trying the next node", put.id,
                            put.index, node.name, r.status().ToString());
    }
  }
  return holders;
}

namespace {

// The map's `field` if there is a map and it is in [1, max]; else the
// default map's (a map from a newer or broken coordinator must not make the
// mount commit what the coordinator refuses).
template <typename T>
T FromMap(const ClusterView* view, T proto::ClusterMap::*field, T max) {
  const T fallback = proto::ClusterMap{}.*field;
  if (view == nullptr) return fallback;
  const T v = view->map().*field;
  return v >= 1 && v <= max ? v : fallback;
}

}  // namespace

uint32_t Committer::Replicas(const ClusterView* view) {
  return FromMap(view, &proto::ClusterMap::ckpt_replicas, proto::kMaxCkptReplicas);
}

uint64_t Committer::ChunkSize(const ClusterView* view) {
  return FromMap(view, &proto::ClusterMap::ckpt_chunk_size, proto::kMaxCkptChunkSize);
}

std::vector<std::string> Committer::SendChunk(const ClusterView& view, uint64_t id, uint64_t gen, uint32_t index,
                                             uint64_t checksum, const std::string& bytes) {
  const size_t want = copies_wanted(&view);
  if (want == 0) return {};
  proto::PutCkptChunk put{.id = id, .gen = gen, .index = index, .checksum = checksum};
  return Replicate(view, ReplicaCandidates(view, id, index, options_.node_name), want, put, bytes);
}

std::vector<std::string> Committer::ReusableHolders(const ClusterView* view, const proto::CkptEntry& base,
                                                    uint32_t index, size_t want) {
  if (index >= base.replicas.size()) return {};
  std::vector<std::string> holders;
  for (const std::string& h : base.replicas[index]) {
    if (holders.size() >= want) break;
    const auto& nodes = view->map().nodes;
    if (std::any_of(nodes.begin(), nodes.end(), [&](const proto::NodeInfo& n) { return n.name == h && n.up; })) {
      holders.push_back(h);
    }
  }
  if (holders.size() < want) return {};
  return holders;
}

std::optional<SentChunks::Sent> Committer::SameAsBase(const ClusterView* view, const LocalFile& f, uint32_t index,
                                                      uint64_t checksum, uint64_t len, uint64_t chunk_size,
                                                      size_t want) {
  std::shared_ptr<const proto::CkptEntry> base = f.base.load();
  if (base == nullptr || base->chunk_size != chunk_size || index >= base->checksums.size() ||
      base->checksums[index] != checksum ||
      std::min<uint64_t>(base->chunk_size, base->size - uint64_t(index) * base->chunk_size) != len) {
    return std::nullopt;
  }
  SentChunks::Sent s{.checksum = checksum, .length = len, .chunk_size = chunk_size,
                     .reused_gen = proto::CkptChunkGen(*base, index)};
  if (want > 0) {
    if (view == nullptr) return std::nullopt;
    s.holders = ReusableHolders(view, *base, index, want);
    if (s.holders.empty()) return std::nullopt;
  }
  return s;
}

namespace {

// The local fdatasync of a commit, run on the committer's pool: its result,
// and whether it is done (the commit waits for it, also when it returns early).
struct LocalSync {
  int sync_errno = 0;  // written by the task, read after Wait
  Status dir_sync;     // likewise
  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;

  void Finish() EXCLUDES(mu) {
    MutexLock lock(&mu);
    done = true;
    cv.NotifyAll();
  }
  void Wait() EXCLUDES(mu) {
    MutexLock lock(&mu);
    while (!done) cv.Wait(&mu);
  }
};

// The send of chunk `i` made while the file was written, if the commit can
// count it: the chunk's length, and enough holders, all still up.
const SentChunks::Sent* Reusable(const std::unordered_map<uint32_t, SentChunks::Sent>& ahead, uint64_t i,
                                 uint64_t len, uint64_t cs, size_t want, const ClusterView* view) {
  auto it = ahead.find(static_cast<uint32_t>(i));
  if (it == ahead.end() || it->second.length != len || it->second.chunk_size != cs ||
      it->second.holders.size() < want) {
    return nullptr;
  }
  if (want > 0 && view == nullptr) return nullptr;
  for (const std::string& h : it->second.holders) {
    const auto& nodes = view->map().nodes;
    if (std::none_of(nodes.begin(), nodes.end(), [&](const proto::NodeInfo& n) { return n.name == h && n.up; })) {
      return nullptr;
    }
  }
  return &it->second;
}

}  // namespace

Result<Committer::Done> Committer::Commit(LocalFile& f, bool writing) {
  const int fd = f.fd.get();
  // The local fdatasync (L) runs while the chunks are read back and sent:
  // the bytes are in the page cache either way, and the disk flush and the
  // transfers overlap. The commit waits for both.
  LocalSync local;
  const int injected = fail_next_sync_.exchange(0);
  tasks_.Run([&] {
    // Held by the caller, which waits for this task before it returns.
    f.mu.AssertHeld();
    if (injected != 0) local.sync_errno = injected;
    else if (::fdatasync(fd) != 0) local.sync_errno = errno;
    // A file this open created is not on the disk until its name is: once
    // per open is enough (renames in the mount never move the local file).
    else if (!f.dir_synced && (local.dir_sync = SyncDir(DirName(f.path))).ok()) f.dir_synced = true;
    local.Finish();
  });
  struct SyncWaiter {
    LocalSync& sync;
    ~SyncWaiter() { sync.Wait(); }
  } wait_sync{local};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + f.path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::shared_ptr<const ClusterView> view = current_view_();
  const uint64_t cs = ChunkSize(view.get());
  const uint64_t chunks = proto::CkptChunkCount(size, cs).value_or(0);  // cs is in range: always a count
  const size_t want = copies_wanted(view.get());
  proto::CkptCommit commit{.id = f.id,
                           .gen = f.gen + 1,
                           .size = size,
                           .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                           .chunk_size = cs,
                           .writer = options_.node_name,
                           .replicas_wanted = Replicas(view.get()),
                           .ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec,
                           .writing = writing,
                           .mount = options_.mount};
  commit.checksums.resize(chunks);
  commit.replicas.resize(chunks);
  commit.chunk_gens.assign(chunks, commit.gen);
  std::atomic<uint64_t> reused{0};
  // Chunks sent while the file was written: usable if every holder is
  // still up (no write touched them since: SentChunks). Sends resume after
  // the commit, for the generation after it when it succeeded.
  std::unordered_map<uint32_t, SentChunks::Sent> ahead = f.sent.BeginCommit(commit.gen);
  bool committed = false;
  struct EndCommit {
    SentChunks& sent;
    uint64_t gen;
    bool& ok;
    ~EndCommit() { sent.EndCommit(ok ? gen + 1 : gen); }
  } end_commit{f.sent, commit.gen, committed};

  // Chunks are read back (from the page cache, just written), checksummed
  // and sent `parallel_puts` at a time, each slot with its own buffer.
  std::atomic<uint64_t> short_chunks{0};
  const size_t width = static_cast<size_t>(std::max(1, options_.parallel_puts));
  std::vector<std::string> bufs(width);
  auto work = [&](uint64_t i, size_t slot) -> Status {
    std::string& buf = bufs[slot];
    const uint64_t len = std::min(cs, size - i * cs);
    auto count = [&](const SentChunks::Sent& s) {
      commit.checksums[i] = s.checksum;
      commit.replicas[i] = s.holders;
      if (s.reused_gen != 0) {
        commit.chunk_gens[i] = s.reused_gen;
        reused.fetch_add(1, std::memory_order_relaxed);
      }
    };
    if (const SentChunks::Sent* sent = Reusable(ahead, i, len, cs, want, view.get())) {
      count(*sent);
      sent_ahead_.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    // Untouched since the file held the committed generation: its copies
    // still hold these bytes.
    std::shared_ptr<const proto::CkptEntry> base = f.base.load();
    if (base != nullptr && i < base->checksums.size() && f.sent.Untouched(static_cast<uint32_t>(i))) {
      if (std::optional<SentChunks::Sent> same =
              SameAsBase(view.get(), f, static_cast<uint32_t>(i), base->checksums[i], len, cs, want)) {
        count(*same);
        return Status::Ok();
      }
    }
    buf.resize(len);
    // The first error ends the fan-out: no chunk starts after it.
    if (Status s = PreadAll(fd, buf.data(), len, static_cast<off_t>(i * cs)); !s.ok()) return s;
    commit.checksums[i] = Checksum64(buf.data(), len);
    // Written again with the same bytes: still no copy to send.
    if (std::optional<SentChunks::Sent> same =
            SameAsBase(view.get(), f, static_cast<uint32_t>(i), commit.checksums[i], len, cs, want)) {
      count(*same);
      return Status::Ok();
    }
    sent_at_commit_.fetch_add(1, std::memory_order_relaxed);
    if (want == 0 || view == nullptr) return Status::Ok();
    commit.replicas[i] = SendChunk(*view, f.id, commit.gen, static_cast<uint32_t>(i), commit.checksums[i], buf);
    if (commit.replicas[i].size() < want) short_chunks.fetch_add(1);
    return Status::Ok();
  };
  const Status read_error = FanOut(&tasks_, chunks, width, work);
  local.Wait();
  if (local.sync_errno != 0) {
    f.sync_failed = true;
    return Status::FromErrno(local.sync_errno, "fdatasync " + f.path);
  }
  if (!local.dir_sync.ok()) return local.dir_sync.Annotate("commit " + f.path);
  if (!read_error.ok()) return read_error;

  commit.level = static_cast<uint8_t>(want > 0 && short_chunks.load() == 0 ? proto::CkptLevel::kR
                                                                           : proto::CkptLevel::kL);
  if (want > 0 && short_chunks.load() > 0) {
    options_.logger->warn("checkpoint file {}: {} of {} chunks on fewer than {} nodes (too few up): committed at L",
                          f.id, short_chunks.load(), chunks, Replicas(view.get()));
  }
  reused_chunks_.fetch_add(reused.load(), std::memory_order_relaxed);
  // Sends of this generation the commit does not count: their holders
  // delete them once it is committed.
  for (const SentChunks::Discard& d : f.sent.Discarded(commit.gen)) {
    for (const std::string& node : d.holders) {
      commit.discard.push_back(
          {.node = node, .id = f.id, .gen = d.gen, .index = d.index, .checksum = d.checksum});
    }
  }
  auto lease = coordinator_->Acquire();
  Result<proto::CkptEntryReply> r = lease->Call(commit, options_.coordinator_timeout);
  if (!r.ok()) return r.status().Annotate("commit of checkpoint file " + std::to_string(f.id));
  committed = true;
  // The copy now holds exactly this generation (see replica_store.h).
  ReplicaStore::StampGeneration(fd, commit.gen);
  auto entry = std::make_shared<const proto::CkptEntry>(std::move(r->entry));
  return Done{commit.gen, static_cast<proto::CkptLevel>(entry->level), entry};
}

}  // namespace hoard::fuse
