// File: checkpoint/ckpt_sent_chunks.h
//
// SentChunks remembers, for one checkpoint file open for writing, which of
// its chunks were already checksummed and sent to their replica holders while
// the writer went on (write-behind, checkpoint/ckpt_write_behind.h), so that the
// commit at fsync/close sends only the rest.
//
// Why it is safe: every write or truncate that touches a chunk bumps that
// chunk's version, and a chunk sent at version v for generation g counts at
// the commit of g only if its version is still v. The sender reads the page
// cache without LocalFile::mu, so a write may land while it reads: that write
// bumped the version, and Finish discards the send. A record therefore always
// describes exactly the bytes the file holds at the commit.
//
// While a commit runs no new send starts, and BeginCommit waits for the sends
// in flight, so the commit never sends a chunk twice at once.
//
// Two more things the commit needs, kept here because they follow the same
// versions: which chunks no write touched since the bytes were last the
// committed generation's (Untouched: the commit reuses that generation's
// copies of them), and the sends that no longer count (a chunk written again
// after it was sent: Discarded), whose holders the commit has delete them.
//
// Thread-safety: all methods are thread-safe (one internal mutex). Touch,
// Truncate, BeginCommit and EndCommit are called with LocalFile::mu held
// (which orders them with writes); Claim and Finish never need it, so a
// commit holding LocalFile::mu can wait for senders without a deadlock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hoard::fuse {

class SentChunks {
 public:
  struct Sent {
    uint64_t checksum = 0;
    uint64_t length = 0;
    uint64_t chunk_size = 0;  // the cluster map's when sent: a commit with another one cannot use it
    std::vector<std::string> holders;  // the nodes that stored it (not counting this one)
    // 0: stored for the generation being committed. Else the same bytes were
    // already held for that (committed) generation: no send was made.
    uint64_t reused_gen = 0;
  };
  // A send that stored bytes the commit will not count.
  struct Discard {
    uint64_t gen = 0;
    uint32_t index = 0;
    uint64_t checksum = 0;
    std::vector<std::string> holders;
  };
  // A send in progress: what it was claimed at.
  struct Ticket {
    uint32_t index = 0;
    uint64_t version = 0;
    uint64_t gen = 0;
  };

  // `next_gen`: the generation the next commit will create.
  explicit SentChunks(uint64_t next_gen = 1) : next_gen_(next_gen) {}

  // Bytes [off, off + len) changed; chunk size `cs`.
  void Touch(uint64_t cs, uint64_t off, uint64_t len) {
    if (len == 0 || cs == 0) return;
    MutexLock lock(&mu_);
    for (uint64_t c = off / cs; c <= (off + len - 1) / cs; ++c) BumpLocked(c);
  }
  // Every byte from `off` on may have changed (a truncate, either way).
  void Truncate(uint64_t cs, uint64_t off) {
    if (cs == 0) return;
    MutexLock lock(&mu_);
    // Chunks past the old end have no version yet: count them as changed too.
    for (uint64_t c = off / cs; c < std::max<uint64_t>(versions_.size(), off / cs + 1); ++c) BumpLocked(c);
    truncated_from_ = std::min(truncated_from_, off / cs);
  }
  // The file's bytes are now exactly the committed generation's (opened, or
  // just committed): every chunk counts as untouched from here.
  void MarkBase() {
    MutexLock lock(&mu_);
    base_versions_ = versions_;
    truncated_from_ = UINT64_MAX;
  }
  // No write or truncate touched chunk `index` since MarkBase.
  bool Untouched(uint32_t index) const {
    MutexLock lock(&mu_);
    if (index >= truncated_from_) return false;
    const uint64_t base = index < base_versions_.size() ? base_versions_[index] : 0;
    return VersionLocked(index) == base;
  }
  // Forgets every send and base: the next commit sends everything (after a
  // commit was refused because the copies it reused are gone).
  void Forget() {
    MutexLock lock(&mu_);
    for (auto& [index, r] : sent_) DiscardLocked(index, r.sent);
    sent_.clear();
    truncated_from_ = 0;  // nothing counts as untouched until the next MarkBase
  }

