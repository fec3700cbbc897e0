// File: common/state_log.h
//
// StateLog is the write-ahead log under FileJournal (file_journal.h), the
// journal of both coordinator stores by default: an append-only file of
// checksummed records, each made durable (fdatasync) before Append returns.
// It knows nothing of what the records say.
//
// Format (little-endian):
//
//   header, 24 bytes: magic "HRDSTLOG", u32 format (1), u32 checksum of the
//                     header's other 20 bytes, u64 base_seq
//   records:          [u32 length][u32 checksum of the payload][payload]
//
// base_seq is the owner's number, kept with the log: FileJournal numbers the
// records base_seq + 1, + 2, ... Checksums are the low 32 bits
// of XXH3 (common/hash.h). A length of 0 or above kMaxRecordBytes is invalid,
// so garbage can never claim a huge record.
//
// A log file only ever comes into being whole: Create() writes the header to
// PATH.tmp, fsyncs it, renames it over PATH and fsyncs the directory. The
// header is therefore never torn, and a bad header is corruption.
//
// Invariants:
//   1. Records are appended one write per record, and a record is durable
//      before Append returns OK. So a crash can only leave a torn *last*
//      record, and that record was never acknowledged.
//   2. Open() treats a bad record (incomplete, bad length, checksum mismatch)
//      as a torn tail only when no valid record starts at any later offset;
//      it cuts the file there (ftruncate, fdatasync). A bad record with a
//      valid one after it is real corruption: kCorruption, nothing is cut.
//      (Garbage that happens to pass a 32-bit checksum errs on the safe side:
//      a refusal to start, never a cut acknowledged record. So does a damaged
//      tail that would take more than 1 GiB of checksums to search: damage
//      that makes every offset claim a long record would otherwise make the
//      search quadratic, and the start hang.)
//   3. A failed Append may have written part or all of its record. Before
//      returning it cuts the file back to the end of the last good record
//      (ftruncate, fdatasync): the failed commit does not come back after a
//      restart, and a good record never follows garbage. If that cut fails,
//      the log is latched broken: every later Append fails (as leveldb
//      latches its background error) rather than write records that might
//      not replay. A restart recovers: Open() cuts a torn tail itself
//      (invariant 2), though a complete record whose fdatasync failed may
//      then replay.
//
// Thread-safety: not thread-safe; FileJournal's owner serialises calls.
//
// Tested through FileJournal and StateStore: common/file_journal_test.cc,
// coordinator/state_store_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/file_util.h"
#include "common/result.h"

namespace hoard {

class StateLog {
 public:
  static constexpr size_t kHeaderBytes = 24;
  static constexpr size_t kRecordHeaderBytes = 8;
  static constexpr uint32_t kMaxRecordBytes = 64u << 20;

  // Called for each complete record in file order with its payload and the
  // file offset of its record header; a non-OK Status stops the replay and
  // Open() returns it.
  using ReplayFn = std::function<Status(std::string_view payload, uint64_t offset)>;

  // Opens the log at `path`, replays it and cuts a torn tail. `cut` (if not
  // null) receives a description of what was cut, empty if nothing was.
  // kNotFound if the file does not exist; kCorruption for a bad header or a
  // bad record followed by a valid one.
  static Result<StateLog> Open(const std::string& path, const ReplayFn& replay, std::string* cut);

  // Atomically replaces `path` with an empty log (header only) whose
  // base_seq is `base_seq`. If the rename happened but the directory fsync
  // failed, the new log is returned anyway (the old file is gone from the
  // name, so it must not be appended to) and the next Append retries the
  // fsync before writing.
  static Result<StateLog> Create(const std::string& path, uint64_t base_seq);

  StateLog(StateLog&&) = default;
  StateLog& operator=(StateLog&&) = default;

  // Appends one record and fdatasyncs the file. On error the record is not
  // in the log (invariant 3). kInvalidArgument for an empty payload or one
  // above kMaxRecordBytes.
  Status Append(std::string_view payload);

  uint64_t base_seq() const { return base_seq_; }
  // Records in the log and its size in bytes (header included), counting
  // only complete, durable records.
  uint64_t records() const { return records_; }
  uint64_t bytes() const { return end_; }
  const std::string& path() const { return path_; }

  // Test-only fault injection: the next Append writes only the first
  // `written` bytes of its record (all of it if larger) and then fails with
  // errno `err`, as a full disk or an I/O error would. With `fail_repair`,
  // cutting the log back after it fails too, which latches the log broken.
  void TEST_FailNextAppend(int err, size_t written, bool fail_repair = false);

 private:
  StateLog(std::string path, UniqueFd fd, uint64_t base_seq, uint64_t end, uint64_t records)
      : path_(std::move(path)), fd_(std::move(fd)), base_seq_(base_seq), end_(end), records_(records) {}

  // Makes the file end at end_ again if a failed Append left bytes after it,
  // and its directory entry durable if Create left that pending. Latches
  // broken_ on failure.
  void Repair();

  std::string path_;
  UniqueFd fd_;
  uint64_t base_seq_ = 0;
  uint64_t end_ = 0;      // end of the last good record: where the next one goes
  uint64_t records_ = 0;
  bool dirty_tail_ = false;  // a failed Append may have left bytes after end_ (only while broken_)
  bool dir_unsynced_ = false;  // Create renamed the file but could not fsync the directory
  Status broken_;            // latched: a repair failed; every Append returns it

  int test_fail_errno_ = 0;
  size_t test_fail_written_ = 0;
  bool test_fail_repair_ = false;
};

}  // namespace hoard
