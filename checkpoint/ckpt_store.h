// File: checkpoint/ckpt_store.h
//
// CkptStore keeps the checkpoint namespace durable in a Journal
// (common/journal.h): one CkptRecord per namespace change, durable before
// Append returns, and now and then a CkptSnapshot of the whole namespace.
// The journal is Options::journal; by default a FileJournal
// (common/file_journal.h) under DATA/ckpt/:
//
//   DATA/ckpt/journal.log      its log (common/state_log.h): the records
//   DATA/ckpt/snapshot.msgpack its snapshot: the whole namespace and the
//                              sequence number of the last record it includes
//
// Why records are "apply these upserts/deletions" rather than one record per
// operation: CkptTable builds a record, makes it durable, then applies it to
// memory with the very function that replays it on open (CkptTable::Apply).
// So the state after a restart is, by construction, the state that was
// acknowledged; no operation can forget to log a field. Entries are stored by
// id with their parent's id and their name, so renaming a directory of ten
// thousand files is one small record.
//
// Snapshots: every `snapshot_every_records` appends, WriteSnapshot hands the
// whole state to the journal, which then drops the records it covers.
//
// The journal repairs what a crash can leave (a torn last record, which was
// never acknowledged; a snapshot whose log replacement was cut short) and
// refuses what cannot be trusted (a damaged record followed by valid ones, a
// log that starts after the snapshot: kCorruption). What the bytes mean is
// checked here: a record or snapshot that does not decode is kCorruption.
//
// Thread-safety: not thread-safe; CkptTable serialises calls under its mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/file_journal.h"
#include "common/journal.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

// A holder Rereplicate named for chunk `index` of generation `gen` that has
// not yet confirmed it holds its copy (see "Shown level" in ckpt_table.h).
struct CkptUnconfirmed {
  uint64_t gen = 0;
  uint32_t index = 0;
  std::string node;
  MSGPACK_DEFINE_MAP(gen, index, node);
};

// A committed generation that stopped being a file's current one (a newer
// commit, or the file was removed or replaced) while a reader may still have
// it open: its copies stay until no mount holds it (CkptSession) and
// CkptTable::Options::retire_grace has passed (ckpt_table.h, "Old
// generations").
struct CkptOldGen {
  uint64_t gen = 0;
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  std::vector<uint64_t> checksums;
  std::vector<uint64_t> chunk_gens;  // as CkptEntry::chunk_gens
  std::string writer;                // whose whole-file copy still holds it ("" none)
  std::vector<std::vector<std::string>> replicas;
  int64_t retired_unix_ms = 0;
  MSGPACK_DEFINE_MAP(gen, size, chunk_size, checksums, chunk_gens, writer, replicas, retired_unix_ms);
};

// A copy a node must delete (CkptWorkReply.drop, .drop_files): a replica
// file, or (`whole`) the whole-file copy files/<id> if it holds `gen` or
// older. `seq` orders them per node; the node echoes the last one done.
struct CkptDrop {
  uint64_t seq = 0;
  std::string node;
  uint64_t id = 0;
  uint64_t gen = 0;
  uint32_t index = 0;
  uint64_t checksum = 0;
  bool whole = false;
  MSGPACK_DEFINE_MAP(seq, node, id, gen, index, checksum, whole);
};

// One namespace entry as stored: the wire entry (its `path` left empty: an
// entry is stored by parent id and name, so moving a directory rewrites one
// entry, not its whole subtree) plus what the table needs beyond it. The
// root has id 0 and is never stored.
struct CkptNode : proto::CkptEntry {
  uint64_t parent = 0;
  std::string name;
  uint64_t commit_seq = 0;     // order of commits across the namespace: drain order, marker rule
  uint64_t uploaded_gen = 0;   // a generation uploaded to staging whose publish is not queued yet
  std::string uploaded_tmp;    // ... and its staging name
  uint64_t published_gen = 0;  // the generation whose publish is queued (or done)
  // Something is (or will be, once the queued operations are applied) at this
  // entry's path on the origin: a published file, or a directory created for
  // one. Decides whether a rename/unlink/rmdir is mirrored.
  bool on_origin = false;
  bool released = false;  // P and past retention: nodes may delete their copies
  // When a mount last opened it for writing (CkptSetAttr::reopen); 0 once a
  // commit followed. Retention leaves it alone for Options::reopen_hold.
  int64_t reopened_unix_ms = 0;
  // Durable so that a coordinator restart neither counts these holders
  // before they confirm nor forgets to send them their rebuild lists.
  std::vector<CkptUnconfirmed> unconfirmed;
  // Generations readers may still read (see CkptOldGen), oldest first.
  std::vector<CkptOldGen> old_gens;
  // Removed (or replaced by a rename) while its last generation may still be
  // read: kept, out of the namespace (parent 0, no name), only for its
  // old_gens; deleted with the last of them.
  bool orphan = false;
  // The current generation was committed while its file stayed open for
  // writing (CkptCommit.writing). Durable so that a restarted coordinator
  // does not drain it before the mounts have said whether it still is.
  bool committed_writing = false;
  MSGPACK_DEFINE_MAP(MSGPACK_BASE_MAP(proto::CkptEntry), parent, name, commit_seq, uploaded_gen, uploaded_tmp, published_gen,
                     on_origin, released, unconfirmed, reopened_unix_ms, old_gens, orphan, committed_writing);
};

