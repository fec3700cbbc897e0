#include "common/file_journal.h"

#include <cstdio>

#include "common/file_util.h"

namespace hoard {

FileJournal::FileJournal(std::string log_path, std::string snapshot_path)
    : log_path_(std::move(log_path)), snapshot_path_(std::move(snapshot_path)) {}

Result<Journal::Loaded> FileJournal::Open(const SnapshotSeqFn& snapshot_seq) {
  log_.reset();
  HOARD_RETURN_IF_ERROR(MakeDirs(DirName(log_path_)));
  HOARD_RETURN_IF_ERROR(MakeDirs(DirName(snapshot_path_)));
  // Leftovers of a snapshot or log replacement cut short; never read.
  (void)std::remove((snapshot_path_ + ".tmp").c_str());
  (void)std::remove((log_path_ + ".tmp").c_str());

  Loaded loaded;
  // A snapshot file that exists is the owner's to judge, even an empty one.
  if (Result<std::string> bytes = ReadFile(snapshot_path_); bytes.ok()) {
    HOARD_ASSIGN_OR_RETURN(loaded.snapshot_seq, snapshot_seq(*bytes));
    loaded.snapshot = std::move(*bytes);
  } else if (bytes.status().code() != Code::kNotFound) {
    return bytes.status();
  }
  const uint64_t snap = loaded.snapshot_seq;

  // The base is in the log's header, known only once it is open: keep every
  // record, and drop those the snapshot covers below.
  std::vector<std::string> records;
  std::string cut;
  Result<StateLog> log = StateLog::Open(
      log_path_,
      [&](std::string_view payload, uint64_t) {
        records.emplace_back(payload);
        return Status::Ok();
      },
      &cut);
  if (!log.ok()) {
    if (log.status().code() != Code::kNotFound) return log.status();
    if (snap > 0) {
      loaded.repaired.push_back("no log " + log_path_ + ": starting from the snapshot alone (sequence " +
                                std::to_string(snap) + "); changes saved after it, if any, are lost");
    }
    HOARD_ASSIGN_OR_RETURN(StateLog fresh, StateLog::Create(log_path_, snap));
    log_.emplace(std::move(fresh));
    return loaded;
  }
  const uint64_t base = log->base_seq();
  if (base > snap) {
    return Status::Corruption("state log " + log_path_ + " continues from sequence " + std::to_string(base) +
                              " but the snapshot " + snapshot_path_ + " is at " + std::to_string(snap) +
                              ": the changes between are missing");
  }
  if (!cut.empty()) loaded.repaired.push_back(std::move(cut));
  const uint64_t covered = snap - base;  // records of the log the snapshot includes (base <= snap: no wrap)
  if (base < snap && covered >= log->records()) {
    // The snapshot covers all of it: a crash came between the snapshot and
    // the log's replacement. Finish that replacement now.
    HOARD_ASSIGN_OR_RETURN(StateLog fresh, StateLog::Create(log_path_, snap));
    log_.emplace(std::move(fresh));
    loaded.repaired.push_back("finished an interrupted snapshot: replaced " + log_path_ +
                              ", whose records up to sequence " + std::to_string(base + log->records()) +
                              " the snapshot includes");
    return loaded;
  }
  for (uint64_t i = covered; i < records.size(); ++i) loaded.records.push_back(std::move(records[i]));
  log_.emplace(std::move(*log));
  return loaded;
}

Status FileJournal::Append(std::string_view record) {
  if (!log_) return Status::Internal("FileJournal::Append before a successful Open");
  return log_->Append(record);
}

Status FileJournal::WriteSnapshot(std::string_view snapshot) {
  if (!log_) return Status::Internal("FileJournal::WriteSnapshot before a successful Open");
  const uint64_t at = seq();
  HOARD_RETURN_IF_ERROR(WriteFileAtomic(snapshot_path_, snapshot));
  // Only once the snapshot is durable may the records it covers go.
  HOARD_ASSIGN_OR_RETURN(StateLog fresh, StateLog::Create(log_path_, at));
  log_.emplace(std::move(fresh));
  return Status::Ok();
}

uint64_t FileJournal::seq() const { return log_ ? log_->base_seq() + log_->records() : 0; }

uint64_t FileJournal::records_since_snapshot() const { return log_ ? log_->records() : 0; }

uint64_t FileJournal::bytes_since_snapshot() const { return log_ ? log_->bytes() : 0; }

Result<Journal::Loaded> FileJournal::Follow(std::chrono::milliseconds) {
  return Status::InvalidArgument("a file journal (" + log_path_ + ") has one writer and no followers");
}

std::shared_ptr<Journal> JournalOrFile(std::shared_ptr<Journal> given, const std::string& what, std::string log_path,
                                       std::string snapshot_path, std::string* log_name, std::string* snapshot_name) {
  if (given) {
    *log_name = what;
    *snapshot_name = "the snapshot of " + what;
    return given;
  }
  *log_name = log_path;
  *snapshot_name = snapshot_path;
  return std::make_shared<FileJournal>(std::move(log_path), std::move(snapshot_path));
}

}  // namespace hoard
