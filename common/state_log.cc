#include "common/state_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/hash.h"

namespace hoard {
namespace {

constexpr char kMagic[8] = {'H', 'R', 'D', 'S', 'T', 'L', 'O', 'G'};
constexpr uint32_t kFormat = 1;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

uint32_t Checksum32(const char* data, size_t len) { return static_cast<uint32_t>(Checksum64(data, len)); }

// The header's checksum covers its other 20 bytes: magic, format, base_seq.
uint32_t HeaderChecksum(const char* h) {
  char covered[20];
  std::memcpy(covered, h, 12);
  std::memcpy(covered + 12, h + 16, 8);
  return Checksum32(covered, sizeof covered);
}

std::string EncodeHeader(uint64_t base_seq) {
  std::string h(StateLog::kHeaderBytes, '\0');
  std::memcpy(h.data(), kMagic, sizeof kMagic);
  PutU32(h.data() + 8, kFormat);
  PutU64(h.data() + 16, base_seq);
  PutU32(h.data() + 12, HeaderChecksum(h.data()));
  return h;
}

// Why the record at `pos` is not valid, or empty if it is; `*next` gets the
// offset just past it when it is. With `budget`, a record whose checksum
// would cost more than *budget bytes is not checked ("budget" is returned);
// what is checked is taken off *budget.
std::string CheckRecord(std::string_view file, uint64_t pos, uint64_t* next, uint64_t* budget = nullptr) {
  const uint64_t left = file.size() - pos;
  if (left < StateLog::kRecordHeaderBytes) return "incomplete record header";
  const uint32_t len = GetU32(file.data() + pos);
  if (len == 0 || len > StateLog::kMaxRecordBytes) return "impossible length " + std::to_string(len);
  if (left - StateLog::kRecordHeaderBytes < len) return "incomplete record";
  if (budget != nullptr) {
    if (*budget < len) return "budget";
    *budget -= len;
  }
  const char* payload = file.data() + pos + StateLog::kRecordHeaderBytes;
  if (Checksum32(payload, len) != GetU32(file.data() + pos + 4)) return "checksum mismatch";
  *next = pos + StateLog::kRecordHeaderBytes + len;
  return "";
}

// Checksummed bytes FindValidRecord may spend: a fraction of a second.
constexpr uint64_t kMaxScanBytes = 1ull << 30;
constexpr uint64_t kScanGaveUp = ~0ull;

// The offset of a valid record starting anywhere in [from, end of file), 0 if
// there is none, or kScanGaveUp if telling would cost more than
// kMaxScanBytes of checksums. Only lengths that fit get a checksum computed,
// so a torn tail (usually less than one record) is scanned quickly; but
// damage in which every offset claims a long record that fits would cost
// (its size)^2 bytes of checksums: hours for a few MB, a start that hangs.
uint64_t FindValidRecord(std::string_view file, uint64_t from) {
  uint64_t next, budget = kMaxScanBytes;
  for (uint64_t pos = from; pos + StateLog::kRecordHeaderBytes < file.size(); ++pos) {
    const std::string why = CheckRecord(file, pos, &next, &budget);
    if (why.empty()) return pos;
    if (why == "budget") return kScanGaveUp;
  }
  return 0;
}

}  // namespace

Result<StateLog> StateLog::Open(const std::string& path, const ReplayFn& replay, std::string* cut) {
  if (cut) cut->clear();
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  std::string file(static_cast<size_t>(st.st_size), '\0');
  HOARD_RETURN_IF_ERROR(PreadAll(fd.get(), file.data(), file.size(), 0).Annotate("read " + path));

  if (file.size() < kHeaderBytes || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0 ||
      GetU32(file.data() + 12) != HeaderChecksum(file.data())) {
    return Status::Corruption("state log " + path + " has no valid header");
  }
  if (const uint32_t format = GetU32(file.data() + 8); format != kFormat) {
    return Status::Corruption("state log " + path + " has format " + std::to_string(format) +
                              ", this coordinator reads format " + std::to_string(kFormat));
  }
  const uint64_t base_seq = GetU64(file.data() + 16);

  uint64_t pos = kHeaderBytes, records = 0;
  while (pos < file.size()) {
    uint64_t next = 0;
    const std::string why = CheckRecord(file, pos, &next);
    if (why.empty()) {
      const char* payload = file.data() + pos + kRecordHeaderBytes;
      HOARD_RETURN_IF_ERROR(replay(std::string_view(payload, next - pos - kRecordHeaderBytes), pos));
      pos = next;
      ++records;
      continue;
    }
    // A commit is one record written at the end, so only the last record can
    // be torn. Anything valid after a bad record means the bad one was
    // acknowledged once and has been damaged since: never cut that.
    const uint64_t valid = FindValidRecord(file, pos + 1);
    if (valid == kScanGaveUp) {
      return Status::Corruption("state log " + path + ": the record at offset " + std::to_string(pos) +
                                " is damaged (" + why + ") and the " + std::to_string(file.size() - pos) +
                                " bytes after it are too costly to search for valid records; it is not "
                                "cut, since they may hold acknowledged ones");
    }
    if (valid != 0) {
      return Status::Corruption("state log " + path + ": the record at offset " + std::to_string(pos) +
                                " is damaged (" + why + ") but a valid record follows at offset " +
                                std::to_string(valid));
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(pos)) != 0) {
      return Status::FromErrno(errno, "cut the torn tail of " + path);
    }
    if (::fdatasync(fd.get()) != 0) return Status::FromErrno(errno, "fdatasync " + path);
    if (cut) {
      *cut = "cut a torn last record (" + why + ", " + std::to_string(file.size() - pos) + " bytes at offset " +
             std::to_string(pos) + ") from " + path + ": a commit that was never acknowledged";
    }
    break;
  }
  return StateLog(path, std::move(fd), base_seq, pos, records);
}

