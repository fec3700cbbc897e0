// File: checkpoint/ckpt_fs.h
//
// CkptFs is the writable half of the mount: MOUNT/checkpoints/JOB/... (issue
// 6; the design is in checkpoint/README.md). HoardFs (fuse/hoard_fs.h) routes
// it every request on a checkpoint inode; the other half, the dataset tree
// (fuse/dataset_fs.h), has the same operations.
//
// Metadata lives in the coordinator (checkpoint/ckpt_table.h): every lookup,
// getattr and listing asks it (attributes are cached by the kernel for
// `attr_timeout`, 1 s by default), and every change (create, mkdir, symlink,
// rename, unlink, rmdir, chmod, chown, utimens) is made there first, so all
// mounts see one namespace. Entries have owners and modes: the creator's
// uid and gid own what it creates (the group is the directory's when that
// is set-group-ID), the kernel enforces permissions (the mount is always
// `default_permissions`), and SetAttr checks POSIX's rules again against
// the coordinator's attributes (only root changes an owner; the owner or root
// a mode, ...), because the kernel's may be a second old. Times are POSIX's:
// atime (relatime, moved by opens for reading), mtime and ctime, a
// directory's moving with what is created or removed in it. Device nodes,
// fifos, sockets and hard links are refused with EPERM (checkpoint/README.md
// says why).
//
// A file's bytes are its committed generation's; the mount that has the file
// open for writing sees its own newer bytes at once, and every other mount
// sees them once the writer's close returned (close-to-open consistency, as
// NFS gives: an open drops the attributes the kernel cached, so a size from
// before the commit is not read up to).
//
// Writes: a file opened for writing is backed by STORE/ckpt/files/<id> on this
// node's disk (the node agent's store directory), written in place at local
// disk speed and held with a shared flock while open (the node agent never
// evicts a file so locked: store/replica_store.h). A commit (checkpoint/
// ckpt_commit.h) makes the bytes generation gen+1 at level R (replicated) or
// L, and the call returns after that. What commits:
//   - fsync(2)/fdatasync(2) on any descriptor of the file;
//   - the close(2) of the last descriptor open for writing: FUSE sends a FLUSH
//     for every close of every descriptor (a dup, a forked child's copy, the
//     descriptor Python's mmap keeps), and cannot say which is the last. So a
//     FLUSH commits only when its closer (the kernel's lock owner: one per
//     process's descriptor table) wrote through this open file, and that
//     process holds no other descriptor of the file open for writing and no
//     shared writable mapping of it (/proc/PID/fdinfo and maps). A forked
//     child exiting, a dup closed, an mmap object closed while the file is
//     still open: none commits a half-written file;
//   - the release of the last open file for writing, when bytes are still
//     uncommitted (written through a mapping after the last close).
// A commit made while the file stays open for writing tells the coordinator
// so (CkptCommit.writing), and the file is not drained to the checkpoint
// origin until this mount's session no longer lists it.
// Chunks a sequential writer has finished are replicated meanwhile (checkpoint/
// ckpt_write_behind.h), so the commit mostly waits for the last ones.
// A handle open for writing skips the kernel's page cache of the mount
// (direct_io, where the kernel allows it: Options::uncached_writes): the bytes
// are cached once, as the local file's pages, rather than twice, which halves
// the memory a large save fills and saves the writer a copy of every byte
// into fresh pages (`bench/RESULTS.md`, issue 6).
//
// Reads of a file not open for writing here go through CkptChunks (checkpoint/
// ckpt_chunks.h): this node's copies, then the other holders, then the
// checkpoint origin once the file is there (P). Except on the node that
// wrote it: a read handle whose open finds this node's whole-file copy
// (STORE/ckpt/files/<id>) stamped with the generation it opened keeps a
// descriptor of the copy and answers each read with it as a file buffer
// (fuse_reply_data: spliced to the kernel where libfuse's pipe can hold the
// reply, which for 1 MiB needs CAP_SYS_RESOURCE or fs.pipe-max-size above
// 1 MiB; else read into memory first), as long as the stamp, asked at every
// read, still names the handle's generation. The copy loses its
// stamp before its first byte changes (LocalFile::WillChange), so a handle
// never reads other bytes from it; eviction of the copy leaves the
// descriptor's bytes. Not kernel passthrough (fuse/passthrough.h): while an
// inode has a passthrough open the kernel fails every open of it that is not
// a passthrough of the same backing file, so a reader backed by one
// generation would make the next open for writing here, or an open of a
// newer generation, fail. A handle reads the generation
// it opened: after a rename over the file, an unlink, or another node's
// rewrite, it keeps reading exactly those bytes until it is closed (its
// generation is held: see Sessions below), and fstat/lseek(SEEK_END) keep
// working (an open file outlives its name: the attributes come from the open
// handles once the name is gone). On the node writing the file, handles see
// the writer's bytes (one file, as on a local file system). Read handles are
// direct_io too where the kernel allows it, so that two handles of different
// generations never share pages.
//
// Sessions: a thread tells the coordinator, every couple of seconds while
// this mount has checkpoint files open or locks held, which generations its
// open files read and which files it writes (proto::CkptSession), under a
// random mount id; the coordinator keeps those generations' copies, holds
// back the drain of those files, and ends the session (releasing its locks)
// when it stops hearing from it.
//
// Locks: flock(2) and fcntl record locks (POSIX and OFD) on checkpoint files
// are the cluster's, kept by the coordinator (checkpoint/ckpt_sessions.h):
// a lock another node holds conflicts here too. A blocking request asks again
// until it is granted or interrupted. POSIX locks of a process go at its
// close of any descriptor of the file (FLUSH), flocks at the last close of
// the open file (RELEASE), all of them when the mount's session ends.
//
// Inodes: the root of the namespace is kCheckpointsIno; an entry's inode is
// CkptIno(id), from its coordinator id, which survives renames
// (checkpoint/ckpt_inode.h). The mount
// remembers the last path it saw for each id (an id of an entry renamed by
// another mount is found again at its next lookup).
//
// Takeover (Options::state_dir): the mount's FUSE connection may outlive
// this process (fuse/supervisor.h), so what the kernel still refers to is
// kept where a successor finds it: the session's mount id (so locks, holds
// and "open for writing" at the coordinator stay this session's), and one
// small file per open handle (its id, path, whether it writes, its opener,
// and for a reader the entry it reads). A successor (Options::takeover)
// opens the local files of writing handles again and counts them as holding
// uncommitted bytes: the next fsync or last close commits them, as it would
// have before the restart, and nothing commits earlier. Locks held through
// the mount are the coordinator's (checkpoint/ckpt_sessions.h) and stay
// under the kept mount id; this process does not know them, so it re-asserts
// none after a coordinator restart and releases them at the session's end.
//
// Errors: coordinator statuses go through ToErrno (common/errno.h); an
// unreachable coordinator is EIO for metadata operations, while writes and
// reads of open files go on (they need only the local disk), and commits
// fail with EIO until it is back (the bytes stay on the local disk); lock
// requests fail with ENOLCK.
//
// Thread-safety: every method may be called from any FUSE worker thread. One
// mutex guards the inode table and the open-file table; each open file has
// its own mutex (checkpoint/ckpt_commit.h), so writes to different files never
// contend, and a commit blocks only writers of that file.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/file_locks.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "cluster/cluster_view.h"
#include "checkpoint/ckpt_chunks.h"
#include "checkpoint/ckpt_commit.h"
#include "checkpoint/ckpt_inode.h"
#include "checkpoint/ckpt_write_behind.h"
#include "checkpoint/lock_waiter.h"
#include "proto/leader_client.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

