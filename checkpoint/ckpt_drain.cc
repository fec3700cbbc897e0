// CkptTable: drain scheduling, the origin queue's bookkeeping, commit
// markers, retention and status (see ckpt_table.h for the rules).
#include "checkpoint/ckpt_table.h"

#include <algorithm>

namespace hoard {

using proto::CkptLevel;

// ---- drain ----------------------------------------------------------------

std::optional<std::string> CkptTable::DrainerLocked(const CkptNode& n, const std::set<std::string>& up) const {
  if (!n.writer.empty() && up.contains(n.writer)) return n.writer;
  for (const auto& holders : n.replicas) {
    for (const std::string& h : holders) {
      if (up.contains(h)) return h;
    }
  }
  return std::nullopt;
}

proto::CkptWorkReply CkptTable::Work(const std::string& node, const std::set<std::string>& up_nodes, bool rebuild,
                                     double dataset_fill_bytes_per_s, uint64_t rebuilt, uint64_t dropped) {
  MutexLock lock(&mu_);
  proto::CkptWorkReply reply;
  // The node holds the whole list we sent it last: the copies on it count.
  // (If that cannot be journalled, its next Work echoes the list again.)
  if (auto l = listed_.find(node); l != listed_.end() && rebuilt != 0 && rebuilt == l->second.first) {
    if (ConfirmLocked(node, l->second.second).ok()) listed_.erase(l);
  }
  // The node deleted what we listed up to `dropped` (drops are listed in
  // seq order, so everything of its up to there). Not durable yet: it is
  // listed again, and deleting twice is harmless.
  if (auto mine = drops_by_node_.find(node); dropped != 0 && mine != drops_by_node_.end()) {
    CkptRecord done;
    for (uint64_t seq : mine->second) {
      if (seq > dropped) break;
      done.drops_done.push_back(seq);
    }
    if (!done.drops_done.empty()) {
      if (Status s = SaveLocked(std::move(done)); !s.ok()) {
        options_.logger->warn("checkpoint copies deleted by {} not recorded yet: {}", node, s.ToString());
      }
    }
  }
  const auto now = options_.clock->Now();
  // Files some mount still has open for writing are not drained: a commit
  // made before its writer closed may be half of what it writes.
  std::erase_if(writing_commits_, [&](const auto& kv) { return kv.second.expiry <= now; });
  // Until the mounts have reported after a restart, a file committed while
  // being written may still be.
  const bool reporting = now - opened_at_ < options_.writing_hold;
  auto writing = [&](const CkptNode& n) {
    mu_.AssertHeld();
    return writing_.contains(n.id) || writing_commits_.contains(n.id) ||
           (reporting && n.committed_writing && n.committed_unix_ms < opened_unix_ms_);
  };
  // The node asks between rounds only (proto::CkptWork): whatever it was
  // given before and did not report, it is not uploading now.
  std::erase_if(leases_, [&](const auto& kv) { return kv.second.node == node; });
  uint32_t held = 0;
  // Two passes over the undrained files in commit order: flushed ones first.
  for (int pass = 0; pass < 2 && held < options_.max_tasks_per_node; ++pass) {
    for (const auto& [seq, id] : undrained_) {
      if (held >= options_.max_tasks_per_node) break;
      if (urgent_.contains(id) != (pass == 0)) continue;
      const CkptNode& n = nodes_.at(id);
      if (auto l = leases_.find(id); l != leases_.end() && l->second.gen == n.gen && l->second.expiry > now) continue;
      if (writing(n) || DrainerLocked(n, up_nodes) != node) continue;
      leases_[id] = Lease{.gen = n.gen, .node = node, .expiry = now + options_.lease};
      reply.drain.push_back({.entry = ToEntryLocked(n), .tmp_path = StagingPath(n.id, n.gen, node)});
      ++held;
    }
  }
  // Every copy not released is wanted, not only those naming this node: a
  // replica stored for a commit that has not arrived yet names nobody.
  for (const auto& [id, n] : nodes_) {
    if (!n.is_dir && (!n.released || !n.old_gens.empty())) reply.keep_files.push_back(id);
  }
  reply.keep_from_id = next_id_;
  // A node given new copies (Rereplicate) gets its list now, not at its next
  // periodic ask.
  if (rebuild_due_.erase(node) > 0) rebuild = true;
  // A list longer than a page goes out a page per reply, each from where the
  // last stopped (a message's arrays hold at most 65,536 entries).
  const auto cursor = rebuild_cursor_.find(node);
  if (cursor != rebuild_cursor_.end()) rebuild = true;
  const auto [from_id, from_index] = cursor != rebuild_cursor_.end() ? cursor->second : std::pair<uint64_t, uint32_t>{};
  std::set<ChunkOf> page_unconfirmed;
  const auto unconfirmed = unconfirmed_.find(node);
  bool more = false;
  for (auto it = nodes_.lower_bound(from_id); rebuild && !more && it != nodes_.end(); ++it) {
    const auto& [id, n] = *it;
    if (n.is_dir || n.orphan || n.released || n.gen == 0 || n.chunk_size == 0) continue;
    for (uint32_t i = id == from_id ? from_index : 0; i < n.checksums.size(); ++i) {
      if (reply.rebuild.size() == options_.rebuild_page) {
        rebuild_cursor_[node] = {id, i};
        more = true;
        break;
      }
      std::vector<std::string> holders = proto::CkptChunkHolders(n, i);
      if (std::erase(holders, node) == 0) continue;  // not one of its chunks
      proto::CkptChunkRef ref{.id = id,
                              .gen = proto::CkptChunkGen(n, i),
                              .index = i,
                              .checksum = n.checksums[i],
                              .length = std::min<uint64_t>(n.chunk_size, n.size - uint64_t(i) * n.chunk_size),
                              .chunk_size = n.chunk_size};
      ref.holders = std::move(holders);
      reply.rebuild.push_back(std::move(ref));
      if (unconfirmed != unconfirmed_.end() && unconfirmed->second.contains(ChunkOf{id, n.gen, i})) {
        page_unconfirmed.insert(ChunkOf{id, n.gen, i});
      }
    }
  }
  if (rebuild) {
    if (!more) rebuild_cursor_.erase(node);
    reply.rebuild_seq = next_rebuild_seq_++;
    // Holding this page confirms the new copies on it (and only those).
    listed_[node] = {reply.rebuild_seq, std::move(page_unconfirmed)};
  }
  if (auto mine = drops_by_node_.find(node); mine != drops_by_node_.end()) {
    for (uint64_t seq : mine->second) {
      if (reply.drop.size() + reply.drop_files.size() >= options_.drop_page) break;
      const CkptDrop& d = drops_.at(seq);
      if (d.whole) {
        // Not while this node's copy holds a generation someone may read.
        const CkptNode* n = FindLocked(d.id);
        const bool live = n != nullptr && ((!n->orphan && n->writer == node && n->gen > d.gen) ||
                                           std::any_of(n->old_gens.begin(), n->old_gens.end(), [&](const CkptOldGen& g) {
                                             return g.writer == node && g.gen > d.gen;
                                           }));
        if (!live) reply.drop_files.push_back({.id = d.id, .gen = d.gen});
      } else if (!RefLiveLocked(d.id, node, d.gen, d.index, d.checksum)) {
        // Live again (re-replication named this node a holder of it since):
        // skipped, and done with.
        reply.drop.push_back({.id = d.id, .gen = d.gen, .index = d.index, .checksum = d.checksum});
      }
      reply.drop_seq = seq;
    }
  }
  if (const uint64_t budget = DrainBudgetLocked(dataset_fill_bytes_per_s); budget != 0) {
    // At least 1: 0 would mean unlimited to the node.
    reply.max_drain_bytes_per_s = std::max<uint64_t>(1, budget / std::max<size_t>(1, up_nodes.size()));
  }
  return reply;
}

Status CkptTable::ConfirmLocked(const std::string& node, const std::set<ChunkOf>& chunks) {
  CkptRecord r;
  for (const ChunkOf& c : chunks) {
    // Plain copies, not structured bindings: clang 14 (Debian 12's, which
    // builds the fuzz targets) cannot capture those in a lambda.
    const uint64_t id = std::get<0>(c), gen = std::get<1>(c);
    const uint32_t index = std::get<2>(c);
    auto it = nodes_.find(id);
    auto is_it = [&](const CkptUnconfirmed& u) { return u.node == node && u.gen == gen && u.index == index; };
    if (it == nodes_.end() || std::none_of(it->second.unconfirmed.begin(), it->second.unconfirmed.end(), is_it)) {
      continue;  // removed, or committed again since
    }
    std::erase_if(PutLocked(&r, it->second)->unconfirmed, is_it);
  }
  if (r.put.empty()) return Status::Ok();
  Status s = SaveLocked(std::move(r));
  if (!s.ok()) options_.logger->warn("checkpoint copies confirmed by {} not recorded yet: {}", node, s.ToString());
  return s;
}

uint64_t CkptTable::DrainBudget(double dataset_fill_bytes_per_s) const {
  MutexLock lock(&mu_);
  return DrainBudgetLocked(dataset_fill_bytes_per_s);
}

uint64_t CkptTable::DrainBudgetLocked(double fill) const {
  const uint64_t max = options_.drain_max_bytes_per_s;
  const double share = options_.drain_share;
  if (fill <= 0 || share >= 1 || share < 0 || !urgent_.empty() || AnyOverdueLocked()) return max;
  const double fair = fill * share / (1 - share);
  const uint64_t budget = std::max<uint64_t>(options_.drain_min_bytes_per_s, static_cast<uint64_t>(fair));
  return max == 0 ? budget : std::min(max, budget);
}

bool CkptTable::AnyOverdueLocked() const {
  if (undrained_.empty()) return false;
  // undrained_ is in commit order: the first is the oldest.
  const CkptNode& oldest = nodes_.at(undrained_.begin()->second);
  return NowMs() - oldest.committed_unix_ms > options_.drain_deadline.count();
}

Result<proto::CkptDrainedReply> CkptTable::Drained(const proto::CkptDrained& req) {
  if (req.node.empty() || req.node.find('/') != std::string::npos || !proto::IsSafeCkptPath(req.node)) {
    return Status::InvalidArgument("bad node name '" + req.node + "' in a checkpoint drain report");
  }
  MutexLock lock(&mu_);
  const CkptNode* n = FindLocked(req.id);
  if (n != nullptr && n->is_dir) return Status::IsDirectory("checkpoint id " + std::to_string(req.id) + " is a directory");
  if (auto l = leases_.find(req.id); l != leases_.end() && l->second.gen == req.gen) leases_.erase(l);
  const bool current = n != nullptr && !n->orphan && n->gen == req.gen;
  if (!req.ok) {
    // Logged by DrainHealth when it starts or changes (a full origin fails
    // every round); each attempt at debug level.
    options_.logger->debug("checkpoint drain of {}-{} by {} failed (handed out again): {}", req.id, req.gen, req.node,
                           req.error);
    if (current) health_.UploadFailed(req.id, req.gen, PathLocked(req.id), req.node, req.error, req.at_origin, NowMs());
    return proto::CkptDrainedReply{.level = n == nullptr ? uint8_t(0) : n->level};
  }
  const std::string tmp = StagingPath(req.id, req.gen, req.node);
  if (!current || n->published_gen == req.gen || n->uploaded_gen == req.gen) {
    // Removed, re-committed since, or uploaded by another node too (a lease
    // that ran out): this upload is not wanted. Unless it is the one held
    // for publishing, delete it. If it is the one whose publish is queued
    // (the same report twice), the unlink comes after the publish in the
    // queue and finds nothing: harmless.
    if (!current || tmp != n->uploaded_tmp) {
      options_.logger->info("checkpoint upload {} by {} is not needed: deleting it", tmp, req.node);
      CkptRecord r;
      QueueOriginOpLocked(&r, OriginOp::kUnlink, "", tmp);
      HOARD_RETURN_IF_ERROR(SaveLocked(r));
    }
    return proto::CkptDrainedReply{.level = n == nullptr ? uint8_t(0) : n->level};
  }
  CkptNode c = *n;
  c.uploaded_gen = req.gen;
  c.uploaded_tmp = tmp;
  CkptRecord r;
  if (!IsMarker(c.name) || MarkerReadyLocked(c)) QueuePublishLocked(&r, c);
  else PutLocked(&r, c);  // held: MarkerReady is checked again as others publish
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  health_.UploadOk(req.id, req.gen, PathLocked(req.id), req.node, NowMs());
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  return proto::CkptDrainedReply{.level = nodes_.at(c.id).level};
}

void CkptTable::QueuePublishLocked(CkptRecord* r, CkptNode n) {
  QueueOriginOpLocked(r, OriginOp::kPublish, n.uploaded_tmp, PathLocked(n.id), n.id, n.uploaded_gen);
  n.published_gen = n.uploaded_gen;
  n.uploaded_gen = 0;
  n.uploaded_tmp.clear();
  n.on_origin = true;
  *PutLocked(r, n) = n;
  MarkAncestorsOnOriginLocked(r, n.parent);
}

bool CkptTable::MarkerReadyLocked(const CkptNode& marker) const {
  bool ready = true;
  ForEachFileLocked(marker.parent, [&](const CkptNode& f) {
    if (f.id == marker.id || IsMarker(f.name) || f.gen == 0 || f.commit_seq > marker.commit_seq) return;
    // Renamed into place on the origin, not only queued: a publish that
    // fails for good must not let the marker follow it.
    if (f.published_gen != f.gen || f.level != uint8_t(CkptLevel::kP)) ready = false;
  });
  return ready;
}

Status CkptTable::PublishReadyMarkersLocked() {
  CkptRecord r;
  for (uint64_t id : held_markers_) {
    const CkptNode& m = nodes_.at(id);
    if (MarkerReadyLocked(m)) QueuePublishLocked(&r, m);
  }
  if (r.ops_add.empty()) return Status::Ok();
  return SaveLocked(r);
}

// ---- the origin queue -----------------------------------------------------

std::optional<OriginOp> CkptTable::NextOriginOp() const {
  MutexLock lock(&mu_);
  if (ops_.empty()) return std::nullopt;
  return ops_.begin()->second;
}

void CkptTable::SetOriginOpListener(std::function<void()> listener) {
  MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

Status CkptTable::OriginOpDone(uint64_t seq, OpOutcome outcome) {
  MutexLock lock(&mu_);
  auto it = ops_.find(seq);
  if (it == ops_.end()) return Status::Ok();  // done already (a retry after a failed save)
  const OriginOp op = it->second;
  CkptRecord r{.ops_done = {seq}};
  const CkptNode* n = op.kind == OriginOp::kPublish ? FindLocked(op.id) : nullptr;
  if (n != nullptr && n->published_gen == op.gen) {
    CkptNode c = *n;
    if (outcome == OpOutcome::kDone && c.gen == op.gen) {
      c.level = uint8_t(CkptLevel::kP);
      c.drained_unix_ms = NowMs();
      urgent_.erase(c.id);
    } else if (outcome == OpOutcome::kUploadLost) {
      c.published_gen = 0;  // back among the undrained: uploaded again
    }
    r.put.push_back(c);
  }
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  // The origin answered (a lost upload is a missing file, not a failed call).
  if (outcome != OpOutcome::kFailed) health_.PublisherOk(NowMs());
  if (outcome == OpOutcome::kUploadLost && n != nullptr) {
    health_.UploadLost(op.id, op.gen, PathLocked(op.id), op.from, StagingNode(op.from), NowMs());
  }
  if (n == nullptr || outcome != OpOutcome::kDone) return Status::Ok();
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  return ApplyRetentionLocked(JobOfLocked(op.id));
}

void CkptTable::OriginOpFailed(const OriginOp& op, const Status& s, bool for_good) {
  MutexLock lock(&mu_);
  const bool publish = op.kind == OriginOp::kPublish && FindLocked(op.id) != nullptr;
  health_.PublisherFailed(publish ? op.id : 0, op.gen, publish ? PathLocked(op.id) : op.path, s, for_good, NowMs());
}

std::string CkptTable::StagingNode(const std::string& tmp) {
  // ".hoard-staging/<id>-<gen>-<node>": the node is after the second '-'.
  const size_t first = tmp.find('-', tmp.rfind('/') + 1);
  const size_t second = first == std::string::npos ? first : tmp.find('-', first + 1);
  return second == std::string::npos ? std::string() : tmp.substr(second + 1);
}

// ---- retention ------------------------------------------------------------

Status CkptTable::ApplyRetentionLocked(uint64_t job) {
  const CkptNode* j = FindLocked(job);
  auto kids = children_.find(job);
  if (j == nullptr || !j->is_dir || kids == children_.end()) return Status::Ok();
  // (newest commit inside, id) of each checkpoint, newest first.
  std::vector<std::pair<uint64_t, uint64_t>> checkpoints;
  for (const auto& [name, id] : kids->second) {
    const CkptNode& c = nodes_.at(id);
    if (!c.is_dir && IsMarker(c.name)) continue;  // markers in the job dir keep their copies
    uint64_t newest = 0;
    ForEachFileLocked(id, [&](const CkptNode& f) { newest = std::max(newest, f.commit_seq); });
    checkpoints.push_back({newest, id});
  }
  std::sort(checkpoints.rbegin(), checkpoints.rend());
  CkptRecord r;
  for (size_t i = options_.keep_last; i < checkpoints.size(); ++i) {
    ForEachFileLocked(checkpoints[i].second, [&](const CkptNode& f) {
      // Never before P, nor a file opened for writing lately (its next
      // commit's chunks are on their way to holders that would evict them).
      const bool writing = f.reopened_unix_ms != 0 && NowMs() - f.reopened_unix_ms < options_.reopen_hold.count();
      if (f.released || writing || f.gen == 0 || f.level != uint8_t(CkptLevel::kP)) return;
      CkptNode c = f;
      c.released = true;
      c.writer.clear();
      for (auto& holders : c.replicas) holders.clear();
      r.put.push_back(std::move(c));
    });
  }
  if (r.put.empty()) return Status::Ok();
  options_.logger->info("checkpoint job {}: releasing the local copies of {} files (older than the newest {})", j->name,
                        r.put.size(), options_.keep_last);
  return SaveLocked(r);
}

// ---- status ---------------------------------------------------------------

proto::CkptJobStatus CkptTable::JobStatusLocked(const CkptNode& job) const {
  proto::CkptJobStatus s{.job = job.name};
  const int64_t now = NowMs();
  ForEachFileLocked(job.id, [&](const CkptNode& f) {
    mu_.AssertHeld();
    ++s.files;
    s.bytes += f.size;
    ++s.files_by_level[std::min<size_t>(static_cast<size_t>(ShownLevelLocked(f)), 3)];
    if (f.gen == 0 || f.level == uint8_t(CkptLevel::kP)) return;
    s.undrained_bytes += f.size;
    if (s.oldest_undrained_unix_ms == 0 || f.committed_unix_ms < s.oldest_undrained_unix_ms) {
      s.oldest_undrained_unix_ms = f.committed_unix_ms;
    }
    if (now - f.committed_unix_ms > options_.drain_deadline.count()) ++s.overdue_files;
    if (const proto::CkptDrainError* e = health_.FileError(f.id); e != nullptr) {
      ++s.failing_files;
      if (s.drain_error.since_unix_ms == 0 || e->since_unix_ms < s.drain_error.since_unix_ms) {
        s.drain_error = *e;
        s.drain_error.path = PathLocked(f.id);
      }
    }
  });
  return s;
}

proto::CkptOriginHealth CkptTable::OriginHealth() const {
  MutexLock lock(&mu_);
  return health_.Origin(NowMs());
}

CkptTable::DrainStats CkptTable::drain_stats() const {
  MutexLock lock(&mu_);
  const proto::CkptOriginHealth h = health_.Origin(NowMs());
  return {.failing_files = health_.failing_files(),
          .looping_files = health_.looping_files(),
          .lost_uploads = health_.lost_uploads_total(),
          .failures = health_.failures_total(),
          .origin_failing = h.failing,
          .origin_failing_s = h.failing ? std::max(0.0, double(NowMs() - h.since_unix_ms) / 1000) : 0.0};
}

std::vector<proto::CkptJobStatus> CkptTable::JobSummaries() const {
  MutexLock lock(&mu_);
  std::vector<proto::CkptJobStatus> jobs;
  if (auto it = children_.find(0); it != children_.end()) {
    for (const auto& [name, id] : it->second) {
      if (nodes_.at(id).is_dir) jobs.push_back(JobStatusLocked(nodes_.at(id)));
    }
  }
  return jobs;
}

Result<proto::CkptStatusReply> CkptTable::GetStatus(const proto::CkptStatus& req) const {
  proto::CkptStatusReply reply{.now_unix_ms = NowMs()};
  if (req.job.empty()) {
    reply.jobs = JobSummaries();
  }
  MutexLock lock(&mu_);
  std::vector<uint64_t> roots;
  if (!req.job.empty()) {
    if (req.job.find('/') != std::string::npos) return Status::InvalidArgument("bad checkpoint job " + req.job);
    HOARD_ASSIGN_OR_RETURN(const CkptNode* job, ResolveLocked(req.job));
    if (!job->is_dir) return Status::NotDirectory("checkpoint job " + req.job + " is a file");
    reply.jobs.push_back(JobStatusLocked(*job));
    roots.push_back(job->id);
  } else {
    roots.push_back(0);
  }
  if (req.files) {
    for (uint64_t root : roots) {
      ForEachFileLocked(root, [&](const CkptNode& f) {
        mu_.AssertHeld();
        reply.files.push_back(ShownLocked(f));
      });
    }
  }
  // The failing files are few; the namespace may be large.
  for (const auto& [id, e] : health_.file_errors()) {
    const CkptNode* f = FindLocked(id);
    if (f == nullptr || f->orphan || !InSubtreeLocked(id, roots.front())) continue;
    reply.drain_errors.push_back(e);
    reply.drain_errors.back().path = PathLocked(id);
  }
  std::sort(reply.drain_errors.begin(), reply.drain_errors.end(),
            [](const proto::CkptDrainError& a, const proto::CkptDrainError& b) { return a.path < b.path; });
  reply.origin = health_.Origin(reply.now_unix_ms);
  return reply;
}

Result<proto::CkptJobStatus> CkptTable::Flush(const std::string& job) {
  MutexLock lock(&mu_);
  if (job.empty() || job.find('/') != std::string::npos) return Status::InvalidArgument("bad checkpoint job '" + job + "'");
  HOARD_ASSIGN_OR_RETURN(const CkptNode* j, ResolveLocked(job));
  if (!j->is_dir) return Status::NotDirectory("checkpoint job " + job + " is a file");
  ForEachFileLocked(j->id, [&](const CkptNode& f) {
    mu_.AssertHeld();
    if (f.gen != 0 && f.level != uint8_t(CkptLevel::kP)) urgent_.insert(f.id);
  });
  return JobStatusLocked(*j);
}

}  // namespace hoard