Result<StateLog> StateLog::Create(const std::string& path, uint64_t base_seq) {
  const std::string tmp = path + ".tmp";
  const std::string header = EncodeHeader(base_seq);
  // The fd stays open across the rename, so the new log is appended to
  // without opening it again (which could fail after the old one is gone).
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp);
  Status s = PwriteAll(fd.get(), header.data(), header.size(), 0).Annotate(tmp);
  if (s.ok() && ::fsync(fd.get()) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::FromErrno(errno, "rename " + tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  StateLog log(path, std::move(fd), base_seq, kHeaderBytes, 0);
  log.dir_unsynced_ = !SyncDir(DirName(path)).ok();
  return log;
}

void StateLog::Repair() {
  if (dirty_tail_) {
    if (test_fail_repair_) {
      test_fail_repair_ = false;
      broken_ = Status::IoError("cut state log " + path_ + " back after a failed write: injected failure");
    } else if (::ftruncate(fd_.get(), static_cast<off_t>(end_)) != 0 || ::fdatasync(fd_.get()) != 0) {
      broken_ = Status::FromErrno(errno, "cut state log " + path_ + " back to " + std::to_string(end_) +
                                             " bytes after a failed write");
    }
    if (!broken_.ok()) return;
    dirty_tail_ = false;
  }
  if (dir_unsynced_) {
    if (Status s = SyncDir(DirName(path_)); !s.ok()) {
      broken_ = s.Annotate("make the new state log " + path_ + " durable");
      return;
    }
    dir_unsynced_ = false;
  }
}

Status StateLog::Append(std::string_view payload) {
  if (broken_.ok() && (dirty_tail_ || dir_unsynced_)) Repair();
  if (!broken_.ok()) {
    return broken_.Annotate("the state log is broken since an earlier failure and no change can be saved "
                            "until the coordinator restarts (which recovers it)");
  }
  if (payload.empty() || payload.size() > kMaxRecordBytes) {
    return Status::InvalidArgument("a state log record must have 1 to " + std::to_string(kMaxRecordBytes) +
                                   " bytes, not " + std::to_string(payload.size()));
  }

  std::string record(kRecordHeaderBytes + payload.size(), '\0');
  PutU32(record.data(), static_cast<uint32_t>(payload.size()));
  PutU32(record.data() + 4, Checksum32(payload.data(), payload.size()));
  std::memcpy(record.data() + kRecordHeaderBytes, payload.data(), payload.size());

  size_t to_write = record.size();
  int injected = 0;
  if (test_fail_errno_ != 0) {
    to_write = std::min(to_write, test_fail_written_);
    injected = std::exchange(test_fail_errno_, 0);
  }
  Status s = PwriteAll(fd_.get(), record.data(), to_write, static_cast<off_t>(end_)).Annotate(path_);
  if (s.ok() && injected != 0) s = Status::FromErrno(injected, "append to " + path_ + " (injected)");
  if (s.ok() && ::fdatasync(fd_.get()) != 0) s = Status::FromErrno(errno, "fdatasync " + path_);
  if (!s.ok()) {
    // Cut whatever reached the file now, so that a failed Append leaves
    // nothing that a restart would replay, and no later record follows it.
    dirty_tail_ = true;
    Repair();
    return s;
  }
  end_ += record.size();
  ++records_;
  return Status::Ok();
}

void StateLog::TEST_FailNextAppend(int err, size_t written, bool fail_repair) {
  test_fail_errno_ = err;
  test_fail_written_ = written;
  test_fail_repair_ = fail_repair;
}

}  // namespace hoard