  // Starts a send of chunk `index` for generation `gen`: nothing if a commit
  // runs, `gen` is not the next one, or the chunk was sent at its version.
  std::optional<Ticket> Claim(uint32_t index, uint64_t gen) {
    MutexLock lock(&mu_);
    if (committing_ || gen != next_gen_) return std::nullopt;
    const uint64_t v = VersionLocked(index);
    if (auto it = sent_.find(index); it != sent_.end() && it->second.version == v) return std::nullopt;
    ++in_flight_;
    return Ticket{index, v, gen};
  }
  // Ends a send: `sent` is kept if the chunk did not change meanwhile (and
  // its generation is still the next); null means the send failed.
  void Finish(const Ticket& t, std::optional<Sent> sent) {
    {
      MutexLock lock(&mu_);
      if (sent && t.gen == next_gen_ && VersionLocked(t.index) == t.version) {
        if (auto it = sent_.find(t.index); it != sent_.end()) DiscardLocked(t.index, it->second.sent);
        sent_[t.index] = Record{std::move(*sent), t.version};
      } else if (sent) {
        DiscardLocked(t.index, *sent, t.gen);
      }
      --in_flight_;
    }
    idle_.NotifyAll();
  }

  // Waits for the sends in flight, stops new ones, and returns what was sent
  // of generation `gen` that still matches the file.
  std::unordered_map<uint32_t, Sent> BeginCommit(uint64_t gen) {
    MutexLock lock(&mu_);
    committing_ = true;
    while (in_flight_ != 0) idle_.Wait(&mu_);
    std::unordered_map<uint32_t, Sent> out;
    if (gen != next_gen_) return out;
    for (auto it = sent_.begin(); it != sent_.end();) {
      if (VersionLocked(it->first) == it->second.version) {
        out.emplace(it->first, it->second.sent);
        ++it;
      } else {
        DiscardLocked(it->first, it->second.sent);
        it = sent_.erase(it);
      }
    }
    return out;
  }
  // The sends of generation `gen` that stored bytes no commit will count
  // (between BeginCommit and EndCommit).
  std::vector<Discard> Discarded(uint64_t gen) const {
    MutexLock lock(&mu_);
    std::vector<Discard> out;
    for (const Discard& d : discarded_) {
      if (d.gen == gen) out.push_back(d);
    }
    return out;
  }
  // Sends may start again, for `next_gen` (the commit's gen + 1 after a
  // success; unchanged after a failure, whose records stay good).
  void EndCommit(uint64_t next_gen) {
    MutexLock lock(&mu_);
    committing_ = false;
    if (next_gen != next_gen_) {
      sent_.clear();
      discarded_.clear();  // reported with the commit
    }
    next_gen_ = next_gen;
  }
  // The file's bytes now derive from generation `next_gen - 1` (opened).
  void Reset(uint64_t next_gen) { EndCommit(next_gen); }
  uint64_t next_gen() const {
    MutexLock lock(&mu_);
    return next_gen_;
  }

 private:
  struct Record {
    Sent sent;
    uint64_t version = 0;
  };
  uint64_t VersionLocked(uint64_t c) const REQUIRES(mu_) { return c < versions_.size() ? versions_[c] : 0; }
  void BumpLocked(uint64_t c) REQUIRES(mu_) {
    if (c >= versions_.size()) versions_.resize(c + 1, 0);
    ++versions_[c];
  }
  // A send that stored new bytes (not a reuse) and no longer counts.
  void DiscardLocked(uint32_t index, const Sent& s, uint64_t gen = 0) REQUIRES(mu_) {
    if (s.reused_gen != 0 || s.holders.empty()) return;
    if (discarded_.size() >= kMaxDiscards) return;  // past that, left to the file's eviction
    discarded_.push_back(Discard{gen != 0 ? gen : next_gen_, index, s.checksum, s.holders});
  }
  static constexpr size_t kMaxDiscards = 16384;

  mutable Mutex mu_;
  CondVar idle_;
  uint64_t next_gen_ GUARDED_BY(mu_);
  std::vector<uint64_t> versions_ GUARDED_BY(mu_);  // by chunk
  std::unordered_map<uint32_t, Record> sent_ GUARDED_BY(mu_);
  std::vector<uint64_t> base_versions_ GUARDED_BY(mu_);  // versions at MarkBase
  uint64_t truncated_from_ GUARDED_BY(mu_) = UINT64_MAX;  // first chunk a truncate touched since MarkBase
  std::vector<Discard> discarded_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;
  bool committing_ GUARDED_BY(mu_) = false;
};

}  // namespace hoard::fuse