class CkptFs {
 public:
  struct Options {
    std::string coordinator;
    std::string node_name;    // this node's name in the cluster map; "" = no node here
    std::string local_store;  // its chunk store directory (STORE); "" = writes refused (EROFS)
    std::chrono::milliseconds coordinator_timeout{10000};
    std::chrono::milliseconds peer_timeout{10000};
    double attr_timeout = 1;  // seconds the kernel may cache names and attributes
    // fsync and close return once the file is at this level (R, or L for speed).
    proto::CkptLevel sync_level = proto::CkptLevel::kR;
    // Threads replicating chunks while files are still being written
    // (checkpoint/ckpt_write_behind.h); 0 = everything at the commit.
    int write_behind_threads = 2;
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    // The checkpoint origin, for files only there (P); null = none.
    std::function<Result<std::unique_ptr<CkptOrigin>>()> open_origin;
    // Whether handles may skip the kernel's page cache of the mount
    // (direct_io): only where the kernel still lets such a file be mapped
    // shared (fuse/passthrough.h). Null = never.
    std::function<bool()> uncached_writes;
    // Where the mount is (to recognise its files among a process's open
    // files); "" matches by inode number alone.
    std::string mountpoint;
    // How often the session is renewed (see Sessions above); the
    // coordinator ends one not heard from for its session timeout (10 s).
    std::chrono::milliseconds session_interval{2000};
    // Times the session renewals and blocking lock retries (tests pass a
    // FakeClock).
    Clock* clock = Clock::Real();
    // Where the session's mount id and open handles are kept for a
    // successor process ("" = nowhere), and whether this process is one
    // (see Takeover above).
    std::string state_dir;
    bool takeover = false;
  };

