// File: proto/ckpt_messages.h
//
// The checkpoint namespace's messages (issue 6), part of proto/messages.h
// (which includes this file after MsgType; the wire rules there apply). Three conversations:
//
//   mount -> coordinator   the namespace: lookups, listings, create, mkdir,
//                          rename, unlink, rmdir, and Commit, which makes a
//                          file's new bytes the committed generation;
//   CLI -> coordinator     status and flush of a job's checkpoints;
//   node -> coordinator    drain work: which files this node uploads to the
//                          checkpoint origin, which replicas it must hold
//                          (rebuild) and which it may delete (eviction);
//   mount/node -> node     PutCkptChunk (a replica, fsynced before the reply)
//                          and GetCkptChunk (restore, rebuild, drain).
//
// Paths are relative to MOUNT/checkpoints, '/'-separated, with no leading
// '/', no "." or ".." components and no NUL ("" is checkpoints/ itself); the
// first component is the job. A receiver checks every path and name it is
// given (IsSafeCkptPath) and answers kInvalidArgument otherwise.
//
// A file's identity is its id (stable across renames); its bytes are those of
// its committed generation `gen`, split into chunks of `chunk_size`, each with
// an XXH3 checksum (common/hash.h Checksum64). Copies of committed bytes:
//   - the writer's whole-file copy (`writer`, the L copy), and
//   - per chunk, `replicas[i]`: the other nodes that stored chunk i of this
//     generation (PutCkptChunk) before the commit was acknowledged.
// Level R means every chunk is on `replicas_wanted` distinct nodes counting
// the writer; P means the generation is at its path on the checkpoint origin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "proto/ordinals.h"

// Included by proto/messages.h only (it needs MsgType).

