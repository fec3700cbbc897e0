// CkptTable: the node's and the publisher's calls (Work, Drained, the origin
// queue), retention and status, over the parts (ckpt_drain_queue.h,
// ckpt_origin_queue.h, ckpt_holders.h; see ckpt_table.h for the rules).
#include "checkpoint/ckpt_table.h"

#include <algorithm>

namespace hoard {

using proto::CkptLevel;

// ---- drain ----------------------------------------------------------------

proto::CkptWorkReply CkptTable::Work(const std::string& node, const std::set<std::string>& up_nodes, bool rebuild,
                                     double dataset_fill_bytes_per_s, uint64_t rebuilt, uint64_t dropped) {
  MutexLock lock(&mu_);
  proto::CkptWorkReply reply;
  // The node holds the whole list we sent it last: the copies on it count.
  // (If that cannot be journalled, its next Work echoes the list again.)
  if (const std::set<ChunkOf>* listed = holders_.Listed(node, rebuilt); listed != nullptr) {
    if (ConfirmLocked(node, *listed).ok()) holders_.ForgetListed(node);
  }
  // The node deleted what we listed up to `dropped` (drops are listed in
  // seq order, so everything of its up to there). Not durable yet: it is
  // listed again, and deleting twice is harmless.
  if (std::vector<uint64_t> done = holders_.DropsDone(node, dropped); !done.empty()) {
    if (Status s = SaveLocked(CkptRecord{.drops_done = std::move(done)}); !s.ok()) {
      options_.logger->warn("checkpoint copies deleted by {} not recorded yet: {}", node, s.ToString());
    }
  }
  for (const CkptNode* n : drain_.Take(ns_, node, up_nodes, options_.clock->Now())) {
    reply.drain.push_back({.entry = ns_.ToEntry(*n), .tmp_path = StagingPath(n->id, n->gen, node)});
  }
  holders_.FillWork(ns_, node, rebuild, options_.rebuild_page, options_.drop_page, &reply);
  if (const uint64_t budget = drain_.Budget(ns_, dataset_fill_bytes_per_s, NowMs()); budget != 0) {
    // At least 1: 0 would mean unlimited to the node.
    reply.max_drain_bytes_per_s = std::max<uint64_t>(1, budget / std::max<size_t>(1, up_nodes.size()));
  }
  return reply;
}

Status CkptTable::ConfirmLocked(const std::string& node, const std::set<ChunkOf>& chunks) {
  CkptRecord r;
  CkptHolders::StageConfirm(ns_, node, chunks, &r);
  if (r.put.empty()) return Status::Ok();
  Status s = SaveLocked(std::move(r));
  if (!s.ok()) options_.logger->warn("checkpoint copies confirmed by {} not recorded yet: {}", node, s.ToString());
  return s;
}

uint64_t CkptTable::DrainBudget(double dataset_fill_bytes_per_s) const {
  MutexLock lock(&mu_);
  return drain_.Budget(ns_, dataset_fill_bytes_per_s, NowMs());
}

Result<proto::CkptDrainedReply> CkptTable::Drained(const proto::CkptDrained& req) {
  if (req.node.empty() || req.node.find('/') != std::string::npos || !proto::IsSafeCkptPath(req.node)) {
    return Status::InvalidArgument("bad node name '" + req.node + "' in a checkpoint drain report");
  }
  MutexLock lock(&mu_);
  const CkptNode* n = ns_.Find(req.id);
  if (n != nullptr && n->is_dir) return Status::IsDirectory("checkpoint id " + std::to_string(req.id) + " is a directory");
  drain_.EndLease(req.id, req.gen);
  const bool current = n != nullptr && !n->orphan && n->gen == req.gen;
  if (!req.ok) {
    // Logged by DrainHealth when it starts or changes (a full origin fails
    // every round); each attempt at debug level.
    options_.logger->debug("checkpoint drain of {}-{} by {} failed (handed out again): {}", req.id, req.gen, req.node,
                           req.error);
    if (current) health_.UploadFailed(req.id, req.gen, ns_.Path(req.id), req.node, req.error, req.at_origin, NowMs());
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
      origin_.Queue(&r, OriginOp::kUnlink, "", tmp);
      HOARD_RETURN_IF_ERROR(SaveLocked(r));
    }
    return proto::CkptDrainedReply{.level = n == nullptr ? uint8_t(0) : n->level};
  }
  CkptNode c = *n;
  c.uploaded_gen = req.gen;
  c.uploaded_tmp = tmp;
  CkptRecord r;
  if (!origin_.IsMarker(c.name) || origin_.MarkerReady(ns_, c)) origin_.QueuePublish(ns_, &r, c);
  else StagePut(&r, c);  // held: MarkerReady is checked again as others publish
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  health_.UploadOk(req.id, req.gen, ns_.Path(req.id), req.node, NowMs());
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  return proto::CkptDrainedReply{.level = ns_.Find(c.id)->level};
}

