// File: common/status.h
//
// Status is the outcome of an operation: OK, or one of a few codes with a
// human-readable message. Result<T> (common/result.h) carries a value or a
// Status. Every fallible hoard function returns one of the two; hoard code does
// not throw. Third-party exceptions (msgpack, cppzmq) are caught at the call
// site and turned into a Status.
//
// The codes are few on purpose, and each says what the caller should do next:
//
//   kInvalidArgument  The request itself is wrong (malformed message, bad URL,
//                     bad name). Retrying the same request fails again.
//   kNotFound         The named thing (dataset, file, chunk, node) does not
//                     exist. Not retryable as is.
//   kAlreadyExists    Creating something whose name is taken. Not retryable.
//   kUnavailable      A peer, the coordinator or the origin did not answer in
//                     time or refused the connection. Retry the call, against
//                     another copy (a replica, then the origin) if there is one.
//   kNoSpace          The chunk store is at its capacity limit or the disk is
//                     full. Serve the read without caching; free space to retry.
//   kCorruption       Stored bytes failed their checksum. Drop the copy and
//                     fetch it again from another source.
//   kIoError          A local or origin I/O error that is not a timeout.
//   kStale            The caller acted on an out-of-date view (placement epoch,
//                     dataset version, changed origin file). Refresh the view;
//                     the same request against the old view never succeeds.
//   kInternal         A broken invariant: a bug in hoard.
//   kNotEmpty         Removing or replacing a directory that has entries
//                     (the checkpoint namespace). Not retryable as is.
//   kIsDirectory      A file operation named a directory, or a directory was
//                     would replace a file. Not retryable as is.
//   kNotDirectory     A directory operation named a file, or a path went
//                     through a file. The last three exist because the
//                     writable checkpoint namespace must give POSIX's errors.
//   kPermissionDenied The caller's key may not make this request (it needs
//                     the admin key: proto/access.h). Not retryable with the
//                     same key.
//   kNotLeader        The coordinator asked is a standby (issue 32: several
//                     coordinators, one leads). The message is the leader's
//                     endpoint, empty while none is elected; ask that one, or
//                     retry shortly. proto::LeaderClient does both, so callers
//                     above it see this code only when no leader was found in
//                     time (LeaderClient::Options::failover_wait).
//
// errno and Code meet in one table, in both directions (CodeFromErrno,
// ErrnoFromCode below): every errno a system call or libnfs gives becomes a
// Status through Status::FromErrno, and the FUSE edge (common/errno.h) turns a
// Status back into the errno the kernel gets. Code that means something more
// specific by an errno in its context (an origin that treats a path through a
// file as "no such path") re-codes the Status, not the errno, so that no
// second errno table can drift from this one.
//
// Thread-safety: a Status is a value; distinct objects may be used from
// different threads without synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hoard {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kUnavailable = 4,
  kNoSpace = 5,
  kCorruption = 6,
  kIoError = 7,
  kStale = 8,
  kInternal = 9,
  kNotEmpty = 10,
  kIsDirectory = 11,
  kNotDirectory = 12,
  kPermissionDenied = 13,
  kNotLeader = 14,
};

// Returns the code's name, e.g. "Unavailable"; "Unknown" for values that are
// not a Code (a wire peer may send anything).
std::string_view CodeName(Code code);

// Returns the code for a wire value, kInternal for values that are not a Code.
Code CodeFromWire(uint32_t value);

// The code for an errno (positive; libnfs's negative returns are negated by
// the caller). The whole table:
//   ENOENT                              -> kNotFound
//   EINVAL, ENAMETOOLONG                -> kInvalidArgument
//   EEXIST                              -> kAlreadyExists
//   ENOSPC, EDQUOT                      -> kNoSpace
//   ENOTEMPTY                           -> kNotEmpty
//   EISDIR                              -> kIsDirectory
//   ENOTDIR, ELOOP                      -> kNotDirectory
//   ESTALE                              -> kStale
//   ETIMEDOUT, ECONNREFUSED, EHOSTUNREACH, EAGAIN (= EWOULDBLOCK)
//                                       -> kUnavailable
//   anything else (EIO, EACCES, EPERM, EROFS, ...) -> kIoError
// ELOOP is kNotDirectory because hoard never follows a symlink (O_NOFOLLOW),
// so ELOOP means a symlink stood where the path needed a directory; a caller
// that opened the last component with O_NOFOLLOW knows ELOOP means "this is a
// symlink" and says so itself. ESTALE is kStale: a file handle outlived the
// file (replaced at the NFS origin), and readers must fail rather than mix
// versions. EAGAIN is kUnavailable: NFS3ERR_JUKEBOX and a busy lock both ask
// to come back later. EACCES/EPERM/EROFS stay kIoError, not
// kPermissionDenied, which is about hoard's own keys; callers that tell them
// apart (checkpoint/drain_health.cc) read the strerror text FromErrno keeps.
Code CodeFromErrno(int err);

// The errno the kernel gets for a code; only the FUSE edge uses it
// (ToErrno, common/errno.h). 0 for kOk. Each code that CodeFromErrno gives for some
// errno comes back as that errno (ENOENT, EINVAL, EEXIST, ENOSPC, ENOTEMPTY,
// EISDIR, ENOTDIR, EIO), kPermissionDenied as EACCES; kUnavailable,
// kNotLeader, kCorruption, kStale and kInternal are EIO: the application
// cannot act on the difference. kNotLeader in particular is kUnavailable's
// errno because that is what it means to the application: the client follows
// the leader itself, so one that reaches the FUSE edge found no coordinator
// leading within its wait, exactly as if the one coordinator were down. kStale in particular is not ESTALE: the file changed at the
// origin under the dataset's pinned version, so the reader must simply fail,
// and on ESTALE the kernel would look the path up again (retry_estale) only to
// reach the same pinned version.
int ErrnoFromCode(Code code);

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
  static Status NoSpace(std::string msg) { return {Code::kNoSpace, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status Stale(std::string msg) { return {Code::kStale, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }
  static Status NotEmpty(std::string msg) { return {Code::kNotEmpty, std::move(msg)}; }
  static Status IsDirectory(std::string msg) { return {Code::kIsDirectory, std::move(msg)}; }
  static Status NotDirectory(std::string msg) { return {Code::kNotDirectory, std::move(msg)}; }
  static Status PermissionDenied(std::string msg) { return {Code::kPermissionDenied, std::move(msg)}; }
  // `leader`: the leader's endpoint, "" while none is elected.
  static Status NotLeader(std::string leader) { return {Code::kNotLeader, std::move(leader)}; }
  // An error from a failed system call or libnfs call: "CONTEXT:
  // strerror(err)", coded by CodeFromErrno.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OK", or "Unavailable: node2 did not answer within 500 ms".
  std::string ToString() const;

  // The same code with "context: " put in front of the message, so an error
  // keeps its cause as it travels up ("warm imagenet: read a/b.jpg: ...").
  Status Annotate(std::string_view context) const;

  bool operator==(const Status& other) const = default;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Propagates a non-OK Status to the caller.
#define HOARD_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::hoard::Status hoard_status_ = (expr);    \
    if (!hoard_status_.ok()) return hoard_status_; \
  } while (0)

}  // namespace hoard
