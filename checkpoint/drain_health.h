// File: checkpoint/drain_health.h
//
// DrainHealth is the coordinator's memory of what keeps checkpoints from
// reaching the checkpoint origin (issue 28), so that an operator sees it in
// `hoard checkpoint status|ls`, `hoard status` and the metrics instead of
// only in the logs:
//
//   - per file, the last failed attempt to get its committed generation to P
//     (a node's upload, reported by CkptDrained, or the publisher's rename)
//     and since when its run of failures lasts (proto::CkptDrainError);
//   - per party that writes to the origin (each node's drainer, and the
//     coordinator's publisher, named ""), whether its last origin call failed
//     and since when (proto::CkptOriginHealth);
//   - uploads that are never published: a node reports an upload done, and
//     the publisher does not find it on the origin it writes to (they see
//     different origins, e.g. a file system mounted anew over a local origin
//     under a running daemon). A generation uploaded more than
//     kMaxUnpublishedUploads times without a publish is a drain loop: it is
//     logged with the reason, counted, and shown as the file's error.
//
// Logging is by transitions, so a full origin does not flood the log: a
// warning when a party's origin calls start failing or fail differently, an
// info line when they work again, and at most one warning a minute about
// drain loops (naming how many more were not logged).
//
// A file's error ends when its generation reaches P or the file leaves the
// namespace (Forget), or when an upload of it succeeds, unless its uploads
// are being lost: that error ends only at P. A party's failure ends with its
// next successful origin call; a party that stopped trying (a node that went
// down) counts as failing for kStaleAfterMs after its last failure, no
// longer.
//
// Not durable, on purpose: after a coordinator restart the next attempt
// (within the drainer's backoff, 10 s at most) records a fault again, and its
// "since" starts then.
//
// Time is the caller's wall clock in milliseconds (CkptTable's, injectable
// in tests).
//
// Thread-safety: none. CkptTable owns it and calls it with its mutex held.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"
#include "proto/messages.h"

namespace hoard {

class DrainHealth {
 public:
  // More uploads of one generation than this, none published: a drain loop.
  static constexpr uint32_t kMaxUnpublishedUploads = 3;
  // A failing party that has not called the origin since counts this long.
  static constexpr int64_t kStaleAfterMs = 60'000;
  // Drain loops are logged at most this often.
  static constexpr int64_t kLoopWarnEveryMs = 60'000;

  explicit DrainHealth(std::shared_ptr<spdlog::logger> logger) : logger_(std::move(logger)) {}

  // What went wrong, in one word (proto::CkptDrainError::reason): "no_space",
  // "permission" (EACCES, EPERM, EROFS: origins report them as kIoError with
  // strerror's text), "unreachable", "not_found", "io_error",
  // "chunks_missing" (not `at_origin`: no holder had a chunk), "other".
  static std::string Reason(Code code, std::string_view message, bool at_origin);

  // ---- outcomes ----
  // A node's upload of generation `gen` of file `id` was reported done.
  void UploadOk(uint64_t id, uint64_t gen, const std::string& path, const std::string& node, int64_t now_ms);
  // ... or failed with `error` (Status::ToString(), as CkptDrained carries
  // it: the code is its "CodeName: " prefix).
  void UploadFailed(uint64_t id, uint64_t gen, const std::string& path, const std::string& node,
                    const std::string& error, bool at_origin, int64_t now_ms);
  // An origin call of the publisher worked.
  void PublisherOk(int64_t now_ms);
  // An operation of the publisher failed (`id`: the file of a publish, 0 for
  // other operations); `for_good`: it is not retried.
  void PublisherFailed(uint64_t id, uint64_t gen, const std::string& path, const Status& s, bool for_good,
                       int64_t now_ms);
  // A publish found nothing at `tmp`, the upload `node` reported done.
  void UploadLost(uint64_t id, uint64_t gen, const std::string& path, const std::string& tmp,
                  const std::string& node, int64_t now_ms);
  // The file reached P, or left the namespace.
  void Forget(uint64_t id);

  // ---- views ----
  const proto::CkptDrainError* FileError(uint64_t id) const;  // nullptr: none
  const std::map<uint64_t, proto::CkptDrainError>& file_errors() const { return files_; }  // by id
  proto::CkptOriginHealth Origin(int64_t now_ms) const;       // `source` left empty
  size_t failing_files() const { return files_.size(); }
  size_t looping_files() const;
  uint64_t lost_uploads_total() const { return lost_uploads_total_; }
  uint64_t failures_total() const { return failures_total_; }

 private:
  struct Party {
    bool failing = false;
    proto::CkptDrainError last;  // code, reason, error, since, last
  };
  struct Uploads {
    uint64_t gen = 0;
    uint32_t done = 0;  // reported done
    uint32_t lost = 0;  // of those, not found by the publisher
  };
  static bool Looping(const Uploads& u) { return u.done > kMaxUnpublishedUploads && u.lost > 0; }
  void PartyOk(const std::string& who, int64_t now_ms);
  void PartyFailed(const std::string& who, Code code, const std::string& reason, const std::string& error,
                   int64_t now_ms);
  void FileFailed(uint64_t id, uint64_t gen, const std::string& path, const std::string& node, Code code,
                  const std::string& reason, const std::string& error, int64_t now_ms);
  static std::string Who(const std::string& party) { return party.empty() ? "the coordinator" : party; }

  std::shared_ptr<spdlog::logger> logger_;
  std::map<uint64_t, proto::CkptDrainError> files_;  // by id: files whose last attempt failed
  std::map<uint64_t, Uploads> uploads_;              // by id: uploads of the current generation
  std::map<std::string, Party> parties_;             // by node; "" the publisher
  uint64_t lost_uploads_total_ = 0;
  uint64_t failures_total_ = 0;
  int64_t loop_warned_ms_ = 0;       // when a loop was last logged
  uint64_t loop_warns_skipped_ = 0;  // loops not logged since
};

}  // namespace hoard