namespace hoard::proto {

// Durability of a file's committed generation (user.hoard.state shows the
// letter). Ordered: a higher level includes the lower ones' guarantees except
// that L and R copies may be evicted after P.
enum class CkptLevel : uint8_t {
  kNone = 0,  // created, nothing committed yet (reads see 0 bytes)
  kL = 1,     // on the writer's disk
  kR = 2,     // on replicas_wanted nodes' disks
  kP = 3,     // on the checkpoint origin (NFS), at its path
};
const char* CkptLevelName(CkptLevel level);  // "-", "L", "R", "P"

// Bounds on a file's chunking that every process checks what it is sent
// against: K of the cluster map, and a chunk small enough to hold in memory
// (a replica holder, the drainer and a mount each buffer whole chunks).
inline constexpr uint32_t kMaxCkptReplicas = 16;
inline constexpr uint64_t kMaxCkptChunkSize = 256u << 20;

// The number of chunks of a `size`-byte file in `chunk_size`-byte chunks, or
// nullopt for a chunking no writer makes (a chunk size of 0 for a non-empty
// file or above kMaxCkptChunkSize, a size above INT64_MAX). Computed without
// overflow: a commit must not pass as 0 chunks by wrapping around.
std::optional<uint64_t> CkptChunkCount(uint64_t size, uint64_t chunk_size);

// True when `path` is a valid checkpoint path (see the top); "" is valid.
bool IsSafeCkptPath(std::string_view path);
// Limits the mount answers with ENAMETOOLONG: a name's bytes (POSIX's
// NAME_MAX), a path's bytes below MOUNT/checkpoints (the kernel bounds each
// path it is given by PATH_MAX, but relative paths reach deeper: this is
// what a tree may hold), and a symlink target's (PATH_MAX - 1).
inline constexpr size_t kMaxCkptNameBytes = 255;
inline constexpr size_t kMaxCkptPathBytes = 65535;
inline constexpr size_t kMaxCkptTargetBytes = 4095;

// How strongly `node` is asked to hold chunk `index` of checkpoint file `id`:
// the commit (checkpoint/ckpt_commit.h) and a new holder after a loss
// (CkptTable::Rereplicate) both take nodes highest score first. Rendezvous
// hashing: the copies of a file spread over the cluster, and a node that
// joins or leaves changes few choices.
uint64_t CkptHolderScore(uint64_t id, uint32_t index, std::string_view node);

// A list of ids sent as their count and their ordinals (proto/ordinals.h)
// in one bin, not as an array: the decoder caps an array at 65,536 entries,
// and a cluster keeps more checkpoint files than that. Sent sorted, without
// duplicates.
struct IdList : std::vector<uint64_t> {
  using std::vector<uint64_t>::vector;
};

struct CkptEntry;
// The nodes with chunk `index` of `e`'s committed generation: its writer
// (unless evicted), then the chunk's replica holders.
std::vector<std::string> CkptChunkHolders(const CkptEntry& e, uint32_t index);
// The generation whose replica files hold chunk `index` of `e` (a commit
// that left a chunk unchanged reuses the earlier generation's copies:
// CkptEntry::chunk_gens).
uint64_t CkptChunkGen(const CkptEntry& e, uint32_t index);
// The level `e` is at now, for users (user.hoard.state, `hoard checkpoint`):
// R only while every chunk has replicas_wanted holders that `counts` (up,
// and holding the chunk); a file committed at R shows L while it has fewer.
// Other levels are shown as committed.
CkptLevel CkptShownLevel(const CkptEntry& e,
                         const std::function<bool(uint32_t index, const std::string& node)>& counts);

struct CkptEntry {
  std::string path;
  uint64_t id = 0;  // unique, never reused; stable across renames
  bool is_dir = false;
  uint32_t mode = 0;  // permission bits only (07777)
  int64_t mtime_ns = 0;
  // The committed generation (files only).
  uint64_t gen = 0;  // 0: never committed
  uint64_t size = 0;
  uint8_t level = 0;  // CkptLevel
  uint64_t chunk_size = 0;
  std::vector<uint64_t> checksums;                  // one per chunk
  std::string writer;                               // node with the whole file; "" once evicted
  std::vector<std::vector<std::string>> replicas;   // per chunk: other nodes with it
  uint32_t replicas_wanted = 0;                     // K when committed
  int64_t committed_unix_ms = 0;
  int64_t drained_unix_ms = 0;  // when it reached P (0: not yet)
  // Owner and group: the creator's (its FUSE request's uid, and gid or the
  // parent directory's when that has the set-group-ID bit), then chown's.
  uint32_t uid = 0;
  uint32_t gid = 0;
  // POSIX's other two times (0 in entries from before they were kept: then
  // mtime stands in). ctime changes with every change of the entry.
  int64_t atime_ns = 0;
  int64_t ctime_ns = 0;
  // Links: 1 for files and symlinks, 2 + subdirectories for a directory.
  // Computed by the coordinator for replies, never stored.
  uint32_t nlink = 0;
  bool is_symlink = false;
  std::string target;  // a symlink's target (up to kMaxCkptTargetBytes bytes)
  // Per chunk of the committed generation, the generation whose replica
  // files (CKPT/chunks/<id>-<gen>-<index>-<checksum>) hold it: a chunk a
  // commit did not change keeps the copies of the generation that stored
  // it. Empty: every chunk is `gen`'s.
  std::vector<uint64_t> chunk_gens;
  MSGPACK_DEFINE_MAP(path, id, is_dir, mode, mtime_ns, gen, size, level, chunk_size, checksums, writer, replicas,
                     replicas_wanted, committed_unix_ms, drained_unix_ms, uid, gid, atime_ns, ctime_ns, nlink,
                     is_symlink, target, chunk_gens);
};

struct CkptEntryReply {
  CkptEntry entry;
  MSGPACK_DEFINE_MAP(entry);
};

// ---- mount -> coordinator -------------------------------------------------

struct CkptLookup {
  static constexpr MsgType kType = MsgType::kCkptLookup;
  using Reply = CkptEntryReply;
  std::string path;
  // An open for reading: the file's atime moves to now if it is not newer
  // than its mtime or ctime, or is a day old (relatime, Linux's default).
  bool touch_atime = false;
  MSGPACK_DEFINE_MAP(path, touch_atime);
};

struct CkptListReply {
  CkptEntry dir;
  std::vector<CkptEntry> children;  // sorted by name
  MSGPACK_DEFINE_MAP(dir, children);
};
struct CkptList {
  static constexpr MsgType kType = MsgType::kCkptList;
  using Reply = CkptListReply;
  std::string path;
  MSGPACK_DEFINE_MAP(path);
};

// Creates a file (level kNone), with is_dir a directory, or with a
// non-empty `target` a symlink to it. The parent must exist and be a
// directory. An existing path: kAlreadyExists. Owned by uid:gid (the mount
// applies the set-group-ID rule of the parent first).
struct CkptCreate {
  static constexpr MsgType kType = MsgType::kCkptCreate;
  using Reply = CkptEntryReply;
  std::string path;
  bool is_dir = false;
  uint32_t mode = 0644;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string target;
  bool retry = false;  // a resend (proto/message_types.h): an entry of this kind and owner is ours
  MSGPACK_DEFINE_MAP(path, is_dir, mode, uid, gid, target, retry);
};

struct CkptRenameReply {
  CkptEntry entry;  // the renamed entry at its new path
  MSGPACK_DEFINE_MAP(entry);
};
// POSIX rename: replaces an existing file, or an empty directory with a
// directory; `noreplace` refuses an existing target (kAlreadyExists).
struct CkptRename {
  static constexpr MsgType kType = MsgType::kCkptRename;
  using Reply = CkptRenameReply;
  std::string from;
  std::string to;
  bool noreplace = false;
  bool retry = false;  // a resend: `from` gone and `to` there is ours
  MSGPACK_DEFINE_MAP(from, to, noreplace, retry);
};

struct CkptRemoveReply {
  uint64_t id = 0;
  MSGPACK_DEFINE_MAP(id);
};
// Removes a file (is_dir false) or an empty directory (is_dir true).
struct CkptRemove {
  static constexpr MsgType kType = MsgType::kCkptRemove;
  using Reply = CkptRemoveReply;
  std::string path;
  bool is_dir = false;
  bool retry = false;  // a resend: the path gone is ours (reply id 0)
  MSGPACK_DEFINE_MAP(path, is_dir, retry);
};

// Makes new bytes of file `id` its committed generation `gen` (greater than
// the current one; kStale otherwise, or when the file was removed). The
// caller stored the whole file on `writer` and each chunk i on replicas[i].
//
// Reuse: a chunk the commit did not change (same index and checksum as the
// current generation's) names the current generation's copies instead of
// new ones: chunk_gens[i] is then the current generation's CkptChunkGen(i)
// and replicas[i] a subset of its holders. Anything else (a reuse of copies
// the current generation does not have, e.g. after another mount committed
// meanwhile) is kStale, and the caller commits again sending every chunk.
//
// `writing`: the committing mount still has the file open for writing (an
// fsync, or a close(2) whose release has not come yet): it is not drained
// until that mount's session (CkptSession) no longer lists it.
// `discard`: replica files of this generation that the writer sent while
// writing and the commit does not count (a chunk written again since); the
// coordinator has their holders delete them.
struct CkptReplicaRef {
  std::string node;  // the holder ("" in a CkptWorkReply: the asking node)
  uint64_t id = 0;
  uint64_t gen = 0;
  uint32_t index = 0;
  uint64_t checksum = 0;
  bool operator==(const CkptReplicaRef&) const = default;
  MSGPACK_DEFINE_MAP(node, id, gen, index, checksum);
};
struct CkptCommit {
  static constexpr MsgType kType = MsgType::kCkptCommit;
  using Reply = CkptEntryReply;
  uint64_t id = 0;
  uint64_t gen = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t mode = 0;  // 0: unchanged
  uint64_t chunk_size = 0;
  std::vector<uint64_t> checksums;
  std::string writer;
  std::vector<std::vector<std::string>> replicas;
  uint32_t replicas_wanted = 0;
  uint8_t level = 0;  // kL or kR: what the caller achieved
  int64_t ctime_ns = 0;  // 0: the coordinator's now
  std::vector<uint64_t> chunk_gens;  // empty: every chunk is new (`gen`)
  bool writing = false;
  std::vector<CkptReplicaRef> discard;
  uint64_t mount = 0;  // the committing mount's session id (CkptSession.mount)
  bool retry = false;  // a resend: generation `gen` already there with these bytes is ours
  MSGPACK_DEFINE_MAP(id, gen, size, mtime_ns, mode, chunk_size, checksums, writer, replicas, replicas_wanted,
                     level, ctime_ns, chunk_gens, writing, discard, mount, retry);
};

// chmod / utimens of an entry (truncate is a commit of new bytes), and
// `reopen`: a mount opens the (committed) file for writing. Were its copies
// released by retention (before or while it is written), nodes would evict
// the chunks sent for its next commit before that commit names them; so it
// is kept (in every node's keep_files) and not released until a commit of it
// reaches P (or, with no commit, for the coordinator's reopen hold).
// Every change but `reopen` also moves ctime to now. The mount checks
// POSIX's rules (only root changes the owner, ...) before it asks.
struct CkptSetAttr {
  static constexpr MsgType kType = MsgType::kCkptSetAttr;
  using Reply = CkptEntryReply;
  std::string path;
  // The entry the caller means (0: whatever `path` names): another entry at
  // the path (the one meant was renamed over, or removed) is kNotFound, so
  // that an fchmod or ftruncate through an old descriptor never changes the
  // file that took its name.
  uint64_t id = 0;
  bool set_mode = false;
  uint32_t mode = 0;
  bool set_mtime = false;
  int64_t mtime_ns = 0;
  bool reopen = false;
  bool set_uid = false;
  uint32_t uid = 0;
  bool set_gid = false;
  uint32_t gid = 0;
  bool set_atime = false;
  int64_t atime_ns = 0;
  MSGPACK_DEFINE_MAP(path, set_mode, mode, set_mtime, mtime_ns, reopen, set_uid, uid, set_gid, gid, set_atime,
                     atime_ns, id);
};

// ---- CLI -> coordinator ---------------------------------------------------

// Why a file is not reaching the checkpoint origin (checkpoint/drain_health.h
// keeps them, in the coordinator's memory only): the last failed attempt of a
// run of failures, and since when that run lasts. Shown by `hoard checkpoint
// status|ls`; since_unix_ms 0 means no error.
struct CkptDrainError {
  uint64_t id = 0;
  std::string path;
  uint64_t gen = 0;  // the generation of the last attempt
  uint8_t code = 0;  // hoard::Code of the last failure
  // A short word for what went wrong (DrainHealth::Reason): "no_space",
  // "permission", "unreachable", "upload_lost", "chunks_missing",
  // "not_found", "io_error", "failed_for_good", "other".
  std::string reason;
  std::string error;  // the last failure, as Status::ToString()
  std::string node;   // who failed: a node's drainer, or "" the coordinator's publisher
  int64_t since_unix_ms = 0;  // the first failure of the run
  int64_t last_unix_ms = 0;   // the last one
  uint32_t failures = 0;      // failed attempts in the run
  // Uploads of `gen` reported done that never got published (the publisher
  // did not find them on the origin it writes to).
  uint32_t lost_uploads = 0;
  MSGPACK_DEFINE_MAP(id, path, gen, code, reason, error, node, since_unix_ms, last_unix_ms, failures, lost_uploads);
};

// Whether the checkpoint origin takes what the cluster drains to it, as the
// coordinator saw it last: `failing` while some party's last origin call
// failed (a node's drainer, or the coordinator's publisher: node "") or
// uploads are being lost. `code`, `reason`, `error` are those of the most
// recent failure; since_unix_ms is when the longest-failing party started.
struct CkptOriginHealth {
  std::string source;  // the coordinator's --ckpt-origin
  bool failing = false;
  uint8_t code = 0;
  std::string reason;
  std::string error;
  std::vector<std::string> nodes;  // the failing parties ("" the coordinator)
  int64_t since_unix_ms = 0;
  int64_t last_unix_ms = 0;
  uint64_t failing_files = 0;  // files whose last drain attempt failed
  // Files whose current generation was uploaded more than 3 times without
  // being published: a drain loop (DrainHealth::kMaxUnpublishedUploads).
  uint64_t looping_files = 0;
  MSGPACK_DEFINE_MAP(source, failing, code, reason, error, nodes, since_unix_ms, last_unix_ms, failing_files,
                     looping_files);
};

struct CkptJobStatus {
  std::string job;
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::vector<uint64_t> files_by_level = std::vector<uint64_t>(4);  // indexed by CkptLevel
  uint64_t undrained_bytes = 0;               // committed, not yet P
  uint64_t undrained_files = 0;               // the files of undrained_bytes
  int64_t oldest_undrained_unix_ms = 0;       // 0: none
  uint64_t overdue_files = 0;                 // past the drain deadline
  uint64_t failing_files = 0;                 // files with a drain error
  CkptDrainError drain_error;                 // the job's longest-failing file's (since_unix_ms 0: none)
  MSGPACK_DEFINE_MAP(job, files, bytes, files_by_level, undrained_bytes, oldest_undrained_unix_ms, overdue_files,
                     failing_files, drain_error, undrained_files);
};
struct CkptStatusReply {
  std::vector<CkptJobStatus> jobs;
  std::vector<CkptEntry> files;  // with `files`: every file of the job(s)
  int64_t now_unix_ms = 0;
  // Every file of the job(s) with a drain error (listed or not), by path.
  std::vector<CkptDrainError> drain_errors;
  CkptOriginHealth origin;
  MSGPACK_DEFINE_MAP(jobs, files, now_unix_ms, drain_errors, origin);
};
struct CkptStatus {
  static constexpr MsgType kType = MsgType::kCkptStatus;
  using Reply = CkptStatusReply;
  std::string job;     // "" = every job
  bool files = false;  // also list the files
  MSGPACK_DEFINE_MAP(job, files);
};

// Drains the job's undrained files first, ahead of their deadlines.
struct CkptFlushReply {
  CkptJobStatus status;
  MSGPACK_DEFINE_MAP(status);
};
struct CkptFlush {
  static constexpr MsgType kType = MsgType::kCkptFlush;
  using Reply = CkptFlushReply;
  std::string job;
  MSGPACK_DEFINE_MAP(job);
};

// ---- node -> coordinator --------------------------------------------------

// One file generation to upload to the checkpoint origin at `tmp_path` (a
// name under the origin's staging directory; the coordinator renames it into
// place once uploaded, so the origin never shows a partial file).
struct CkptDrainTask {
  CkptEntry entry;
  std::string tmp_path;
  MSGPACK_DEFINE_MAP(entry, tmp_path);
};
// A replica this node should hold (per the namespace): the node fetches it
// from the other holders (rebuild) when its disk lacks it, never from the
// origin. `holders` are the other nodes with the chunk (the writer, whose
// whole-file copy serves it, first); `chunk_size` locates the chunk inside a
// whole-file copy (GetCkptChunk.chunk_size).
struct CkptChunkRef {
  uint64_t id = 0;
  uint64_t gen = 0;
  uint32_t index = 0;
  uint64_t checksum = 0;
  uint64_t length = 0;
  uint64_t chunk_size = 0;
  std::vector<std::string> holders;
  MSGPACK_DEFINE_MAP(id, gen, index, checksum, length, chunk_size, holders);
};
struct CkptWorkReply {
  std::vector<CkptDrainTask> drain;       // oldest first
  // Ids whose copies on this node are still wanted; the node deletes the
  // replicas and whole-file copies of every other id. It must list every id
  // of `drain` (a reply that does not is ignored for eviction).
  IdList keep_files;
  uint64_t max_drain_bytes_per_s = 0;     // this node's share (0 = unlimited)
  // Ids >= keep_from_id did not exist when this reply was made (a file
  // created since): keep their copies too. A node deletes a copy only when
  // its id is below keep_from_id and not in keep_files.
  uint64_t keep_from_id = 0;
  // Only when CkptWork.rebuild: every replica chunk the namespace says this
  // node holds and that is still wanted (not evicted); the node fetches the
  // ones its disk lacks.
  std::vector<CkptChunkRef> rebuild;
  // Names this reply's rebuild list (0: none): the node echoes it in
  // CkptWork.rebuilt once it holds every chunk of the list, which is when a
  // holder given by re-replication starts to count towards R.
  uint64_t rebuild_seq = 0;
  // Copies on this node that no generation anyone may still read uses (an
  // older generation of a file rewritten since, a removed file's, sends a
  // commit did not count): delete them. `drop` names replica files exactly;
  // `drop_files` whole-file copies (files/<id>) that hold generation `gen`
  // or older (the mount stamps a committed copy with its generation: an
  // unstamped file, one being written, is never dropped this way). The node
  // echoes drop_seq in CkptWork.dropped once done.
  std::vector<CkptReplicaRef> drop;
  struct FileGen {
    uint64_t id = 0;
    uint64_t gen = 0;
    MSGPACK_DEFINE_MAP(id, gen);
  };
  std::vector<FileGen> drop_files;
  uint64_t drop_seq = 0;
  MSGPACK_DEFINE_MAP(drain, keep_files, max_drain_bytes_per_s, keep_from_id, rebuild, rebuild_seq, drop, drop_files,
                     drop_seq);
};
// A node asks for work only between its drain rounds, when none of its
// uploads is in flight: the call ends every lease the node holds, so a task
// of its last reply that it did not get to (a round ends at its first failed
// upload) or whose report was lost is handed out again at once, not when the
// lease runs out. Leases still keep a task from other nodes.
struct CkptWork {
  static constexpr MsgType kType = MsgType::kCkptWork;
  using Reply = CkptWorkReply;
  std::string node;
  // Asks for CkptWorkReply.rebuild: set on the node's first call after it
  // starts (its disk may be new or may have lost files) and every few
  // minutes after, so the list costs the coordinator little.
  bool rebuild = false;
  // The rebuild_seq of the last reply whose whole rebuild list this node now
  // holds on its disk (0: none).
  uint64_t rebuilt = 0;
  // The drop_seq of the last reply whose drops this node carried out.
  uint64_t dropped = 0;
  MSGPACK_DEFINE_MAP(node, rebuild, rebuilt, dropped);
};

struct CkptDrainedReply {
  uint8_t level = 0;
  MSGPACK_DEFINE_MAP(level);
};
// Reports uploads: each task's tmp_path now holds the whole generation,
// fsynced (ok), or the upload failed (error says why, as Status::ToString();
// it is retried). `at_origin`: the failure was the checkpoint origin's (it
// could not be opened, or refused a create, write or fsync), not the
// fetching of chunks from their holders: it counts against the origin's
// health (`hoard status`).
struct CkptDrained {
  static constexpr MsgType kType = MsgType::kCkptDrained;
  using Reply = CkptDrainedReply;
  std::string node;
  uint64_t id = 0;
  uint64_t gen = 0;
  bool ok = false;
  std::string error;
  bool at_origin = false;
  MSGPACK_DEFINE_MAP(node, id, gen, ok, error, at_origin);
};

// ---- mount -> coordinator: sessions and locks -----------------------------

// A mount's session: who it is (`mount`, random per mount process) and what
// it holds that the coordinator must honour. Sent every couple of seconds
// while the mount has checkpoint files open or locks held (and once more
// when that ends); a session not heard from for the coordinator's session
// timeout is over (a dead mount, or one cut off: its node's own state does
// not matter). Each message replaces the last: `holds` are the generations
// its open files read (their copies are kept while held, even after the file
// is rewritten or removed), `writing` the files it has open for writing (not
// drained meanwhile). `locks` only with `reclaim`: after the coordinator
// restarted or ended the session (a `fresh` reply), the locks it held, which a
// restarted coordinator grants back before any other during its grace period.
struct CkptHold {
  uint64_t id = 0;
  uint64_t gen = 0;
  auto operator<=>(const CkptHold&) const = default;
  MSGPACK_DEFINE_MAP(id, gen);
};
// A lock of a checkpoint file (flock, or a POSIX/OFD byte range). Ranges are
// inclusive; end UINT64_MAX reaches past any end of file. `owner` is the
// kernel's lock owner (per process for POSIX locks, per open file for flock
// and OFD locks), scoped to the mount's session.
struct CkptLockSpec {
  uint64_t id = 0;
  uint64_t owner = 0;
  bool flock = false;
  uint8_t type = 0;  // 0 unlock, 1 read (shared), 2 write (exclusive)
  uint64_t start = 0;
  uint64_t end = UINT64_MAX;
  uint32_t pid = 0;  // the holder's, as F_GETLK reports it
  MSGPACK_DEFINE_MAP(id, owner, flock, type, start, end, pid);
};
struct CkptSessionReply {
  uint64_t incarnation = 0;  // changes when the coordinator restarts
  // The coordinator had no session of this mount before this message (it
  // restarted, or ended the session after a silence): the mount re-asserts
  // its locks (reclaim) in its next message.
  bool fresh = false;
  // Locks a reclaim asked for that another mount took meanwhile: lost.
  std::vector<CkptLockSpec> lost;
  MSGPACK_DEFINE_MAP(incarnation, fresh, lost);
};
struct CkptSession {
  static constexpr MsgType kType = MsgType::kCkptSession;
  using Reply = CkptSessionReply;
  uint64_t mount = 0;
  std::string node;  // the mount's node ("" when none): its sessions end when it is marked down
  std::vector<CkptHold> holds;
  IdList writing;
  bool reclaim = false;
  std::vector<CkptLockSpec> locks;
  MSGPACK_DEFINE_MAP(mount, node, holds, writing, reclaim, locks);
};

// Takes (type 1/2) or releases (type 0) a lock, or only tests (`test`) what
// a take would conflict with (F_GETLK). Never waits: a conflict is answered
// at once with the lock in the way, and the mount asks again for a blocking
// lock. `release_owner`: drop every lock of `owner` on the file (close).
struct CkptLockReply {
  bool granted = false;
  CkptLockSpec conflict;  // when not granted: a lock in the way (type 0: none)
  MSGPACK_DEFINE_MAP(granted, conflict);
};
struct CkptLock {
  static constexpr MsgType kType = MsgType::kCkptLock;
  using Reply = CkptLockReply;
  uint64_t mount = 0;
  CkptLockSpec lock;
  bool test = false;
  bool release_owner = false;
  MSGPACK_DEFINE_MAP(mount, lock, test, release_owner);
};

// ---- mount / node -> node -------------------------------------------------

// Stores chunk `index` of generation `gen` of file `id` (the payload), checks
// it against `checksum`, and fsyncs it before replying.
struct CkptPutReply {
  uint64_t stored_bytes = 0;
  MSGPACK_DEFINE_MAP(stored_bytes);
};
struct PutCkptChunk {
  static constexpr MsgType kType = MsgType::kPutCkptChunk;
  using Reply = CkptPutReply;
  uint64_t id = 0;
  uint64_t gen = 0;
  uint32_t index = 0;
  uint64_t checksum = 0;
  MSGPACK_DEFINE_MAP(id, gen, index, checksum);
};

// Reply: CkptChunkData + the chunk's bytes [offset, offset+length) as payload.
struct CkptChunkData {
  uint64_t chunk_length = 0;
  MSGPACK_DEFINE_MAP(chunk_length);
};
struct GetCkptChunk {
  static constexpr MsgType kType = MsgType::kGetCkptChunk;
  using Reply = CkptChunkData;
  uint64_t id = 0;
  uint64_t gen = 0;
  uint32_t index = 0;
  uint64_t checksum = 0;  // the node serves only bytes that match it
  uint64_t chunk_size = 0;  // to find the chunk inside a whole-file copy
  uint64_t chunk_length = 0;
  MSGPACK_DEFINE_MAP(id, gen, index, checksum, chunk_size, chunk_length);
};

}  // namespace hoard::proto

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <>
struct convert<hoard::proto::IdList> {
  const msgpack::object& operator()(const msgpack::object& o, hoard::proto::IdList& v) const {
    if (o.type != msgpack::type::ARRAY || o.via.array.size != 2 || o.via.array.ptr[1].type != msgpack::type::BIN) {
      throw msgpack::type_error();
    }
    const uint64_t count = o.via.array.ptr[0].as<uint64_t>();
    const msgpack::object_bin& bin = o.via.array.ptr[1].via.bin;
    if (count > bin.size) throw msgpack::type_error();  // every id takes a byte at least
    v.clear();
    v.reserve(count);
    const std::vector<char> bytes(bin.ptr, bin.ptr + bin.size);
    if (!hoard::proto::DecodeOrdinals(bytes, UINT64_MAX, count, [&](uint64_t id) { v.push_back(id); }).ok()) {
      throw msgpack::type_error();
    }
    return o;
  }
};

template <>
struct pack<hoard::proto::IdList> {
  template <typename Stream>
  msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& p, const hoard::proto::IdList& v) const {
    std::vector<uint64_t> ids(v.begin(), v.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    hoard::proto::OrdinalEncoder encoder;
    for (uint64_t id : ids) encoder.Add(id);
    const std::vector<char> bytes = encoder.Finish();
    p.pack_array(2);
    p.pack(uint64_t(ids.size()));
    p.pack_bin(static_cast<uint32_t>(bytes.size()));
    p.pack_bin_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
    return p;
  }
};

}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack
