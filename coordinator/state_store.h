// File: coordinator/state_store.h
//
// StateStore keeps the coordinator's durable state in its data directory:
//
//   DATA/LOCK            flocked by the one coordinator using the directory
//   DATA/state.log       the write-ahead log (state_log.h): one record per
//                        Save, fdatasynced before Save returns
//   DATA/state.msgpack   a snapshot: the whole state and the sequence number
//                        of the last log record it includes
//   DATA/manifests/<name>-<uid>-v<version>.manifest
//                        one file per dataset version, written before the
//                        state that refers to it
//
// Save(state) appends one record holding the difference from the state it
// last saved: nodes and datasets upserted or removed (by name) and the new
// epochs. A diff, rather than one kind of record per coordinator operation,
// because the log then always reproduces exactly the state the coordinator
// handed over: no call site can forget to log a field, and adding a field to
// NodeInfo or DatasetMeta needs no new record type. (Entries are compared by
// their msgpack bytes, so every persisted field counts.) One record per Save
// makes a commit atomic: a torn record is a commit that was never
// acknowledged. A Save costs O(state) CPU to compare, but only O(change) bytes
// and one fdatasync on disk.
//
// Every `snapshot_every_records` records or `snapshot_every_bytes` of log,
// Save writes a snapshot (WriteFileAtomic: tmp, fsync, rename, fsync dir) and
// then replaces the log with an empty one the same way. A crash between the
// two leaves records the snapshot already includes; Open() skips them by
// sequence number. A snapshot that cannot be written does not fail the Save
// (its record is durable); it is tried again `snapshot_every_records` later.
//
// Open() loads the snapshot (none: the empty state), replays the records
// after it, and cuts a torn last record (see recovered()). It refuses to start
// (kCorruption, saying what to do) on a damaged record followed by valid ones,
// a gap in the sequence numbers, or a log that starts after the snapshot: the
// coordinator must not silently forget acknowledged changes. (The way out it
// offers, moving state.log away, starts from the snapshot alone, with a
// warning in recovered().) The format-1
// state.msgpack of older coordinators loads as a snapshot at sequence 0 and is
// rewritten in the current format at once, so an old coordinator started on
// the directory afterwards refuses it instead of ignoring the log.
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
// Failures: a Save that fails has changed nothing durable: whatever its
// record wrote is cut off before it returns (state_log.h). If that cut itself
// fails, every later Save fails until a restart (after which the failed commit
// may or may not be there), rather than append to a log that might not replay.
//
// Thread-safety: not thread-safe; the Coordinator serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "common/result.h"
#include "common/state_log.h"
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
  MSGPACK_DEFINE_MAP(epoch, placement_epoch, nodes, datasets);
};

class StateStore {
 public:
  struct Options {
    // Snapshot when the log holds this many records (default 1,000), or this
    // many bytes (8 MiB). Smaller: faster restarts (less to replay), more
    // snapshot writes, each the whole state.
    uint64_t snapshot_every_records = 1000;
    uint64_t snapshot_every_bytes = 8u << 20;
    // Where Open() reports what it repaired; null: spdlog's default logger.
    std::shared_ptr<spdlog::logger> logger;
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
  uint64_t seq() const { return seq_; }

  // Test-only: the log, for StateLog::TEST_FailNextAppend. REQUIRES: Open().
  StateLog& TEST_log() { return *log_; }

 private:
  UniqueFd lock_fd_;  // an exclusive flock on DIR/LOCK while open
  std::string ManifestPath(const proto::DatasetMeta& meta) const;
  std::string SnapshotPath() const;
  std::string LogPath() const;
  enum class SnapshotKind { kNone, kLegacy, kCurrent };
  // Loads state.msgpack into the maps below; `snapshot_seq` gets the last
  // log record it includes.
  Result<SnapshotKind> LoadSnapshot(uint64_t* snapshot_seq);
  // Applies one replayed record if the snapshot does not include it; checks
  // that it follows `last_seq` and advances it.
  Status ApplyRecord(std::string_view payload, uint64_t offset, uint64_t snapshot_seq,
                     std::optional<uint64_t>* last_seq);
  // Writes a snapshot of the saved state, then replaces the log with an
  // empty one.
  Status WriteSnapshot();
  // WriteSnapshot() when the log is due for one; a failure is logged and
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
  uint64_t seq_ = 0;  // of the last durable commit
  std::optional<StateLog> log_;
  uint64_t snapshot_not_before_ = 0;  // log records; backs off after a failed snapshot
};

}  // namespace hoard
