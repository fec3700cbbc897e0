#include "checkpoint/ckpt_holders.h"

#include <algorithm>
#include <functional>

namespace hoard {

using proto::CkptLevel;

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

// Up nodes in the order the commit would have asked them (CkptHolderScore),
// so a repeated call picks the same node.
std::vector<std::string> Candidates(uint64_t id, uint32_t index, const std::set<std::string>& up) {
  std::vector<std::pair<uint64_t, std::string>> scored;
  for (const std::string& n : up) scored.emplace_back(proto::CkptHolderScore(id, index, n), n);
  std::sort(scored.begin(), scored.end(), std::greater<>());
  std::vector<std::string> out;
  for (auto& [score, n] : scored) out.push_back(std::move(n));
  return out;
}

bool IsNodeName(const std::string& node) {
  return !node.empty() && node.find('/') == std::string::npos && proto::IsSafeCkptPath(node);
}

}  // namespace

// ---- shown level ----------------------------------------------------------

CkptLevel CkptHolders::ShownLevel(const CkptNode& n) const {
  if (!up_.has_value()) return static_cast<CkptLevel>(n.level);
  return proto::CkptShownLevel(n, [&](uint32_t index, const std::string& holder) {
    if (!up_->contains(holder)) return false;
    auto it = unconfirmed_.find(holder);
    return it == unconfirmed_.end() || !it->second.contains({n.id, n.gen, index});
  });
}

// ---- a commit -------------------------------------------------------------

