// File: coordinator/state_store.h
//
// StateStore keeps the coordinator's durable state: members and datasets in
// a Journal (common/journal.h), manifests and a lock in its data directory:
//
//   DATA/LOCK            flocked by the one coordinator using the directory
//   DATA/manifests/<name>-<uid>-v<version>.manifest
//                        one file per dataset version, written before the
//                        state that refers to it
//
// The journal is Options::journal; by default a FileJournal
// (common/file_journal.h) in the same directory:
//
//   DATA/state.log       its log (common/state_log.h): one record per Save,
//                        fdatasynced before Save returns
//   DATA/state.msgpack   its snapshot: the whole state and the sequence number
//                        of the last record it includes
//
// Save(state) appends one record holding the difference from the state it
// last saved: nodes, datasets and job leases upserted or removed (by name;
// a lease by dataset and job), the new epochs, and the tenants' quotas whole
// when they changed (a few entries). A diff, rather than one kind of record per coordinator operation,
// because the log then always reproduces exactly the state the coordinator
// handed over: no call site can forget to log a field, and adding a field to
// NodeInfo or DatasetMeta needs no new record type. (Entries are compared by
// their msgpack bytes, so every persisted field counts.) One record per Save
// makes a commit atomic: a torn record is a commit that was never
// acknowledged. A Save costs O(state) CPU to compare, but only O(change) bytes
// and one fdatasync on disk.
//
// Each record also carries its own sequence number, which Open() checks
// against the journal's numbering.
//
// Every `snapshot_every_records` records or `snapshot_every_bytes` of
// journal since the last snapshot, Save writes a snapshot of the whole state
// (Journal::WriteSnapshot, which then drops the records it covers). A
// snapshot that cannot be written does not fail the Save (its record is
// durable); it is tried again `snapshot_every_records` later.
//
// Open() loads the snapshot (none: the empty state) and replays the records
// after it; the journal repairs what a crash can leave (a torn last record,
// a snapshot whose log replacement was cut short) and says so (see
// recovered()). It refuses to start (kCorruption, saying what to do) on a
// damaged record followed by valid ones, a gap in the sequence numbers, or a
// log that starts after the snapshot: the coordinator must not silently
// forget acknowledged changes. (The way out it offers, moving state.log
// away, starts from the snapshot alone, with a warning in recovered().) The
// format-1 state.msgpack of older coordinators loads as a snapshot at
// sequence 0 and is rewritten in the current format at once, so an old
// coordinator started on the directory afterwards refuses it instead of
// ignoring the log.
//
// Manifests: a manifest is fully written and fsynced before the state naming
// it is, so the state never points at a missing or partial manifest; a crash
// between the two leaves an orphan manifest that Open() removes.
//
// What is not persisted, on purpose: when each node was last heard from, its
// disk usage, and the chunks it reports (the coordinator zeroes them before
// Save). Whether a node is up or down is persisted: it is part of the
// placement of the map at that epoch. After a restart, nodes that were up are
// given a full down-timeout to heartbeat again, and their next heartbeat
// re-reports what they hold.
//
// Failures: a Save that fails has changed nothing durable (journal.h
// invariant 1; with the FileJournal, whatever its record wrote is cut off
// before it returns, state_log.h). If that cut itself fails, every later Save
// fails until a restart (after which the failed commit may or may not be
// there), rather than append to a log that might not replay.
//
// Thread-safety: not thread-safe; the Coordinator serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "common/file_journal.h"
#include "common/journal.h"
#include "common/result.h"
#include "proto/messages.h"
#include "striping/manifest.h"

