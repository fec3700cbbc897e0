#include "checkpoint/ckpt_store.h"

#include "common/file_util.h"
#include "common/msgpack_codec.h"

namespace hoard {
namespace {

template <typename T>
Status Decode(std::string_view bytes, T* out, const std::string& what) {
  try {
    UnpackState(bytes.data(), bytes.size(), out);
  } catch (const std::exception& e) {
    return Status::Corruption(what + " does not decode: " + e.what());
  }
  return Status::Ok();
}

}  // namespace

std::string CkptStore::JournalPath() const { return JoinPath(dir_, "journal.log"); }
std::string CkptStore::SnapshotPath() const { return JoinPath(dir_, "snapshot.msgpack"); }

Result<CkptStore::Loaded> CkptStore::Open(std::string* cut) {
  HOARD_RETURN_IF_ERROR(MakeDirs(dir_));
  Loaded loaded;
  if (Result<std::string> bytes = ReadFile(SnapshotPath()); bytes.ok()) {
    HOARD_RETURN_IF_ERROR(Decode(*bytes, &loaded.snapshot, SnapshotPath()));
  } else if (bytes.status().code() != Code::kNotFound) {
    return bytes.status();
  }
  const uint64_t snap_seq = loaded.snapshot.seq;
  std::vector<CkptRecord> records;
  Result<StateLog> log = StateLog::Open(
      JournalPath(),
      [&](std::string_view payload, uint64_t offset) -> Status {
        CkptRecord r;
        HOARD_RETURN_IF_ERROR(Decode(payload, &r, JournalPath() + " record at offset " + std::to_string(offset)));
        records.push_back(std::move(r));
        return Status::Ok();
      },
      cut);
  if (!log.ok() && log.status().code() == Code::kNotFound) log = StateLog::Create(JournalPath(), snap_seq);
  if (!log.ok()) return log.status();
  const uint64_t base = log->base_seq();
  if (base > snap_seq) {
    return Status::Corruption(JournalPath() + " starts after record " + std::to_string(base) + " but " +
                              SnapshotPath() + " ends at record " + std::to_string(snap_seq) +
                              ": acknowledged changes are missing");
  }
  // Records the snapshot already includes (a crash between writing it and
  // replacing the journal) are skipped by sequence number.
  for (uint64_t i = 0; i < records.size(); ++i) {
    if (base + i + 1 > snap_seq) loaded.records.push_back(std::move(records[i]));
  }
  log_.emplace(std::move(*log));
  return loaded;
}

Status CkptStore::Append(const CkptRecord& record) { return log_->Append(PackState(record)); }

bool CkptStore::SnapshotDue() const { return log_->records() >= options_.snapshot_every_records; }

uint64_t CkptStore::seq() const { return log_->base_seq() + log_->records(); }

Status CkptStore::WriteSnapshot(CkptSnapshot snapshot) {
  snapshot.seq = seq();
  HOARD_RETURN_IF_ERROR(WriteFileAtomic(SnapshotPath(), PackState(snapshot)));
  HOARD_ASSIGN_OR_RETURN(StateLog fresh, StateLog::Create(JournalPath(), snapshot.seq));
  log_.emplace(std::move(fresh));
  return Status::Ok();
}

}  // namespace hoard