Status CkptHolders::CheckReuse(const CkptNode& n, const proto::CkptCommit& req) {
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

std::vector<CkptUnconfirmed> CkptHolders::CarryUnconfirmed(const CkptNode& old, const CkptNode& c) {
  // A reused chunk keeps its holders as they were: one that re-replication
  // gave and that has not confirmed its copy yet still does not count.
  std::vector<CkptUnconfirmed> out;
  for (const CkptUnconfirmed& u : old.unconfirmed) {
    if (u.gen != old.gen || u.index >= c.checksums.size() || proto::CkptChunkGen(c, u.index) == c.gen) continue;
    const auto& holders = c.replicas[u.index];
    if (std::find(holders.begin(), holders.end(), u.node) != holders.end()) {
      out.push_back({.gen = c.gen, .index = u.index, .node = u.node});
    }
  }
  return out;
}

void CkptHolders::KeepOldGen(CkptNode* c, const CkptNode& old, int64_t now_ms) {
  if (old.gen == 0 || old.released) return;  // nothing committed, or only on the origin
  CkptOldGen g = OldGenOf(old);
  g.retired_unix_ms = now_ms;
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

void CkptHolders::QueueDiscards(CkptRecord* r, const CkptNode& c,
                                const std::vector<proto::CkptReplicaRef>& discard) const {
  // A send of the same bytes the commit did count is the same file: kept.
  std::set<std::tuple<std::string, uint32_t, uint64_t>> queued;
  for (const proto::CkptReplicaRef& d : discard) {
    if (d.id != c.id || d.gen != c.gen || !IsNodeName(d.node)) continue;
    const bool counted = d.index < c.checksums.size() && proto::CkptChunkGen(c, d.index) == c.gen &&
                         c.checksums[d.index] == d.checksum &&
                         std::find(c.replicas[d.index].begin(), c.replicas[d.index].end(), d.node) !=
                             c.replicas[d.index].end();
    if (counted || !queued.insert({d.node, d.index, d.checksum}).second) continue;
    const uint64_t seq = r->drops_add.empty() ? next_drop_seq_ : r->drops_add.back().seq + 1;
    r->drops_add.push_back(CkptDrop{.seq = seq, .node = d.node, .id = c.id, .gen = c.gen, .index = d.index,
                                    .checksum = d.checksum});
  }
}

void CkptHolders::Orphan(CkptRecord* r, CkptNode gone, int64_t now_ms) {
  if (gone.gen == 0 || gone.released) {
    // Never committed (or only on the origin): nothing of it to keep, but
    // what old generations it still has.
    if (gone.old_gens.empty()) {
      r->del.push_back(gone.id);
      return;
    }
  } else {
    CkptOldGen g = OldGenOf(gone);
    g.retired_unix_ms = now_ms;
    gone.old_gens.push_back(std::move(g));
  }
  gone.orphan = true;
  gone.parent = 0;
  gone.name.clear();
  gone.unconfirmed.clear();
  gone.on_origin = false;  // the origin's copy goes with the queued unlink
  *StagePut(r, gone) = gone;
}

// ---- old generations ------------------------------------------------------

size_t CkptHolders::Retire(const CkptNamespace& ns, int64_t now_ms, std::chrono::milliseconds grace,
                           CkptRecord* r) const {
  size_t retired = 0;
  for (uint64_t id : with_old_gens_) {
    const CkptNode& n = *ns.Find(id);
    CkptNode c = n;
    c.old_gens.clear();
    std::vector<CkptOldGen> gone;
    for (const CkptOldGen& g : n.old_gens) {
      const bool young = now_ms - g.retired_unix_ms < grace.count();
      if (young || held(id, g.gen)) c.old_gens.push_back(g);
      else gone.push_back(g);
    }
    if (gone.empty()) continue;
    for (const CkptOldGen& g : gone) QueueDrops(r, c, g);
    retired += gone.size();
    if (c.orphan && c.old_gens.empty()) r->del.push_back(id);
    else r->put.push_back(std::move(c));
  }
  return retired;
}

void CkptHolders::QueueDrops(CkptRecord* r, const CkptNode& n, const CkptOldGen& retired) const {
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

bool CkptHolders::RefLive(const CkptNamespace& ns, uint64_t id, const std::string& node, uint64_t gen,
                          uint32_t index, uint64_t checksum) {
  const CkptNode* n = ns.Find(id);
  if (n == nullptr) return false;
  std::set<Ref> live;
  if (!n->orphan && n->gen > 0) AddRefs(*n, n->gen, &live);
  for (const CkptOldGen& g : n->old_gens) AddRefs(g, g.gen, &live);
  return live.contains(Ref{node, gen, index, checksum});
}

size_t CkptHolders::old_generations(const CkptNamespace& ns) const {
  size_t n = 0;
  for (uint64_t id : with_old_gens_) n += ns.Find(id)->old_gens.size();
  return n;
}

// ---- retention ------------------------------------------------------------

void CkptHolders::Release(const CkptNamespace& ns, uint64_t job, uint32_t keep_last,
                          const std::function<bool(const std::string&)>& is_marker, int64_t now_ms,
                          std::chrono::milliseconds reopen_hold, CkptRecord* r) {
  const CkptNode* j = ns.Find(job);
  const std::map<std::string, uint64_t>* kids = ns.Children(job);
  if (j == nullptr || !j->is_dir || kids == nullptr) return;
  // (newest commit inside, id) of each checkpoint, newest first.
  std::vector<std::pair<uint64_t, uint64_t>> checkpoints;
  for (const auto& [name, id] : *kids) {
    const CkptNode& c = *ns.Find(id);
    if (!c.is_dir && is_marker(c.name)) continue;  // markers in the job dir keep their copies
    uint64_t newest = 0;
    ns.ForEachFile(id, [&](const CkptNode& f) { newest = std::max(newest, f.commit_seq); });
    checkpoints.push_back({newest, id});
  }
  if (checkpoints.size() <= keep_last) return;
  // The newest keep_last first, the rest in any order: a partition, not a
  // sort, as this runs at every commit and a job may hold 10,000 files (a
  // sort made such a save quadratic in time: bench/ha_bench.cc).
  std::nth_element(checkpoints.begin(), checkpoints.begin() + keep_last, checkpoints.end(), std::greater<>());
  for (size_t i = keep_last; i < checkpoints.size(); ++i) {
    ns.ForEachFile(checkpoints[i].second, [&](const CkptNode& f) {
      // Never before P, nor a file opened for writing lately (its next
      // commit's chunks are on their way to holders that would evict them).
      const bool writing = f.reopened_unix_ms != 0 && now_ms - f.reopened_unix_ms < reopen_hold.count();
      if (f.released || writing || f.gen == 0 || f.level != uint8_t(CkptLevel::kP)) return;
      CkptNode c = f;
      c.released = true;
      c.writer.clear();
      for (auto& holders : c.replicas) holders.clear();
      r->put.push_back(std::move(c));
    });
  }
}

// ---- lost holders ---------------------------------------------------------

CkptHolders::Given CkptHolders::Rereplicate(const CkptNamespace& ns,
                                            const std::set<std::pair<uint64_t, uint64_t>>& undrained,
                                            const std::set<std::string>& up, const std::set<std::string>& lost,
                                            const std::set<std::string>& leaving, CkptRecord* r) {
  Given out;
  for (const auto& [seq, id] : undrained) {
    const CkptNode& n = *ns.Find(id);
    if (n.gen == 0 || n.chunk_size == 0 || n.replicas_wanted < 2) continue;
    CkptNode* changed = nullptr;
    for (uint32_t i = 0; i < n.checksums.size(); ++i) {
      std::vector<std::string> holders = proto::CkptChunkHolders(n, i);
      // A node down for less than the loss timeout still counts: it may come
      // back with its disk, and a reboot must not copy every checkpoint.
      size_t alive = 0;
      bool source = false;
      for (const std::string& h : holders) {
        alive += lost.contains(h) ? 0 : 1;
        source = source || up.contains(h);
      }
      if (alive >= n.replicas_wanted || alive == holders.size() || !source) continue;
      for (const std::string& c : Candidates(id, i, up)) {
        if (alive >= n.replicas_wanted) break;
        if (leaving.contains(c) || std::find(holders.begin(), holders.end(), c) != holders.end()) continue;
        if (changed == nullptr) changed = StagePut(r, n);
        changed->replicas.resize(std::max<size_t>(changed->replicas.size(), n.checksums.size()));
        changed->replicas[i].push_back(c);
        changed->unconfirmed.push_back({.gen = n.gen, .index = i, .node = c});  // counts for R once c has it
        holders.push_back(c);
        out.nodes.insert(c);
        ++alive;
        ++out.chunks;
      }
    }
    if (changed != nullptr) ++out.files;
  }
  return out;
}

// ---- a node's Work --------------------------------------------------------

const std::set<CkptHolders::ChunkOf>* CkptHolders::Listed(const std::string& node, uint64_t rebuilt) const {
  auto l = listed_.find(node);
  if (l == listed_.end() || rebuilt == 0 || rebuilt != l->second.first) return nullptr;
  return &l->second.second;
}

void CkptHolders::StageConfirm(const CkptNamespace& ns, const std::string& node, const std::set<ChunkOf>& chunks,
                               CkptRecord* r) {
  for (const ChunkOf& c : chunks) {
    // Plain copies, not structured bindings: clang 14 (Debian 12's, which
    // builds the fuzz targets) cannot capture those in a lambda.
    const uint64_t id = std::get<0>(c), gen = std::get<1>(c);
    const uint32_t index = std::get<2>(c);
    const CkptNode* n = ns.Find(id);
    auto is_it = [&](const CkptUnconfirmed& u) { return u.node == node && u.gen == gen && u.index == index; };
    if (n == nullptr || std::none_of(n->unconfirmed.begin(), n->unconfirmed.end(), is_it)) {
      continue;  // removed, or committed again since
    }
    std::erase_if(StagePut(r, *n)->unconfirmed, is_it);
  }
}

std::vector<uint64_t> CkptHolders::DropsDone(const std::string& node, uint64_t dropped) const {
  std::vector<uint64_t> done;
  auto mine = drops_by_node_.find(node);
  if (dropped == 0 || mine == drops_by_node_.end()) return done;
  for (uint64_t seq : mine->second) {
    if (seq > dropped) break;
    done.push_back(seq);
  }
  return done;
}

void CkptHolders::FillWork(const CkptNamespace& ns, const std::string& node, bool rebuild, size_t rebuild_page,
                           size_t drop_page, proto::CkptWorkReply* reply) {
  // Every copy not released is wanted, not only those naming this node: a
  // replica stored for a commit that has not arrived yet names nobody.
  for (const auto& [id, n] : ns.entries()) {
    if (!n.is_dir && (!n.released || !n.old_gens.empty())) reply->keep_files.push_back(id);
  }
  reply->keep_from_id = ns.next_id();
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
  const auto& entries = ns.entries();
  for (auto it = entries.lower_bound(from_id); rebuild && !more && it != entries.end(); ++it) {
    const auto& [id, n] = *it;
    if (n.is_dir || n.orphan || n.released || n.gen == 0 || n.chunk_size == 0) continue;
    for (uint32_t i = id == from_id ? from_index : 0; i < n.checksums.size(); ++i) {
      if (reply->rebuild.size() == rebuild_page) {
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
      reply->rebuild.push_back(std::move(ref));
      if (unconfirmed != unconfirmed_.end() && unconfirmed->second.contains(ChunkOf{id, n.gen, i})) {
        page_unconfirmed.insert(ChunkOf{id, n.gen, i});
      }
    }
  }
  if (rebuild) {
    if (!more) rebuild_cursor_.erase(node);
    reply->rebuild_seq = next_rebuild_seq_++;
    // Holding this page confirms the new copies on it (and only those).
    listed_[node] = {reply->rebuild_seq, std::move(page_unconfirmed)};
  }
  if (auto mine = drops_by_node_.find(node); mine != drops_by_node_.end()) {
    for (uint64_t seq : mine->second) {
      if (reply->drop.size() + reply->drop_files.size() >= drop_page) break;
      const CkptDrop& d = drops_.at(seq);
      if (d.whole) {
        // Not while this node's copy holds a generation someone may read.
        const CkptNode* n = ns.Find(d.id);
        const bool live = n != nullptr && ((!n->orphan && n->writer == node && n->gen > d.gen) ||
                                           std::any_of(n->old_gens.begin(), n->old_gens.end(), [&](const CkptOldGen& g) {
                                             return g.writer == node && g.gen > d.gen;
                                           }));
        if (!live) reply->drop_files.push_back({.id = d.id, .gen = d.gen});
      } else if (!RefLive(ns, d.id, node, d.gen, d.index, d.checksum)) {
        // Live again (re-replication named this node a holder of it since):
        // skipped, and done with.
        reply->drop.push_back({.id = d.id, .gen = d.gen, .index = d.index, .checksum = d.checksum});
      }
      reply->drop_seq = seq;
    }
  }
}

// ---- Apply ----------------------------------------------------------------

void CkptHolders::Index(const CkptNode& n, bool add) {
  if (!n.old_gens.empty()) {
    if (add) with_old_gens_.insert(n.id);
    else with_old_gens_.erase(n.id);
  }
  if (n.orphan || n.is_dir) return;
  for (const CkptUnconfirmed& u : n.unconfirmed) {
    if (u.gen != n.gen) continue;  // an older generation's: moot
    if (add) {
      unconfirmed_[u.node].insert({n.id, u.gen, u.index});
    } else if (auto it = unconfirmed_.find(u.node); it != unconfirmed_.end()) {
      it->second.erase({n.id, u.gen, u.index});
      if (it->second.empty()) unconfirmed_.erase(it);
    }
  }
}

void CkptHolders::ApplyDrops(const CkptRecord& r) {
  next_drop_seq_ = std::max(next_drop_seq_, r.next_drop_seq);
  for (const CkptDrop& d : r.drops_add) {
    drops_[d.seq] = d;
    drops_by_node_[d.node].insert(d.seq);
  }
  for (uint64_t seq : r.drops_done) {
    auto it = drops_.find(seq);
    if (it == drops_.end()) continue;
    auto& mine = drops_by_node_[it->second.node];
    mine.erase(seq);
    if (mine.empty()) drops_by_node_.erase(it->second.node);
    drops_.erase(it);
  }
}

Status CkptHolders::CheckLoaded() {
  for (const auto& [seq, d] : drops_) {
    if (!IsNodeName(d.node)) return Status::Corruption("copy deletion " + std::to_string(seq) + " names a bad node");
    next_drop_seq_ = std::max(next_drop_seq_, seq + 1);
  }
  for (const auto& [node, chunks] : unconfirmed_) rebuild_due_.insert(node);
  return Status::Ok();
}

}  // namespace hoard