Status CkptTable::PublishReadyMarkersLocked() {
  CkptRecord r;
  origin_.QueueReadyMarkers(ns_, &r);
  if (r.ops_add.empty()) return Status::Ok();
  return SaveLocked(r);
}

// ---- the origin queue -----------------------------------------------------

std::optional<OriginOp> CkptTable::NextOriginOp() const {
  MutexLock lock(&mu_);
  return origin_.Next();
}

void CkptTable::SetOriginOpListener(std::function<void()> listener) {
  MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

Status CkptTable::OriginOpDone(uint64_t seq, OpOutcome outcome) {
  MutexLock lock(&mu_);
  const OriginOp* queued = origin_.Find(seq);
  if (queued == nullptr) return Status::Ok();  // done already (a retry after a failed save)
  const OriginOp op = *queued;
  CkptRecord r{.ops_done = {seq}};
  const CkptNode* n = op.kind == OriginOp::kPublish ? ns_.Find(op.id) : nullptr;
  if (n != nullptr && n->published_gen == op.gen) {
    CkptNode c = *n;
    if (outcome == OpOutcome::kDone && c.gen == op.gen) {
      c.level = uint8_t(CkptLevel::kP);
      c.drained_unix_ms = NowMs();
      drain_.Published(c.id);
    } else if (outcome == OpOutcome::kUploadLost) {
      c.published_gen = 0;  // back among the undrained: uploaded again
    }
    r.put.push_back(c);
  }
  HOARD_RETURN_IF_ERROR(SaveLocked(r));
  // The origin answered (a lost upload is a missing file, not a failed call).
  if (outcome != OpOutcome::kFailed) health_.PublisherOk(NowMs());
  if (outcome == OpOutcome::kUploadLost && n != nullptr) {
    health_.UploadLost(op.id, op.gen, ns_.Path(op.id), op.from, StagingNode(op.from), NowMs());
  }
  if (n == nullptr || outcome != OpOutcome::kDone) return Status::Ok();
  HOARD_RETURN_IF_ERROR(PublishReadyMarkersLocked());
  // Only this file became P: it can be released only if its checkpoint is
  // not among the newest, which the one of the job's last commit is (see
  // Commit): no scan for the files of a checkpoint being drained as written.
  const uint64_t job = ns_.JobOf(op.id), checkpoint = ns_.CheckpointOf(op.id);
  if (auto last = last_committed_checkpoint_.find(job);
      checkpoint != 0 && last != last_committed_checkpoint_.end() && last->second == checkpoint) {
    return Status::Ok();
  }
  return ApplyRetentionLocked(job);
}

void CkptTable::OriginOpFailed(const OriginOp& op, const Status& s, bool for_good) {
  MutexLock lock(&mu_);
  const bool publish = op.kind == OriginOp::kPublish && ns_.Find(op.id) != nullptr;
  health_.PublisherFailed(publish ? op.id : 0, op.gen, publish ? ns_.Path(op.id) : op.path, s, for_good, NowMs());
}

// ---- retention ------------------------------------------------------------

Status CkptTable::ApplyRetentionLocked(uint64_t job) {
  CkptRecord r;
  CkptHolders::Release(ns_, job, options_.keep_last, [&](const std::string& name) {
    mu_.AssertHeld();
    return origin_.IsMarker(name);
  }, NowMs(), options_.reopen_hold, &r);
  if (r.put.empty()) return Status::Ok();
  options_.logger->info("checkpoint job {}: releasing the local copies of {} files (older than the newest {})",
                        ns_.Find(job)->name, r.put.size(), options_.keep_last);
  return SaveLocked(r);
}

// ---- status ---------------------------------------------------------------

proto::CkptJobStatus CkptTable::JobStatusLocked(const CkptNode& job) const {
  proto::CkptJobStatus s{.job = job.name};
  const int64_t now = NowMs();
  ns_.ForEachFile(job.id, [&](const CkptNode& f) {
    mu_.AssertHeld();
    ++s.files;
    s.bytes += f.size;
    ++s.files_by_level[std::min<size_t>(static_cast<size_t>(holders_.ShownLevel(f)), 3)];
    if (f.gen == 0 || f.level == uint8_t(CkptLevel::kP)) return;
    s.undrained_bytes += f.size;
    ++s.undrained_files;
    if (s.oldest_undrained_unix_ms == 0 || f.committed_unix_ms < s.oldest_undrained_unix_ms) {
      s.oldest_undrained_unix_ms = f.committed_unix_ms;
    }
    if (now - f.committed_unix_ms > options_.drain_deadline.count()) ++s.overdue_files;
    if (const proto::CkptDrainError* e = health_.FileError(f.id); e != nullptr) {
      ++s.failing_files;
      if (s.drain_error.since_unix_ms == 0 || e->since_unix_ms < s.drain_error.since_unix_ms) {
        s.drain_error = *e;
        s.drain_error.path = ns_.Path(f.id);
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
  if (const auto* top = ns_.Children(0); top != nullptr) {
    for (const auto& [name, id] : *top) {
      if (const CkptNode& job = *ns_.Find(id); job.is_dir) jobs.push_back(JobStatusLocked(job));
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
    HOARD_ASSIGN_OR_RETURN(const CkptNode* job, ns_.Resolve(req.job));
    if (!job->is_dir) return Status::NotDirectory("checkpoint job " + req.job + " is a file");
    reply.jobs.push_back(JobStatusLocked(*job));
    roots.push_back(job->id);
  } else {
    roots.push_back(0);
  }
  if (req.files) {
    for (uint64_t root : roots) {
      ns_.ForEachFile(root, [&](const CkptNode& f) {
        mu_.AssertHeld();
        reply.files.push_back(ShownLocked(f));
      });
    }
  }
  // The failing files are few; the namespace may be large.
  for (const auto& [id, e] : health_.file_errors()) {
    const CkptNode* f = ns_.Find(id);
    if (f == nullptr || f->orphan || !ns_.InSubtree(id, roots.front())) continue;
    reply.drain_errors.push_back(e);
    reply.drain_errors.back().path = ns_.Path(id);
  }
  std::sort(reply.drain_errors.begin(), reply.drain_errors.end(),
            [](const proto::CkptDrainError& a, const proto::CkptDrainError& b) { return a.path < b.path; });
  reply.origin = health_.Origin(reply.now_unix_ms);
  return reply;
}

Result<proto::CkptJobStatus> CkptTable::Flush(const std::string& job) {
  MutexLock lock(&mu_);
  if (job.empty() || job.find('/') != std::string::npos) return Status::InvalidArgument("bad checkpoint job '" + job + "'");
  HOARD_ASSIGN_OR_RETURN(const CkptNode* j, ns_.Resolve(job));
  if (!j->is_dir) return Status::NotDirectory("checkpoint job " + job + " is a file");
  ns_.ForEachFile(j->id, [&](const CkptNode& f) {
    mu_.AssertHeld();
    if (f.gen != 0 && f.level != uint8_t(CkptLevel::kP)) drain_.Flush(f.id);
  });
  return JobStatusLocked(*j);
}

}  // namespace hoard