// An operation for the origin, applied in `seq` order by the Publisher.
struct OriginOp {
  enum Kind : uint8_t { kPublish = 0, kRename = 1, kUnlink = 2, kRmdir = 3, kSymlink = 4 };
  uint64_t seq = 0;
  uint8_t kind = kPublish;
  // kPublish: the staging name; kRename: the old path; kSymlink: the target
  std::string from;
  std::string path;  // kPublish/kRename/kSymlink: the target path; kUnlink/kRmdir: the path
  uint64_t id = 0;   // kPublish: the file and generation that becomes P
  uint64_t gen = 0;
  MSGPACK_DEFINE_MAP(seq, kind, from, path, id, gen);
};

// One durable change. Applied in this order: put, del, ops_add, ops_done,
// drops_add, drops_done.
struct CkptRecord {
  uint64_t next_id = 0;          // counters after the change (never go back)
  uint64_t next_commit_seq = 0;
  uint64_t next_op_seq = 0;
  std::vector<CkptNode> put;     // upserts by id
  std::vector<uint64_t> del;     // removed ids
  std::vector<OriginOp> ops_add;
  std::vector<uint64_t> ops_done;
  uint64_t next_drop_seq = 0;
  std::vector<CkptDrop> drops_add;
  std::vector<uint64_t> drops_done;  // by seq
  MSGPACK_DEFINE_MAP(next_id, next_commit_seq, next_op_seq, put, del, ops_add, ops_done, next_drop_seq, drops_add,
                     drops_done);
};

// The whole state, as written to the snapshot (and as loaded).
struct CkptSnapshot {
  uint64_t seq = 0;  // last journal record included
  uint64_t next_id = 1;
  uint64_t next_commit_seq = 1;
  uint64_t next_op_seq = 1;
  std::vector<CkptNode> nodes;
  std::vector<OriginOp> ops;
  uint64_t next_drop_seq = 1;
  std::vector<CkptDrop> drops;
  MSGPACK_DEFINE_MAP(seq, next_id, next_commit_seq, next_op_seq, nodes, ops, next_drop_seq, drops);
};

class CkptStore {
 public:
  struct Options {
    // Snapshot after this many records (default 10,000). Smaller: faster
    // restarts, more snapshot writes (each the whole namespace).
    uint64_t snapshot_every_records = 10000;
    // Where the namespace lives: null, a FileJournal at DIR/journal.log and
    // DIR/snapshot.msgpack. The store takes it over; one store per journal
    // (shared_ptr only so that Options stays copyable).
    std::shared_ptr<Journal> journal;
  };
  CkptStore(std::string dir, Options options);

  // What Open found: the snapshot (or an empty state) and the journal's
  // records after it, to be applied in order on top of it.
  struct Loaded {
    CkptSnapshot snapshot;
    std::vector<CkptRecord> records;
  };
  // Loads the state (creating the directory if needed). `cut` (if not null)
  // gets what the journal repaired ("; " between lines), empty if nothing.
  // kCorruption when it cannot be trusted.
  Result<Loaded> Open(std::string* cut);

  // Appends `record`, durable when this returns OK; on error nothing of it
  // is in the journal.
  Status Append(const CkptRecord& record);

  // True when a snapshot is due; the caller then passes the whole state to
  // WriteSnapshot (its seq is filled in here).
  bool SnapshotDue() const;
  Status WriteSnapshot(CkptSnapshot snapshot);

  uint64_t seq() const;  // last durable record

  // Test-only: the FileJournal's log, for fault injection. REQUIRES: Open(),
  // and the default journal (or a FileJournal).
  StateLog& TEST_log() { return dynamic_cast<FileJournal&>(*journal_).TEST_log(); }

 private:
  Options options_;
  std::shared_ptr<Journal> journal_;
  // How messages name the journal's log and snapshot: the files of the
  // default FileJournal, or words for one given in Options.
  std::string log_name_;
  std::string snapshot_name_;
};

}  // namespace hoard
