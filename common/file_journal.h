// File: common/file_journal.h
//
// FileJournal is the Journal (journal.h) of a single coordinator: a StateLog
// (state_log.h) and a snapshot file, both in its data directory. It is the
// default of both stores: StateStore keeps DATA/state.log and
// DATA/state.msgpack, CkptStore DATA/ckpt/journal.log and
// DATA/ckpt/snapshot.msgpack.
//
// Layout: the snapshot file holds the owner's bytes as given to
// WriteSnapshot, nothing else (its seq is inside them: the owner's
// SnapshotSeqFn reads it); the log's header holds base_seq, and its records
// are numbered base_seq + 1, + 2, ... by position. So the format is exactly
// what the stores wrote before the journal existed.
//
// WriteSnapshot writes the snapshot (WriteFileAtomic: tmp, fsync, rename,
// fsync dir) and only then replaces the log with an empty one based at that
// seq (StateLog::Create, the same way). A crash between the two leaves a log
// whose records the snapshot already covers; Open skips them by seq, and
// when the snapshot covers all of them it finishes the replacement and says
// so in `repaired`. Leftover PATH.tmp files of a replacement cut short are
// removed by Open, never read.
//
// Open refuses (kCorruption) what cannot be trusted: a bad log header, a
// damaged record followed by valid ones (state_log.h invariant 2), a log
// that starts after the snapshot (the records between are missing). A torn
// last record is cut and reported in `repaired`, as is a missing log next to
// a snapshot (started afresh from the snapshot alone). Errors of the
// owner's SnapshotSeqFn are returned as they are.
//
// Failures (state_log.h invariant 3): a failed Append leaves nothing in the
// log; if cutting it back fails too, the log is latched broken and every
// later Append fails until Open runs again (a restart). A failed
// WriteSnapshot changes nothing the next Open would see differently: the
// old log stays and takes the next records.
//
// Thread-safety: not thread-safe; the owning store serialises calls.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/journal.h"
#include "common/state_log.h"

namespace hoard {

class FileJournal : public Journal {
 public:
  FileJournal(std::string log_path, std::string snapshot_path);

  // Creates the directories of both paths if needed. May be called again
  // (it starts over from the files); the first call must precede the rest.
  Result<Loaded> Open(const SnapshotSeqFn& snapshot_seq) override;
  Status Append(std::string_view record) override;
  Status WriteSnapshot(std::string_view snapshot) override;
  uint64_t seq() const override;
  // The log's records and its size in bytes, header included (what the
  // stores' snapshot policies always counted). After a crash between a
  // snapshot and the log's replacement the log may still hold records the
  // snapshot covers; they count until the next snapshot replaces it.
  uint64_t records_since_snapshot() const override;
  uint64_t bytes_since_snapshot() const override;
  // kInvalidArgument: one writer, nobody follows a file.
  Result<Loaded> Follow(std::chrono::milliseconds timeout) override;

  const std::string& log_path() const { return log_path_; }
  const std::string& snapshot_path() const { return snapshot_path_; }

  // Test-only: the log, for StateLog::TEST_FailNextAppend and its counters.
  // REQUIRES: Open() succeeded.
  StateLog& TEST_log() { return *log_; }

 private:
  std::string log_path_;
  std::string snapshot_path_;
  std::optional<StateLog> log_;  // set by a successful Open
};

// What a store does with the journal its Options may give: returns `given`,
// or when it is null a FileJournal at `log_path` and `snapshot_path` (the
// store's default). `log_name` and `snapshot_name` get how the store's
// messages name the two: the files, or `what` ("the checkpoint journal")
// and its snapshot.
std::shared_ptr<Journal> JournalOrFile(std::shared_ptr<Journal> given, const std::string& what, std::string log_path,
                                       std::string snapshot_path, std::string* log_name, std::string* snapshot_name);

}  // namespace hoard
