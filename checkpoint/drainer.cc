#include "checkpoint/drainer.h"

#include <algorithm>
#include <set>
#include <thread>

#include "common/fan_out.h"
#include "common/hash.h"

namespace hoard {

Drainer::Drainer(Options options, ReplicaStore* store)
    : options_(std::move(options)),
      store_(store),
      coordinator_(std::make_unique<proto::LeaderClient>(*options_.context, options_.coordinator)),
      origins_(static_cast<size_t>(std::max(1, options_.upload_streams))),
      upload_pool_({.max_threads = origins_.size(), .keep_idle = origins_.size()}) {}

Drainer::~Drainer() { Stop(); }

void Drainer::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Drainer::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  gate_.SetLimits({});  // an upload waiting for its byte budget goes on, sees stopping_ and ends
  if (thread_.joinable()) thread_.join();
}

void Drainer::RequestRebuild() {
  {
    MutexLock lock(&mu_);
    rebuild_requested_ = true;
  }
  cv_.NotifyAll();
}

void Drainer::Loop() {
  std::chrono::milliseconds backoff = options_.backoff_min;
  while (!stopping()) {
    int drained = 0;
    Status s = RunOnce(&drained);
    std::chrono::milliseconds wait = options_.poll_interval;
    if (!s.ok()) {
      options_.logger->debug("checkpoint drain round: {}; next in {} ms", s.ToString(), backoff.count());
      wait = backoff;
      backoff = std::min(backoff * 2, options_.backoff_max);
    } else {
      backoff = options_.backoff_min;
      if (drained > 0) wait = std::chrono::milliseconds(0);  // more work may be waiting
    }
    MutexLock lock(&mu_);
    const auto deadline = options_.clock->Now() + wait;
    ++waits_;
    next_round_ = deadline;
    while (!stopping() && !rebuild_requested_.load()) {
      if (!options_.clock->WaitUntil(&cv_, &mu_, deadline)) break;
    }
  }
}

uint64_t Drainer::TEST_waits() const {
  MutexLock lock(&mu_);
  return waits_;
}

std::chrono::steady_clock::time_point Drainer::TEST_next_round() const {
  MutexLock lock(&mu_);
  return next_round_;
}

Status Drainer::RunOnce(int* drained) {
  if (drained != nullptr) *drained = 0;
  const auto now = options_.clock->Now();
  if (rebuild_requested_.exchange(false)) {
    asked_rebuild_ = false;  // the list we held in full lost a replica
    rebuilt_seq_ = 0;
  }
  proto::CkptWork req{.node = options_.node,
                      .rebuild = !asked_rebuild_ || now - last_rebuild_ask_ >= options_.rebuild_interval,
                      .rebuilt = rebuilt_seq_,
                      .dropped = dropped_seq_};
  // Eviction spares files changed since (about) now: the reply cannot know them.
  const auto asked_at = std::chrono::system_clock::now();
  Result<proto::CkptWorkReply> work = [&] {
    MutexLock lock(&coordinator_mu_);  // uncontended: no upload stream runs now
    return coordinator_->Call(req, options_.rpc_timeout);
  }();
  if (!work.ok()) return work.status().Annotate("CkptWork");
  if (req.rebuild) {
    asked_rebuild_ = true;
    last_rebuild_ask_ = now;
  }
  gate_.SetLimits({.connections = 0, .bytes_per_s = double(work->max_drain_bytes_per_s)});

  // A reply whose keep list misses a file it asks us to drain or rebuild
  // contradicts itself: evicting on it could delete undrained bytes.
  std::set<uint64_t> keep(work->keep_files.begin(), work->keep_files.end());
  bool consistent = true;
  for (const auto& t : work->drain) consistent = consistent && keep.count(t.entry.id) > 0;
  for (const auto& c : work->rebuild) consistent = consistent && keep.count(c.id) > 0;
  if (consistent) {
    counters_.evicted_files += store_->DropFilesExcept(keep, asked_at, work->keep_from_id);
  } else {
    options_.logger->warn("checkpoint eviction skipped: the coordinator's keep list misses files it still drains");
  }

  // Copies no generation anyone may read uses (older generations of files
  // rewritten since, removed files', sends a commit did not count).
  if (!work->drop.empty() || !work->drop_files.empty()) {
    std::vector<ReplicaStore::Ref> refs;
    for (const proto::CkptReplicaRef& d : work->drop) refs.push_back({d.id, d.gen, d.index, d.checksum});
    std::vector<std::pair<uint64_t, uint64_t>> files;
    for (const auto& f : work->drop_files) files.emplace_back(f.id, f.gen);
    counters_.dropped_copies += store_->DropReplicas(refs) + store_->DropWholeFiles(files);
  }
  dropped_seq_ = std::max(dropped_seq_, work->drop_seq);

  Status result = Rebuild(work->rebuild);
  if (!result.ok()) {
    asked_rebuild_ = false;  // ask for the list again next round
    rebuilt_seq_ = 0;        // and hold no list in full
  } else if (work->rebuild_seq != 0 && !stopping()) {
    rebuilt_seq_ = work->rebuild_seq;  // told at the next call: our new copies count
  }
  if (Status d = Drain(work->drain, drained); !d.ok()) return d;
  return result;
}

