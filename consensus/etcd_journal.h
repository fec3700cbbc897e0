// File: consensus/etcd_journal.h
//
// EtcdJournal keeps a Journal (common/journal.h) in etcd, under one key
// prefix, so that every coordinator of a highly available cluster reads the
// same history and only the leader can add to it:
//
//   PREFIX log/<seq, 20 digits>        one record, its bytes as the value
//   PREFIX snapshot                    {seq, parts, size, checksum} (msgpack)
//   PREFIX snap/<seq>/<part, 6 digits> the snapshot's bytes, cut in parts
//                                      of at most kPartBytes
//
// Fencing: every write is a transaction whose compares include the writer's
// Fence (consensus/leader_election.h), so a writer that is no longer the
// leader gets kNotLeader and changes nothing, whether or not it knows yet;
// the journal is then broken for good (Options::on_lost). kNotLeader, so
// that the request that made the write is sent to the leader by its client.
//
// Appends: record seq+1 is written with "the key log/<seq+1> does not exist
// yet" as a second compare. An Append whose answer was lost (kUnavailable
// from etcd: it may or may not have been applied) is simply sent again: at
// most one of the two can apply, both carry the same bytes, and a failed
// compare with our bytes at that key means the first one did. This goes on
// for `resolve_timeout`; if etcd still does not answer, the journal is broken
// (every later call fails): its owner must stop and reload, since a record it
// reported as failed may be in etcd. (The coordinator then gives up its
// term: coordinator/ha_coordinator.h.)
//
// Snapshots: the parts are written first, each fenced, under the snapshot's
// own sequence number; one last transaction then points PREFIX snapshot at
// them and deletes the records it covers and every older part. A writer that
// dies half-way leaves parts nobody points at, deleted by the next snapshot.
// A record or snapshot part larger than etcd takes in one request is
// kInvalidArgument (records are small: a namespace change, a member; the
// snapshot is cut).
//
// Following: a standby keeps the history in memory as the leader writes it
// (Follow, over etcd's watch), so that a takeover only reads what the last
// moments added (Open catches up from where Follow got). A new snapshot, a gap
// or compacted watch history makes the follower load the snapshot again.
//
// Consistency of Open: read at one revision per page; a snapshot taken by
// another writer between reading the snapshot and reading the records shows
// up as a gap, and Open then starts over (only a follower can see one: the
// leader is the only writer).
//
// Thread-safety: not thread-safe (a Journal); the standby loop and the store
// that takes over use it one after the other.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/journal.h"
#include "consensus/kv.h"
#include "consensus/leader_election.h"

namespace hoard {

class EtcdJournal : public Journal {
 public:
  static constexpr size_t kPartBytes = kMaxRequestBytes - 4096;

  struct Options {
    std::string prefix;  // e.g. "/hoard/CLUSTER/state/"; ends with '/'
    // How long an Append or a snapshot part whose answer was lost is sent
    // again before the journal gives up (see the top).
    std::chrono::milliseconds resolve_timeout{5000};
    Clock* clock = Clock::Real();
    // Called once, from the writing thread, when the journal breaks: a write
    // was fenced out (this writer's term is over) or left in doubt. Its owner
    // drops what it holds in memory (HaCoordinator ends the term).
    std::function<void(const std::string& why)> on_lost;
  };

  EtcdJournal(Kv* kv, Options options);

  // The term every write is fenced with. Until it is set, writes are
  // kNotLeader.
  void SetFence(Fence fence) { fence_ = std::move(fence); }

  Result<Loaded> Open(const SnapshotSeqFn& snapshot_seq) override;
  Status Append(std::string_view record) override;
  Status WriteSnapshot(std::string_view snapshot) override;
  uint64_t seq() const override { return seq_; }
  uint64_t records_since_snapshot() const override { return records_since_; }
  uint64_t bytes_since_snapshot() const override { return bytes_since_; }
  Result<Loaded> Follow(std::chrono::milliseconds timeout) override;

  // Drops the history held for a follower (after the owner loaded it).
  void ForgetHeld() { held_ = {}; }

  std::string LogKey(uint64_t seq) const;
  std::string SnapshotKey() const { return options_.prefix + "snapshot"; }
  std::string PartKey(uint64_t snapshot_seq, uint32_t part) const;

 private:
  // Loads the newest snapshot and every record after it into held_.
  Status LoadAll();
  // For a follower: the history since what it holds (LoadAll when a newer
  // snapshot replaced records it has not read).
  Status CatchUp();
  // Reads the records after seq_ into held_ (page by page).
  Status ReadRecordsAfterHeld();
  // Sends a fenced transaction writing `key` = `value` (absent before if
  // `must_be_new`) until it gets a definite answer or resolve_timeout passes.
  Status FencedPut(const std::string& key, std::string_view value, bool must_be_new,
                   const std::vector<KvOp>& also = {});
  // Latches `status` (every later write fails with it), tells on_lost why,
  // and returns `status`.
  Status Break(Status status, const std::string& why);

  Kv* kv_;
  Options options_;
  std::optional<Fence> fence_;
  Status broken_;  // latched: see the top

  uint64_t seq_ = 0;                 // the last record held or written
  uint64_t snapshot_seq_ = 0;        // of the snapshot held (0: none)
  uint64_t records_since_ = 0;
  uint64_t bytes_since_ = 0;
  int64_t revision_ = 0;             // etcd's revision the follower is at
  Loaded held_;                      // the history as a follower got it
};

}  // namespace hoard