namespace hoard {

// Node and dataset names are unique. Open() returns both lists sorted by
// name, whatever order Save() was given (the coordinator keeps them sorted).
struct CoordinatorState {
  uint64_t epoch = 0;            // bumps on every change of the cluster map
  uint64_t placement_epoch = 0;  // bumps when members or weights change
  std::vector<proto::NodeInfo> nodes;
  std::vector<proto::DatasetMeta> datasets;
  // Tenants' cache quotas in bytes (`hoard quota set`; coordinator/eviction.h).
  std::map<std::string, uint64_t> quotas;
  // Job leases (coordinator/leases.h), by (dataset, job); unique per key.
  std::vector<proto::Lease> leases;
  MSGPACK_DEFINE_MAP(epoch, placement_epoch, nodes, datasets, quotas, leases);
};

class StateStore {
 public:
  struct Options {
    // Snapshot when the journal holds this many records since the last
    // snapshot (default 1,000), or this many bytes (8 MiB). Smaller: faster
    // restarts (less to replay), more snapshot writes, each the whole state.
    uint64_t snapshot_every_records = 1000;
    uint64_t snapshot_every_bytes = 8u << 20;
    // Where Open() reports what it repaired; null: spdlog's default logger.
    std::shared_ptr<spdlog::logger> logger;
    // Where the state lives: null, a FileJournal at DATA/state.log and
    // DATA/state.msgpack. The store takes it over; one store per journal
    // (shared_ptr only so that Options stays copyable).
    std::shared_ptr<Journal> journal;
  };

  explicit StateStore(std::string dir);  // default Options
  StateStore(std::string dir, Options options);

  // Creates the directory if needed and loads the state (empty on first
  // start), repairing what a crash can leave (see the top). kCorruption if
  // the state cannot be read: the coordinator must not start over silently
  // and forget every dataset.
  Result<CoordinatorState> Open();

  // Makes `state` durable: appends one record with what changed since the
  // last Save (nothing if nothing did), fdatasynced, and snapshots when due.
  // kIoError/kNoSpace if it could not; kInvalidArgument for a name that
  // appears twice. REQUIRES: Open() succeeded.
  Status Save(const CoordinatorState& state);

  Status SaveManifest(const proto::DatasetMeta& meta, std::string_view bytes);
  Result<Manifest> LoadManifest(const proto::DatasetMeta& meta) const;
  Status RemoveManifest(const proto::DatasetMeta& meta);

  const std::string& dir() const { return dir_; }
  // What the last Open() repaired or upgraded, one line each (also logged at
  // warn); empty when it found the state as it was left.
  const std::vector<std::string>& recovered() const { return recovered_; }
  // The sequence number of the last saved commit.
  uint64_t seq() const { return journal_->seq(); }

  // Test-only: the FileJournal's log, for StateLog::TEST_FailNextAppend.
  // REQUIRES: Open(), and the default journal (or a FileJournal).
  StateLog& TEST_log() { return dynamic_cast<FileJournal&>(*journal_).TEST_log(); }

 private:
  UniqueFd lock_fd_;  // an exclusive flock on DIR/LOCK while open
  std::string ManifestPath(const proto::DatasetMeta& meta) const;
  enum class SnapshotKind { kNone, kLegacy, kCurrent };
  // Decodes a snapshot into the maps below; returns the sequence number of
  // the last record it includes (0 for format 1) and sets `kind`.
  Result<uint64_t> LoadSnapshot(std::string_view bytes, SnapshotKind* kind);
  // Applies one record, which must carry sequence number `seq`.
  Status ApplyRecord(std::string_view payload, uint64_t seq);
  // Writes a snapshot of the saved state to the journal.
  Status WriteSnapshot();
  // WriteSnapshot() when the journal is due for one; a failure is logged and
  // retried later.
  void MaybeSnapshot();
  CoordinatorState SavedState() const;
  void Note(std::string line);

  std::string dir_;
  Options options_;
  std::vector<std::string> recovered_;

  // The state as of the last durable commit, by name, with each entry's
  // msgpack bytes (which Save compares against).
  uint64_t epoch_ = 0;
  uint64_t placement_epoch_ = 0;
  template <typename T>
  struct Entry {
    T value;
    std::string bytes;
  };
  std::map<std::string, Entry<proto::NodeInfo>> nodes_;
  std::map<std::string, Entry<proto::DatasetMeta>> datasets_;
  std::map<std::string, uint64_t> quotas_;
  std::map<std::string, Entry<proto::Lease>> leases_;  // by LeaseKey
  std::shared_ptr<Journal> journal_;
  // How messages name the journal's log and snapshot, and what they tell an
  // operator to do when it cannot be trusted: the files of the default
  // FileJournal, or words for one given in Options.
  std::string log_name_;
  std::string snapshot_name_;
  bool open_ = false;  // Open() succeeded
  uint64_t snapshot_not_before_ = 0;  // journal records; backs off after a failed snapshot
};

}  // namespace hoard