Status Drainer::Drain(const std::vector<proto::CkptDrainTask>& tasks, int* drained) {
  std::atomic<int> done{0};
  // Each slot is one upload stream, with its own origin connection.
  auto stream = [&](size_t k, size_t slot) -> Status {
    if (stopping()) return Status::Ok();  // no new upload once Stop began
    const proto::CkptEntry& e = tasks[k].entry;
    NoteUpload(e, false);
    bool at_origin = false;
    Status up = Upload(tasks[k], slot, &at_origin);
    if (up.ok()) {
      counters_.drained_files += 1;
      counters_.drained_bytes += e.size;
      ++done;
    } else {
      counters_.failures += 1;
      options_.logger->warn("checkpoint {} (id {} gen {}) not drained: {}", e.path, e.id, e.gen, up.ToString());
    }
    Result<proto::CkptDrainedReply> rep = [&] {
      MutexLock lock(&coordinator_mu_);
      return coordinator_->Call(
          proto::CkptDrained{.node = options_.node,
                             .id = e.id,
                             .gen = e.gen,
                             .ok = up.ok(),
                             .error = up.ToString(),
                             .at_origin = !up.ok() && at_origin},
          options_.rpc_timeout);
    }();
    if (up.ok() && rep.ok()) NoteUpload(e, true);
    // After a failed upload the rest would most likely fail alike (origin
    // down or full): the round ends (FanOut starts no task after the first
    // error) and the next one backs off.
    return !rep.ok() ? rep.status().Annotate("CkptDrained") : up;
  };
  const Status first_error = FanOut(&upload_pool_, tasks.size(), origins_.size(), stream);
  if (drained != nullptr) *drained = done.load();
  return first_error;
}

Result<CkptOrigin*> Drainer::Origin(size_t stream) {
  std::unique_ptr<CkptOrigin>& origin = origins_.at(stream);
  if (origin == nullptr) {
    if (options_.origin_source.empty()) {
      return Status::Unavailable("this node has no checkpoint origin (hoard-node --ckpt-origin)");
    }
    if (!options_.open_origin) return Status::Internal("the node agent was given no checkpoint origin opener");
    HOARD_ASSIGN_OR_RETURN(origin, options_.open_origin(options_.origin_source));
  }
  return origin.get();
}

Status Drainer::Upload(const proto::CkptDrainTask& task, size_t stream, bool* at_origin) {
  const proto::CkptEntry& e = task.entry;
  const std::optional<uint64_t> chunks = proto::CkptChunkCount(e.size, e.chunk_size);
  if (!chunks || e.checksums.size() != *chunks || e.gen == 0 ||
      !proto::IsSafeCkptPath(task.tmp_path) || task.tmp_path.empty()) {
    return Status::InvalidArgument("malformed drain task for id " + std::to_string(e.id));
  }
  *at_origin = true;  // until WriteAll says a chunk was the trouble
  HOARD_ASSIGN_OR_RETURN(CkptOrigin * origin, Origin(stream));
  // Create truncates: a partial upload of an earlier attempt is overwritten.
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<CkptWriter> writer, origin->Create(task.tmp_path));
  Status s = WriteAll(e, writer.get(), at_origin);
  if (s.ok()) s = writer->Close();
  if (!s.ok()) {
    writer.reset();
    // Best effort: a leftover is replaced by the next attempt anyway.
    if (Status u = origin->Unlink(task.tmp_path); !u.ok() && u.code() != Code::kNotFound) {
      options_.logger->debug("cannot remove the partial upload {}: {}", task.tmp_path, u.ToString());
    }
  }
  return s;
}

Status Drainer::WriteAll(const proto::CkptEntry& e, CkptWriter* writer, bool* at_origin) {
  for (uint32_t i = 0; i < e.checksums.size(); ++i) {
    Result<std::string> bytes = FetchChunk(e, i);
    if (!bytes.ok()) {
      *at_origin = false;
      return bytes.status();
    }
    gate_.Pace(OriginGate::Priority::kWarm, bytes->size());
    if (stopping()) {
      *at_origin = false;
      return Status::Unavailable("the node agent is stopping");
    }
    HOARD_RETURN_IF_ERROR(writer->WriteAt(uint64_t(i) * e.chunk_size, bytes->data(), bytes->size()));
  }
  return Status::Ok();
}

