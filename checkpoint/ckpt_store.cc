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

CkptStore::CkptStore(std::string dir, Options options) : options_(std::move(options)) {
  journal_ = JournalOrFile(std::move(options_.journal), "the checkpoint journal", JoinPath(dir, "journal.log"),
                           JoinPath(dir, "snapshot.msgpack"), &log_name_, &snapshot_name_);
}

Result<CkptStore::Loaded> CkptStore::Open(std::string* cut) {
  if (cut) cut->clear();
  Loaded loaded;
  // The snapshot is decoded once, when the journal asks for its sequence
  // number (the number is inside it); a journal that keeps the number apart
  // may not ask, and it is decoded below.
  bool decoded = false;
  auto load = [&](std::string_view bytes) -> Result<uint64_t> {
    decoded = true;
    HOARD_RETURN_IF_ERROR(Decode(bytes, &loaded.snapshot, snapshot_name_));
    return loaded.snapshot.seq;
  };
  HOARD_ASSIGN_OR_RETURN(Journal::Loaded history, journal_->Open(load));
  if (!decoded && !history.snapshot.empty()) HOARD_RETURN_IF_ERROR(load(history.snapshot).status());
  if (cut) {
    for (const std::string& line : history.repaired) *cut += (cut->empty() ? "" : "; ") + line;
  }
  loaded.records.reserve(history.records.size());
  for (size_t i = 0; i < history.records.size(); ++i) {
    const uint64_t seq = history.snapshot_seq + 1 + i;
    CkptRecord r;
    HOARD_RETURN_IF_ERROR(Decode(history.records[i], &r, log_name_ + " record " + std::to_string(seq)));
    std::string().swap(history.records[i]);  // the bytes are done with: keep one copy of the log in memory
    loaded.records.push_back(std::move(r));
  }
  return loaded;
}

Status CkptStore::Append(const CkptRecord& record) { return journal_->Append(PackState(record)); }

bool CkptStore::SnapshotDue() const { return journal_->records_since_snapshot() >= options_.snapshot_every_records; }

uint64_t CkptStore::seq() const { return journal_->seq(); }

Status CkptStore::WriteSnapshot(CkptSnapshot snapshot) {
  snapshot.seq = seq();
  return journal_->WriteSnapshot(PackState(snapshot));
}

}  // namespace hoard