  CkptFs(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view);
  ~CkptFs();

  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
  void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus);
  void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi);
  void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
  void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned flags);
  void Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool is_dir);
  void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name);
  void ReadLink(fuse_req_t req, fuse_ino_t ino);
  void MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
  void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);
  void GetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock);
  void SetLk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep);
  void Flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op);
  // Listed fresh from the coordinator at each readdir: nothing to open.
  void OpenDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { fuse_reply_open(req, fi); }
  // Refused: hard links (EPERM, checkpoint/README.md); fallocate and
  // copy_file_range, which posix_fallocate and copy_file_range(2) then do
  // with plain writes; setxattr (the only attributes, user.hoard.*, are
  // read-only).
  void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EPERM); }
  void Fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { fuse_reply_err(req, EOPNOTSUPP); }
  void CopyFileRange(fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t, fuse_file_info*, size_t,
                     int) {
    fuse_reply_err(req, ENOSYS);
  }
  void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { fuse_reply_err(req, ENOTSUP); }

  // Takes over the handles an earlier process of this mount left in
  // Options::state_dir (see Takeover above); call before Start. Handles that
  // cannot be restored are logged and dropped (their reads and writes then
  // fail with EBADF).
  Status TakeOver();
  // Starts the session thread (see Sessions above). Idempotent.
  void Start();
  // Ends the session: releases this mount's locks and holds at the
  // coordinator, and stops the thread. Idempotent. `end_session` false: stops
  // the thread only, leaving the session to a successor process that takes
  // over this mount (see Takeover above).
  void Stop(bool end_session = true);
  uint64_t mount_id() const { return mount_id_; }
  // Blocking lock requests waiting now (metrics, tests).
  int lock_waiters() const { return lock_waiter_.waiting(); }
  // Where blocking lock requests wait (the dataset locks' too).
  LockWaiter& lock_waiter() { return lock_waiter_; }
  // "major:minor" of this mount (to recognise its files in /proc), found on
  // first use; "" when unknown (no Options::mountpoint).
  const std::string& MountDev();

  // Where reads of committed checkpoint files came from (for metrics).
  const CkptChunks& chunks() const { return chunks_; }
  // Tests: bytes read from whole-file copies (see Reads above).
  uint64_t TEST_whole_copy_bytes() const { return whole_copy_bytes_.load(); }
  // How the chunks of committed files reached their holders (for metrics).
  const Committer& committer() const { return committer_; }
  Committer& TEST_committer() { return committer_; }
  // Tests: called at the start of each first open for writing of a file.
  // Set while no file is being opened.
  void TEST_SetBeforeFirstOpen(std::function<void(uint64_t id)> f) { test_before_first_open_ = std::move(f); }
  // Tests: how many opens for writing have waited for another's first open
  // of the same file to end (counted as each starts waiting).
  int TEST_first_open_waits() const { return first_open_waits_.load(); }

  // The attributes of kCheckpointsIno when the coordinator cannot say (the
  // root's listing, a lookup of "checkpoints"): root's, mode 1777.
  void StatRoot(struct stat* st) const;

  // The kernel session, for invalidating attributes (null: none, e.g. after
  // unmount). See Open.
  // Null: the session is going away, and blocking lock requests still
  // waiting get ENOLCK now (a reply after it is gone would be a crash).
  void SetSession(fuse_session* session) {
    session_.store(session);
    if (session == nullptr) lock_waiter_.Abandon();
  }

 private:
  template <typename Req>
  Result<typename Req::Reply> Ask(const Req& req) {
    auto lease = coordinator_.Acquire();
    return lease->Call(req, options_.coordinator_timeout);
  }
  // An open file: its local file when open for writing here (or when this
  // mount writes it through another handle), else the entry it reads.
  struct Handle {
    uint64_t id = 0;
    std::shared_ptr<LocalFile> file;
    std::shared_ptr<const proto::CkptEntry> entry;
    // A reader's descriptor of this node's whole-file copy (STORE/ckpt/
    // files/<id>), when at its open the copy was stamped with the entry's
    // generation: read directly while the stamp still says so (see Reads
    // above). Null: none.
    std::shared_ptr<const UniqueFd> copy;
    // Opened for writing: only such a handle's close commits. A reader on
    // the writer's node shares `file` but must not commit a save under way.
    bool writable = false;
    // The lock owners (one per process's descriptor table) that wrote
    // through it: a close by another (a forked child's) commits nothing.
    // Only direct writes carry an owner; without any (writes through the
    // page cache), the process that opened it (opener) decides instead.
    std::set<uint64_t> writers;
    pid_t opener = 0;  // its thread group
    // The owners of fcntl locks taken through it. An OFD lock's owner is
    // the open file itself, and the kernel tells a FUSE file system of no
    // unlock at its last close: the release drops them (a process's own
    // locks went at its close already).
    std::set<uint64_t> lockers;
  };
  // The path of `ino` as last seen; kNotFound (ESTALE) if unknown.
  Result<std::string> PathOf(fuse_ino_t ino);
  // The path of `name` in `parent`, or false after replying the error
  // (ESTALE for an unknown parent, ENAMETOOLONG past POSIX's limits).
  bool ChildPath(fuse_req_t req, fuse_ino_t parent, const char* name, std::string* out);
  // Creates `path` (CkptCreate: a file, a directory, or with a `target` a
  // symlink) owned by the caller of `req`.
  Result<proto::CkptEntryReply> CreateAs(fuse_req_t req, const std::string& path, bool is_dir, mode_t mode,
                                         const char* target = "");
  // The coordinator's entry for `ino` now; false after replying the error
  // (ESTALE when another mount renamed or removed it since we saw it).
  // `for_read`: an open for reading (moves the atime, relatime).
  bool CurrentEntry(fuse_req_t req, fuse_ino_t ino, proto::CkptEntry* out, bool for_read = false);
  void Remember(const proto::CkptEntry& e);
  void Forget(uint64_t id);
  void Renamed(const std::string& from, const std::string& to);
  // `unlinked`: the name is gone (st_nlink 0) but an open handle keeps it.
  void FillStat(const proto::CkptEntry& e, struct stat* st, bool unlinked = false);
  void ReplyEntry(fuse_req_t req, const proto::CkptEntry& e);
  // The entry an open handle of `id` reads, if this mount has one.
  std::shared_ptr<const proto::CkptEntry> OpenEntry(uint64_t id);
  // This node's whole-file copy of `e`, if it holds exactly that generation
  // (stamped with it: store/replica_store.h); null otherwise.
  std::shared_ptr<const UniqueFd> OpenWholeCopy(const proto::CkptEntry& e);
  // Answers a read of `h` from its whole-file copy, if the copy still holds
  // the handle's generation; false (nothing replied) if not.
  bool ReadWholeCopy(fuse_req_t req, const Handle& h, size_t size, off_t off);
  // The open local file of `id`, if this mount has it open for writing.
  std::shared_ptr<LocalFile> OpenLocal(uint64_t id);
  std::shared_ptr<LocalFile> OpenLocalLocked(uint64_t id) REQUIRES(mu_);
  // Opens (or shares) the local file of `e` for writing; `truncate` empties
  // it, otherwise its committed bytes are copied in first when needed.
  Result<std::shared_ptr<LocalFile>> OpenForWrite(const proto::CkptEntry& e, bool truncate);
  // OpenForWrite of a file no handle of this mount has open; the caller
  // makes it the only one running for `e.id` (opening_).
  Result<std::shared_ptr<LocalFile>> OpenFirst(const proto::CkptEntry& e, bool truncate);
  // After `f` was truncated to 0: a failed fdatasync of it no longer matters.
  void ClearSyncFailed(LocalFile& f) REQUIRES(f.mu);
  // Commits `f` if it has uncommitted bytes; the status for fsync/close.
  // `writing`: the file stays open for writing here after this commit.
  Status CommitIfDirty(LocalFile& f, bool writing);
  uint64_t NewHandle(Handle h);
  // Keeps handle `fh` in Options::state_dir (see Takeover), or drops it.
  void SaveHandle(uint64_t fh, const Handle& h) REQUIRES(mu_);
  void DropHandle(uint64_t fh);
  // The session's mount id: kept in Options::state_dir, or a new random one.
  static uint64_t LoadOrMakeMountId(const Options& options);
  // Flush (`closing`) and Fsync: commits the handle's file if it is dirty
  // and the call is one that commits (see the top).
  void Sync(fuse_req_t req, fuse_file_info* fi, bool closing);
  // Whether process `pid` still has the file of inode `ino` open for
  // writing or mapped shared and writable (a FLUSH from it is then not its
  // last close of the file).
  bool StillWriting(pid_t pid, fuse_ino_t ino);
  // A write by `ctx`'s user, if it lacks CAP_FSETID (not root), clears the
  // set-user-ID and (group-executable) set-group-ID bits, as on Linux.
  void KillSuidOnWrite(fuse_req_t req, fuse_ino_t ino, LocalFile& f);
  // A commit marks `id`'s open handles on this mount to read the new
  // generation from now on (one file per node: POSIX's view).
  void Committed(uint64_t id, std::shared_ptr<const proto::CkptEntry> e);
  // A commit lists every chunk in one array (proto::kMaxArrayEntries): 256
  // GiB at 4 MiB chunks. Writes and truncations past it fail with EFBIG.
  uint64_t MaxFileSize() const { return uint64_t(proto::kMaxArrayEntries) * committer_.chunk_size(); }
  bool UncachedWrites() const { return options_.uncached_writes && options_.uncached_writes(); }

  // Locks (ckpt_fs_locks.cc). One attempt to take, release or test a lock
  // at the coordinator: 0, EAGAIN (taken by another), or the errno.
  int Lock(const proto::CkptLockSpec& spec, bool test, proto::CkptLockSpec* conflict);
  // Takes it for `req` and replies, at once or, for a blocking request in
  // conflict, once granted (LockWaiter).
  void TakeLock(fuse_req_t req, const proto::CkptLockSpec& spec, bool wait);
  // Releases what `owner` holds on `id` (POSIX locks, or its flock), if
  // this mount recorded any.
  void ReleaseLocks(uint64_t id, uint64_t owner, bool flock);
  // Lock requests whose answer was lost (the coordinator unreachable): an
  // unlock to send again, or a take to undo in case it was granted. The
  // session thread retries them.
  void RetryLater(const proto::CkptLock& unlock);
  void RetryPendingUnlocks();
  // The session (ckpt_fs_locks.cc).
  void SessionLoop();
  proto::CkptSession SessionSnapshot(bool reclaim);
  void WakeSession();

  Options options_;
  const uint64_t mount_id_;  // before committer_, which commits under it
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  proto::ClientPool pool_;  // the nodes
  // The coordinators: follows the leader, and waits out a takeover
  // (LeaderClient::Options::failover_wait) so a save in progress does not fail
  // inside one.
  proto::LeaderPool coordinator_;
  CkptChunks chunks_;
  Committer committer_;
  WriteBehind write_behind_;  // after committer_: its threads use it
  std::string files_dir_;  // STORE/ckpt/files

  // Taken with a LocalFile::mu held (CommitIfDirty, ClearSyncFailed), never
  // the other way round.
  Mutex mu_;
  std::unordered_map<uint64_t, std::string> paths_ GUARDED_BY(mu_);               // id -> path
  std::unordered_map<uint64_t, std::weak_ptr<LocalFile>> local_ GUARDED_BY(mu_);  // id -> open local file
  std::unordered_set<uint64_t> opening_ GUARDED_BY(mu_);  // ids in OpenFirst
  CondVar first_open_done_;  // an id left opening_
  std::atomic<int> first_open_waits_{0};
  std::function<void(uint64_t id)> test_before_first_open_;
  // Ids whose local file had an fdatasync fail (LocalFile::sync_failed, kept
  // past the LocalFile): they commit nothing until written from the start
  // (truncated to 0).
  std::unordered_set<uint64_t> sync_failed_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Handle> handles_ GUARDED_BY(mu_);  // by fh
  std::atomic<fuse_session*> session_{nullptr};
  std::atomic<uint64_t> whole_copy_bytes_{0};
  uint64_t next_fh_ GUARDED_BY(mu_) = 1;

  // The locks this mount holds at the coordinator, mirrored to re-assert
  // them after a coordinator restart and to skip needless releases.
  FileLocks held_locks_;
  Mutex pending_mu_;
  std::vector<proto::CkptLock> pending_unlocks_ GUARDED_BY(pending_mu_);
  // Declared after what its attempts use, so that it stops first.
  LockWaiter lock_waiter_;
  std::once_flag dev_once_;
  std::string dev_;  // set once (MountDev)
  Mutex session_mu_;
  CondVar session_cv_;
  bool session_stop_ GUARDED_BY(session_mu_) = false;
  bool session_wake_ GUARDED_BY(session_mu_) = false;
  bool session_started_ GUARDED_BY(session_mu_) = false;
  bool session_end_ GUARDED_BY(session_mu_) = true;  // Stop's end_session
  std::thread session_thread_;
};

}  // namespace hoard::fuse