void Drainer::NoteUpload(const proto::CkptEntry& e, bool ok) {
  MutexLock lock(&uploads_mu_);
  auto [it, added] = uploads_.try_emplace(e.id, e.gen, 0);
  if (it->second.first != e.gen) it->second = {e.gen, 0};
  // The oldest ids go first (they are the least likely to be drained again).
  if (added && uploads_.size() > kUploadsKept) {
    uploads_.erase(uploads_.begin() == it ? std::next(it) : uploads_.begin());
  }
  if (ok) {
    ++it->second.second;
    return;
  }
  // About to upload it again.
  const uint32_t before = it->second.second;
  if (before < kMaxRepeatedUploads) return;
  counters_.repeated_uploads += 1;
  const auto now = options_.clock->Now();
  if (repeat_logged_ != std::chrono::steady_clock::time_point{} && now - repeat_logged_ < std::chrono::minutes(1)) {
    return;
  }
  repeat_logged_ = now;
  options_.logger->warn(
      "checkpoint {} (id {} gen {}): uploading it again, {} times now: the coordinator asks again after each upload, "
      "so it does not find them on the checkpoint origin it publishes to (is this node's --ckpt-origin the "
      "coordinator's, and the same file system: not one mounted anew under a running daemon?). See the "
      "coordinator's log and `hoard checkpoint ls`",
      e.path, e.id, e.gen, before + 1);
}

Result<std::string> Drainer::FetchChunk(const proto::CkptEntry& e, uint32_t i) {
  const uint64_t offset = uint64_t(i) * e.chunk_size;
  const uint64_t length = std::min(e.chunk_size, e.size - offset);
  const uint64_t gen = proto::CkptChunkGen(e, i);  // the generation whose copy holds it
  Result<std::string> local = store_->Read(e.id, gen, i, e.checksums[i], e.chunk_size, length);
  if (local.ok()) return local;
  return FetchFromPeers(proto::CkptChunkHolders(e, i), proto::GetCkptChunk{.id = e.id,
                                                                          .gen = gen,
                                                                          .index = i,
                                                                          .checksum = e.checksums[i],
                                                                          .chunk_size = e.chunk_size,
                                                                          .chunk_length = length});
}

Result<std::string> Drainer::FetchFromPeers(const std::vector<std::string>& holders,
                                            const proto::GetCkptChunk& req) {
  std::string tried;
  std::set<std::string> asked;
  for (const std::string& name : holders) {
    if (name.empty() || name == options_.node || !asked.insert(name).second) continue;
    const std::string endpoint = options_.resolve(name);
    tried += " " + name;
    if (endpoint.empty()) {
      tried += " (unknown or down)";
      continue;
    }
    zmq::message_t payload;
    auto lease = options_.peers->Acquire(endpoint);
    Result<proto::CkptChunkData> r = lease->Call(req, options_.peer_timeout, &payload);
    if (!r.ok()) {
      tried += " (" + std::string(CodeName(r.status().code())) + ")";
      continue;
    }
    // Checked here too: a peer's disk or a bug must not put wrong bytes on the origin.
    if (payload.size() != req.chunk_length || Checksum64(payload.data(), payload.size()) != req.checksum) {
      tried += " (wrong bytes)";
      continue;
    }
    return std::string(static_cast<const char*>(payload.data()), payload.size());
  }
  return Status::NotFound("chunk " + std::to_string(req.index) + " of checkpoint file " + std::to_string(req.id) +
                          " gen " + std::to_string(req.gen) + " is on no reachable holder (asked:" +
                          (tried.empty() ? std::string(" none") : tried) + ")");
}

Status Drainer::Rebuild(const std::vector<proto::CkptChunkRef>& refs) {
  Status result;
  for (const proto::CkptChunkRef& c : refs) {
    if (stopping()) break;
    if (store_->HasReplica(c.id, c.gen, c.index, c.checksum)) continue;
    Result<std::string> bytes = FetchFromPeers(c.holders, proto::GetCkptChunk{.id = c.id,
                                                                              .gen = c.gen,
                                                                              .index = c.index,
                                                                              .checksum = c.checksum,
                                                                              .chunk_size = c.chunk_size,
                                                                              .chunk_length = c.length});
    Status s = bytes.ok() ? store_->Put(c.id, c.gen, c.index, c.checksum, *bytes) : bytes.status();
    if (s.ok()) {
      counters_.rebuilt_chunks += 1;
    } else {
      options_.logger->warn("checkpoint replica {}-{}-{} not rebuilt: {}", c.id, c.gen, c.index, s.ToString());
      result = s;
    }
  }
  return result;
}

}  // namespace hoard
