// File: fuse/ckpt_fs.h
//
// CkptFs is the writable half of the mount: MOUNT/checkpoints/JOB/... (issue
// 6; the design is in checkpoint/README.md). HoardFs hands it every request on
// a checkpoint inode.
//
// Metadata lives in the coordinator (checkpoint/ckpt_table.h): every lookup,
// getattr and listing asks it (attributes are cached by the kernel for
// `attr_timeout`, 1 s by default), and every change (create, mkdir, rename,
// unlink, rmdir, chmod, utimens) is made there first, so all mounts see one
// namespace. A file's bytes are its committed generation's; the mount that
// has the file open for writing sees its own newer bytes at once, and every
// other mount sees them once the writer's close returned (close-to-open
// consistency, as NFS gives: an open drops the attributes the kernel cached,
// so a size from before the commit is not read up to).
//
// Writes: a file opened for writing is backed by STORE/ckpt/files/<id> on this
// node's disk (the node agent's store directory), written in place at local
// disk speed and held with a shared flock while open (the node agent never
// evicts a file so locked: checkpoint/replica_store.h). fsync, and the flush
// of close(2), commit it (fuse/ckpt_commit.h): the bytes become generation
// gen+1 at level R (replicated) or L, and the call returns after that.
// Chunks a sequential writer has finished are replicated meanwhile (fuse/
// ckpt_write_behind.h), so the commit mostly waits for the last ones.
// A handle open for writing skips the kernel's page cache of the mount
// (direct_io, where the kernel allows it: Options::uncached_writes): the bytes
// are cached once, as the local file's pages, rather than twice, which halves
// the memory a large save fills and saves the writer a copy of every byte
// into fresh pages (`bench/RESULTS.md`, issue 6).
//
// Reads of a file not open for writing here go through CkptChunks (fuse/
// ckpt_chunks.h): this node's copies, then the other holders, then the
// checkpoint origin once the file is there (P).
//
// Inodes: the root of the namespace is kCheckpointsIno; an entry's inode is
// CkptIno(id), from its coordinator id, which survives renames. The mount
// remembers the last path it saw for each id (an id of an entry renamed by
// another mount is found again at its next lookup).
//
// Errors: coordinator statuses go through ToErrno (fuse/errno.h); an
// unreachable coordinator is EIO for metadata operations, while writes and
// reads of open files go on (they need only the local disk), and commits
// fail with EIO until it is back (the bytes stay on the local disk).
//
// Thread-safety: every method may be called from any FUSE worker thread. One
// mutex guards the inode table and the open-file table; each open file has
// its own mutex (fuse/ckpt_commit.h), so writes to different files never
// contend, and a commit blocks only writers of that file.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "coordinator/cluster_view.h"
#include "fuse/ckpt_chunks.h"
#include "fuse/ckpt_commit.h"
#include "fuse/ckpt_write_behind.h"
#include "proto/rpc_client.h"

