// File: common/journal.h
//
// A Journal is where a durable state machine keeps its history: an ordered
// list of opaque records, each durable before Append returns, and now and
// then a snapshot of the whole state that stands for every record up to its
// sequence number (records it covers may then be dropped). The coordinator's
// two state machines use one each: StateStore (coordinator/state_store.h:
// members and datasets) and CkptStore (checkpoint/ckpt_store.h: the
// checkpoint namespace). They own what the bytes mean; the journal owns
// where they live and that they survive:
//   - FileJournal (common/file_journal.h): a StateLog and a snapshot file in
//     the coordinator's data directory, the embedded single-coordinator
//     default;
//   - EtcdJournal (consensus/etcd_journal.h): keys in etcd, every write
//     fenced by the writer's leadership, so that several coordinators can
//     share one history and only the leader can add to it.
//
// Sequence numbers: records are numbered 1, 2, 3, ... with no gaps, across
// snapshots; Append gives the next one. A snapshot written at seq S stands
// for records 1..S.
//
// Invariants (every implementation):
//   1. Append returns OK only once the record is durable; an Append that
//      fails leaves no trace that Open or Follow would return (the caller
//      then applies nothing, so memory never runs ahead of the journal).
//   2. Open returns the newest snapshot and exactly the records after it,
//      contiguous; anything that cannot be trusted (a gap, damage followed
//      by valid records) is kCorruption, never a silent loss.
//   3. A fenced journal (EtcdJournal) refuses Append and WriteSnapshot with
//      kNotLeader as soon as its writer is no longer the leader, even if the
//      writer does not know it yet: the check is in the same etcd
//      transaction as the write.
//
// Errors: kIoError / kNoSpace (disk), kUnavailable (etcd did not answer:
// whether the record was applied is then unknown, and the journal refuses
// every later write: its owner must reload), kNotLeader (fenced out),
// kCorruption (Open), kInvalidArgument (a record too large for the backend).
//
// Thread-safety: not thread-safe; the owning store serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

class Journal {
 public:
  struct Loaded {
    std::string snapshot;        // empty: none was written yet
    uint64_t snapshot_seq = 0;   // the last record the snapshot stands for
    std::vector<std::string> records;  // seq snapshot_seq + 1, + 2, ...
    std::vector<std::string> repaired;  // what Open had to repair (a torn tail cut), one line each
  };

  // Reads the snapshot's sequence number out of the owner's snapshot bytes
  // (the file backend keeps it only there, as older versions did).
  using SnapshotSeqFn = std::function<Result<uint64_t>(std::string_view snapshot)>;

  virtual ~Journal() = default;

  // Loads the history, repairing what a crash can leave. Must be called once
  // before anything else.
  virtual Result<Loaded> Open(const SnapshotSeqFn& snapshot_seq) = 0;

  // Appends `record` as seq() + 1.
  virtual Status Append(std::string_view record) = 0;

  // Stores `snapshot`, which stands for records 1..seq() (the caller passes
  // the state as of its last Append). A failed snapshot changes nothing: the
  // records it would have replaced are still there.
  virtual Status WriteSnapshot(std::string_view snapshot) = 0;

  // Records appended since the last snapshot, and their bytes: when to
  // snapshot is the owner's policy.
  virtual uint64_t seq() const = 0;
  virtual uint64_t records_since_snapshot() const = 0;
  virtual uint64_t bytes_since_snapshot() const = 0;

  // For a journal another process writes (a standby following the leader):
  // waits up to `timeout` for records after seq() and returns them
  // (`snapshot` set instead when the records after seq() were replaced by a
  // newer snapshot: the follower then starts over from it). An empty Loaded
  // after the timeout. FileJournal: kInvalidArgument (one writer, no
  // followers).
  virtual Result<Loaded> Follow(std::chrono::milliseconds timeout) = 0;
};

}  // namespace hoard
