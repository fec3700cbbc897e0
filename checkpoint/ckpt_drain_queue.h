// File: checkpoint/ckpt_drain_queue.h
//
// CkptDrainQueue decides which committed generations go to the origin next,
// by which node, and how fast (ckpt_table.h, "Drain"): the index of files
// committed and neither uploaded nor published, in commit order; the leases
// of the tasks handed out; the files flushed by an operator (urgent); the
// files some mount still writes (not drained: a commit made before its
// writer closed may be half of what it writes); and the drain's bandwidth
// budget next to dataset fills.
//
// The undrained index is derived from the entries: CkptTable::Apply keeps it
// (Index, Forget), live and on replay. Leases, urgency and the writing sets
// are not durable, on purpose: leases are handed out again after a restart
// anyway, a flush is a hint the CLI repeats with --wait, and mounts report
// what they write every 2 s; CkptTable's methods set them directly.
//
// Invariants: undrained() holds (commit_seq, id) of exactly the non-orphan
// files with gen != 0 whose current generation is neither uploaded nor
// published; Take never hands one file to two nodes while its lease runs,
// nor more than max_tasks_per_node tasks to a node per call.
//
// Thread-safety: not thread-safe; guarded by CkptTable's mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/ckpt_namespace.h"

namespace hoard {

class CkptDrainQueue {
 public:
  // As CkptTable::Options (see there).
  struct Options {
    uint32_t max_tasks_per_node = 4;
    std::chrono::milliseconds lease{std::chrono::seconds(120)};
    std::chrono::milliseconds writing_hold{std::chrono::seconds(5)};
    std::chrono::milliseconds drain_deadline{std::chrono::seconds(600)};
    uint64_t drain_max_bytes_per_s = 0;
    double drain_share = 0.25;
    uint64_t drain_min_bytes_per_s = 16ull << 20;
  };
  // `opened_at` and `opened_unix_ms`: when the table was opened, on the
  // steady and the wall clock. Until writing_hold after it, a file committed
  // while being written by the previous run may still be written.
  CkptDrainQueue(Options options, std::chrono::steady_clock::time_point opened_at, int64_t opened_unix_ms)
      : options_(options), opened_at_(opened_at), opened_unix_ms_(opened_unix_ms) {}

  // Who drains `n`: its writer if up, else the first up node holding one of
  // its chunks; none while no holder is up.
  static std::optional<std::string> Drainer(const CkptNode& n, const std::set<std::string>& up);

  // The tasks for `node` asking for work at `now`: ends its own leases (it
  // asks only between rounds), then walks the undrained files, flushed ones
  // first, then in commit order, taking those it should drain and nobody
  // holds a lease on, up to max_tasks_per_node; each gets a lease.
  std::vector<const CkptNode*> Take(const CkptNamespace& ns, const std::string& node, const std::set<std::string>& up,
                                    std::chrono::steady_clock::time_point now);

  // The drain budget of all nodes together, bytes/s (0 = unlimited), given
  // the datasets' fill rate: fill × share / (1 − share) within [min, max],
  // or max while a flushed or overdue file waits.
  uint64_t Budget(const CkptNamespace& ns, double dataset_fill_bytes_per_s, int64_t now_ms) const;
  // Whether the oldest undrained file is past drain_deadline.
  bool AnyOverdue(const CkptNamespace& ns, int64_t now_ms) const;

  // A commit of `id` (its old lease is moot); `writing`: made while the
  // file stays open for writing by mount `mount`.
  void Committed(uint64_t id, bool writing, uint64_t mount, std::chrono::steady_clock::time_point now);
  // An upload of generation `gen` of `id` was reported (done or failed).
  void EndLease(uint64_t id, uint64_t gen);
  void Flush(uint64_t id) { urgent_.insert(id); }  // drained first until published
  void Published(uint64_t id) { urgent_.erase(id); }
  // What the live sessions write (see CkptTable::SetSessions).
  void SetWriting(std::set<uint64_t> writing, uint64_t mount, const std::set<uint64_t>& mount_writing);

  // (commit_seq, id) of every undrained file, oldest commit first.
  const std::set<std::pair<uint64_t, uint64_t>>& undrained() const { return undrained_; }

  // ---- CkptTable::Apply only ----
  void Index(const CkptNode& n, bool add);
  void Forget(uint64_t id);  // the entry is gone

 private:
  struct Lease {
    uint64_t gen = 0;
    std::string node;
    std::chrono::steady_clock::time_point expiry;
  };
  struct WritingCommit {
    uint64_t mount = 0;
    std::chrono::steady_clock::time_point expiry;
  };

  bool Writing(const CkptNode& n, std::chrono::steady_clock::time_point now) const;

  const Options options_;
  const std::chrono::steady_clock::time_point opened_at_;
  const int64_t opened_unix_ms_;  // commits before it were a previous run's
  std::set<std::pair<uint64_t, uint64_t>> undrained_;
  std::map<uint64_t, Lease> leases_;  // by id
  std::set<uint64_t> urgent_;         // ids flushed and not yet drained
  std::set<uint64_t> writing_;        // files the sessions write
  std::map<uint64_t, WritingCommit> writing_commits_;  // CkptCommit.writing, by id
};

}  // namespace hoard