namespace hoard::fuse {

inline constexpr uint64_t kCheckpointsIno = 3;
// Checkpoint inodes live above every fixed inode and below dataset slot 1.
inline constexpr uint64_t kCkptInoBase = uint64_t(1) << 32;
inline bool IsCkptIno(uint64_t ino) { return ino == kCheckpointsIno || (ino >= kCkptInoBase && (ino >> 40) == 0); }
inline uint64_t CkptIno(uint64_t id) { return kCkptInoBase + id; }

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
    // (fuse/ckpt_write_behind.h); 0 = everything at the commit.
    int write_behind_threads = 2;
    std::shared_ptr<spdlog::logger> logger;
    zmq::context_t* context = nullptr;
    // The checkpoint origin, for files only there (P); null = none.
    std::function<Result<std::unique_ptr<CkptOrigin>>()> open_origin;
    // Whether handles open for writing may skip the kernel's page cache of
    // the mount (direct_io): only where the kernel still lets such a file be
    // mapped shared (fuse/passthrough.h). Null = never.
    std::function<bool()> uncached_writes;
  };

  CkptFs(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view);
  ~CkptFs();

  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino);
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
  void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
  void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);

  // Where reads of committed checkpoint files came from (for metrics).
  const CkptChunks& chunks() const { return chunks_; }
  // How the chunks of committed files reached their holders (for metrics).
  const Committer& committer() const { return committer_; }
  Committer& TEST_committer() { return committer_; }
  // Tests: called at the start of each first open for writing of a file.
  // Set while no file is being opened.
  void TEST_SetBeforeFirstOpen(std::function<void(uint64_t id)> f) { test_before_first_open_ = std::move(f); }

  // The attributes of kCheckpointsIno (for the root's listing).
  void StatRoot(struct stat* st) const;

  // The kernel session, for invalidating attributes (null: none, e.g. after
  // unmount). See Open.
  void SetSession(fuse_session* session) { session_.store(session); }

 private:
  template <typename Req>
  Result<typename Req::Reply> Ask(const Req& req) {
    auto lease = pool_.Acquire(options_.coordinator);
    return lease->Call(req, options_.coordinator_timeout);
  }
  // The path of `ino` as last seen; kNotFound (ESTALE) if unknown.
  Result<std::string> PathOf(fuse_ino_t ino);
  Result<std::string> ChildPath(fuse_ino_t parent, const char* name);
  // The coordinator's entry for `ino` now; false after replying the error
  // (ESTALE when another mount renamed or removed it since we saw it).
  bool CurrentEntry(fuse_req_t req, fuse_ino_t ino, proto::CkptEntry* out);
  void Remember(const proto::CkptEntry& e);
  void Forget(uint64_t id);
  void Renamed(const std::string& from, const std::string& to);
  void FillStat(const proto::CkptEntry& e, struct stat* st);
  void ReplyEntry(fuse_req_t req, const proto::CkptEntry& e);
  // The open local file of `id`, if this mount has it open for writing.
  std::shared_ptr<LocalFile> OpenLocal(uint64_t id);
  std::shared_ptr<LocalFile> OpenLocalLocked(uint64_t id);  // REQUIRES: mu_ held
  // Opens (or shares) the local file of `e` for writing; `truncate` empties
  // it, otherwise its committed bytes are copied in first when needed.
  Result<std::shared_ptr<LocalFile>> OpenForWrite(const proto::CkptEntry& e, bool truncate);
  // OpenForWrite of a file no handle of this mount has open; the caller
  // makes it the only one running for `e.id` (opening_).
  Result<std::shared_ptr<LocalFile>> OpenFirst(const proto::CkptEntry& e, bool truncate);
  // After `f` was truncated to 0: a failed fdatasync of it no longer matters.
  // REQUIRES: f.mu held.
  void ClearSyncFailed(LocalFile& f);
  // Commits `f` if it has uncommitted bytes; the status for fsync/close.
  Status CommitIfDirty(LocalFile& f);

  Options options_;
  std::function<std::shared_ptr<const ClusterView>()> current_view_;
  proto::ClientPool pool_;
  CkptChunks chunks_;
  Committer committer_;
  WriteBehind write_behind_;  // after committer_: its threads use it
  std::string files_dir_;  // STORE/ckpt/files

  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> paths_;                 // id -> path; guarded by mu_
  std::unordered_map<uint64_t, std::weak_ptr<LocalFile>> local_;    // id -> open local file; guarded by mu_
  std::unordered_set<uint64_t> opening_;  // ids in OpenFirst; guarded by mu_
  std::condition_variable first_open_done_;  // an id left opening_
  std::function<void(uint64_t id)> test_before_first_open_;
  // Ids whose local file had an fdatasync fail (LocalFile::sync_failed, kept
  // past the LocalFile): they commit nothing until written from the start
  // (truncated to 0). Guarded by mu_.
  std::unordered_set<uint64_t> sync_failed_;
  // An open file: its local file when open for writing here (or when this
  // mount writes it through another handle), else the entry it reads.
  struct Handle {
    std::shared_ptr<LocalFile> file;
    std::shared_ptr<const proto::CkptEntry> entry;
    // Opened for writing: only such a handle's close commits. A reader on
    // the writer's node shares `file` but must not commit a save under way.
    bool writable = false;
  };
  uint64_t NewHandle(Handle h);
  // Flush (`closing`) and Fsync: commits the handle's file if it is dirty.
  void Sync(fuse_req_t req, fuse_file_info* fi, bool closing);
  // A commit lists every chunk in one array (proto::kMaxArrayEntries): 256
  // GiB at 4 MiB chunks. Writes and truncations past it fail with EFBIG.
  uint64_t MaxFileSize() const { return uint64_t(proto::kMaxArrayEntries) * committer_.chunk_size(); }
  bool UncachedWrites() const { return options_.uncached_writes && options_.uncached_writes(); }
  std::unordered_map<uint64_t, Handle> handles_;                    // by fh; guarded by mu_
  std::atomic<fuse_session*> session_{nullptr};
  uint64_t next_fh_ = 1;                                            // guarded by mu_
};

}  // namespace hoard::fuse
