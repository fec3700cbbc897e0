// CkptTable: generations that readers may still read, and the copies that no
// generation uses any more (see "Old generations" in ckpt_table.h).
#include <algorithm>

#include "checkpoint/ckpt_table.h"

namespace hoard {

namespace {

// One replica file: (holder, generation in its name, index, checksum).
using Ref = std::tuple<std::string, uint64_t, uint32_t, uint64_t>;

template <typename Gen>
void AddRefs(const Gen& g, uint64_t gen, std::set<Ref>* refs) {
  for (uint32_t i = 0; i < g.checksums.size() && i < g.replicas.size(); ++i) {
    const uint64_t cg = i < g.chunk_gens.size() ? g.chunk_gens[i] : gen;
    for (const std::string& h : g.replicas[i]) refs->insert({h, cg, i, g.checksums[i]});
  }
}

CkptOldGen OldGenOf(const CkptNode& n) {
  return CkptOldGen{.gen = n.gen,
                    .size = n.size,
                    .chunk_size = n.chunk_size,
                    .checksums = n.checksums,
                    .chunk_gens = n.chunk_gens,
                    .writer = n.writer,
                    .replicas = n.replicas};
}

}  // namespace

int64_t CkptTable::NowNs() const {
  // An injected clock (tests) has millisecond steps; the real one nanoseconds.
  if (wall_injected_) return NowMs() * 1'000'000;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void CkptTable::KeepOldGenLocked(CkptNode* c, const CkptNode& old) const {
  if (old.gen == 0 || old.released) return;  // nothing committed, or only on the origin
  CkptOldGen g = OldGenOf(old);
  g.retired_unix_ms = NowMs();
  // The writer of the new generation wrote it over its whole-file copy.
  if (g.writer == c->writer) g.writer.clear();
  const bool copies = !g.writer.empty() || std::any_of(g.replicas.begin(), g.replicas.end(),
                                                       [](const auto& holders) { return !holders.empty(); });
  if (!copies) return;  // nothing left of it to keep
  // Kept even when the new generation reuses every copy it has: a reader
  // holds generations by number, and its copies must outlive whatever
  // later generation shares them (retiring it deletes only what no kept
  // generation uses).
  c->old_gens.push_back(std::move(g));
}

bool CkptTable::RefLiveLocked(uint64_t id, const std::string& node, uint64_t gen, uint32_t index,
                              uint64_t checksum) const {
  const CkptNode* n = FindLocked(id);
  if (n == nullptr) return false;
  std::set<Ref> live;
  if (!n->orphan && n->gen > 0) AddRefs(*n, n->gen, &live);
  for (const CkptOldGen& g : n->old_gens) AddRefs(g, g.gen, &live);
  return live.contains(Ref{node, gen, index, checksum});
}

void CkptTable::RemoveFileLocked(CkptRecord* r, CkptNode gone) {
  DropUploadLocked(r, &gone);
  if (gone.gen == 0 || gone.released) {
    // Never committed (or only on the origin): nothing of it to keep, but
    // what old generations it still has.
    if (gone.old_gens.empty()) {
      r->del.push_back(gone.id);
      return;
    }
  } else {
    CkptOldGen g = OldGenOf(gone);
    g.retired_unix_ms = NowMs();
    gone.old_gens.push_back(std::move(g));
  }
  gone.orphan = true;
  gone.parent = 0;
  gone.name.clear();
  gone.unconfirmed.clear();
  gone.on_origin = false;  // the origin's copy goes with the queued unlink
  *PutLocked(r, gone) = gone;
}

void CkptTable::QueueDropsLocked(CkptRecord* r, const CkptNode& n, const CkptOldGen& retired) {
  std::set<Ref> live;
  if (!n.orphan && n.gen > 0) AddRefs(n, n.gen, &live);
  bool writer_live = !n.orphan && n.gen > 0 && n.writer == retired.writer;
  for (const CkptOldGen& g : n.old_gens) {
    AddRefs(g, g.gen, &live);
    writer_live = writer_live || g.writer == retired.writer;
  }
  std::set<Ref> gone;
  AddRefs(retired, retired.gen, &gone);
  // What this record already drops (two generations retired at once may
  // share a copy).
  std::set<Ref> queued;
  for (const CkptDrop& d : r->drops_add) {
    if (!d.whole && d.id == n.id) queued.insert(Ref{d.node, d.gen, d.index, d.checksum});
  }
  auto queue = [&](CkptDrop d) {
    mu_.AssertHeld();
    d.seq = r->drops_add.empty() ? next_drop_seq_ : r->drops_add.back().seq + 1;
    r->drops_add.push_back(std::move(d));
  };
  for (const Ref& ref : gone) {
    if (live.contains(ref) || !queued.insert(ref).second) continue;
    queue(CkptDrop{.node = std::get<0>(ref), .id = n.id, .gen = std::get<1>(ref), .index = std::get<2>(ref),
                   .checksum = std::get<3>(ref)});
  }
  // The writer's whole-file copy holds no kept generation: whatever
  // generation it is stamped with, up to the newest this file had (one it
  // wrote again later would be stamped higher, and is spared).
  if (!retired.writer.empty() && !writer_live) {
    queue(CkptDrop{.node = retired.writer, .id = n.id, .gen = std::max(n.gen, retired.gen), .whole = true});
  }
}

Status CkptTable::CheckReuseLocked(const CkptNode& n, const proto::CkptCommit& req) const {
  for (uint32_t i = 0; i < req.chunk_gens.size(); ++i) {
    const uint64_t cg = req.chunk_gens[i];
    if (cg == req.gen) continue;
    const std::vector<std::string>* holders = i < n.replicas.size() ? &n.replicas[i] : nullptr;
    bool ok = cg < req.gen && n.gen > 0 && i < n.checksums.size() && proto::CkptChunkGen(n, i) == cg &&
              n.checksums[i] == req.checksums[i] && holders != nullptr && i < req.replicas.size();
    for (size_t k = 0; ok && k < req.replicas[i].size(); ++k) {
      ok = std::find(holders->begin(), holders->end(), req.replicas[i][k]) != holders->end();
    }
    if (!ok) {
      return Status::Stale("checkpoint file " + std::to_string(req.id) + " chunk " + std::to_string(i) +
                           ": the copies the commit reuses are not the current generation's (committed meanwhile?)");
    }
  }
  return Status::Ok();
}

void CkptTable::SetSessions(std::set<proto::CkptHold> holds, std::set<uint64_t> writing, uint64_t mount,
                            const std::set<uint64_t>& mount_writing) {
  MutexLock lock(&mu_);
  holds_ = std::move(holds);
  writing_ = std::move(writing);
  if (mount == 0) return;
  std::erase_if(writing_commits_,
                [&](const auto& kv) { return kv.second.mount == mount && !mount_writing.contains(kv.first); });
}

Result<size_t> CkptTable::CollectGarbage() {
  MutexLock lock(&mu_);
  // After a restart, mounts need a while to say what they hold.
  if (options_.clock->Now() - opened_at_ < options_.retire_grace) return size_t(0);
  const int64_t now = NowMs();
  CkptRecord r;
  size_t retired = 0;
  for (uint64_t id : with_old_gens_) {
    const CkptNode& n = nodes_.at(id);
    CkptNode c = n;
    c.old_gens.clear();
    std::vector<CkptOldGen> gone;
    for (const CkptOldGen& g : n.old_gens) {
      const bool young = now - g.retired_unix_ms < options_.retire_grace.count();
      if (young || holds_.contains(proto::CkptHold{.id = id, .gen = g.gen})) c.old_gens.push_back(g);
      else gone.push_back(g);
    }
    if (gone.empty()) continue;
    for (const CkptOldGen& g : gone) QueueDropsLocked(&r, c, g);
    retired += gone.size();
    if (c.orphan && c.old_gens.empty()) r.del.push_back(id);
    else r.put.push_back(std::move(c));
  }
  if (retired == 0) return size_t(0);
  HOARD_RETURN_IF_ERROR(SaveLocked(std::move(r)).Annotate("retire old checkpoint generations"));
  return retired;
}

size_t CkptTable::pending_drops() const {
  MutexLock lock(&mu_);
  return drops_.size();
}

size_t CkptTable::old_generations() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (uint64_t id : with_old_gens_) n += nodes_.at(id).old_gens.size();
  return n;
}

}  // namespace hoard
