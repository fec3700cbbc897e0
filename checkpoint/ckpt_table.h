// File: checkpoint/ckpt_table.h
//
// CkptTable is the checkpoint namespace the coordinator keeps (issue 6,
// checkpoint/README.md): every directory and file under MOUNT/checkpoints by
// path (proto/ckpt_messages.h: "" is the root, which always exists; the first
// component is the job, an ordinary top-level directory), each file's
// committed generation and where its copies are, which generations must be
// drained to the checkpoint origin, and the queue of operations the origin
// must see, in order (applied by the Publisher, publisher.h).
//
// Namespace rules are POSIX's: Create needs an existing parent directory;
// Rename replaces a file, or an empty directory by a directory, moves whole
// subtrees at once, and refuses to move a directory into itself
// (kInvalidArgument); Remove takes a file or an empty directory. Errors:
// kNotFound, kAlreadyExists, kNotEmpty, kIsDirectory, kNotDirectory,
// kInvalidArgument (a bad path, the root), kStale (Commit of a generation not
// above the current one, or reusing copies the current one does not have).
// Entries are files, directories and symlinks, each with an owner, a group,
// a mode and POSIX's three times: a change moves the entry's ctime, and a
// create, remove or rename moves its directories' mtime and ctime. Who may
// change what is the mount's to check (it knows the caller); the table
// applies. The root (checkpoints/ itself) is owned by root with mode 1777,
// like /tmp: any user may create a job directory and owns it.
//
// Old generations: a commit over a committed generation, or the removal
// (or replacement by rename) of a committed file, does not drop the old
// generation's copies at once: a mount may have it open (POSIX: an open file
// keeps its bytes after a rename over it or an unlink). The old generation
// is kept (CkptNode::old_gens; a removed file stays as an orphan, out of the
// namespace) until no mount's session holds it (SetSessions) and
// `retire_grace` has passed since it was superseded (and since this table
// was opened, so that mounts have told a restarted coordinator what they
// hold). Then CollectGarbage retires it: every replica file it used that no
// newer or held generation shares is queued for deletion on its holder
// (CkptDrop, handed out in Work replies and removed once the node reports it
// done), and so is its writer's whole-file copy if no live generation is in
// it. A commit reuses the copies of chunks it did not change
// (CkptEntry::chunk_gens), so a rewrite costs space and traffic only for the
// chunks that changed.
//
// Durability: every change is in the journal (ckpt_store.h, DATA/ckpt/)
// before the call returns, so a mount's fsync that waited for Commit survives
// a coordinator crash. A change is built as a CkptRecord, appended, and only
// then applied to memory by Apply(), the same function that replays the
// journal on Open: memory never runs ahead of the disk, and a failed append
// changes nothing. Ids come from a persisted counter and are never reused.
// Open refuses (kCorruption) a snapshot and journal that replay into a
// namespace no operations could have built: a cycle of parents, an entry
// under a file or a missing directory, an unsafe name, an origin operation on
// an unsafe path (CheckLoadedLocked; found by fuzz/ckpt_store_fuzz.cc).
//
// Parts: CkptTable is a façade (its methods are the coordinator's calls)
// over four parts, each in its own header, none thread-safe (all guarded by
// mu_): CkptNamespace (ckpt_namespace.h: the entries, paths, the tree's
// rules), CkptDrainQueue (ckpt_drain_queue.h: the undrained files, leases,
// flushes, files being written, the bandwidth budget), CkptOriginQueue
// (ckpt_origin_queue.h: the origin FIFO, commit markers) and CkptHolders
// (ckpt_holders.h: copies to delete, old generations, retention,
// re-replication and rebuild lists, the shown level). A change is built by
// the parts' helpers into one CkptRecord from the state before it, made
// durable and applied by SaveLocked, whose Apply hands it to every part:
// the one mutator of durable state, also the replay. What is not durable
// (leases, flushes, sessions, up nodes, rebuild lists sent) the façade sets
// on the parts directly.
//
// Drain (ckpt_drain_queue.h): a committed generation not yet at P is handed to one
// node by Work(): its writer if the writer is up, else the first up node that
// holds one of its chunks (it fetches the rest from the holders). Urgent
// (flushed) files first, then oldest commit first; at most
// max_tasks_per_node tasks per reply, each leased to its node: a task not
// reported within `lease` is handed to another node (staging names differ
// per node: see StagingPath). A node asks for work only between its rounds
// (proto::CkptWork), so its Work call ends its own leases: a task it did not
// get to in a round that stopped at a failed upload is handed to it again at
// once, not `lease` later (which, with the origin full, left a freed origin
// idle for up to two minutes). Drained(ok) queues its publish. Work
// walks the undrained files in order (an index kept by Apply), so its cost
// grows with the undrained backlog, not the namespace; keep_files lists every
// file id not released, which does grow with the namespace.
//
// The origin queue: rename/unlink/rmdir of entries that are (or will be,
// once the queue is applied) on the origin are queued in the same record as
// the namespace change, so they reach the origin in the order they happened
// and survive a restart. A publish is queued when an upload is reported,
// with the file's path at that moment; later renames follow it in the queue.
//
// Commit markers: a file whose name is in `commit_markers` is published only
// when every other non-marker file in the marker's directory and its
// subdirectories that was committed before the marker (commit order, not
// wall time) is P: its current generation renamed into place on the origin
// (a publish that failed for good keeps the marker held). (DCP's `step/.metadata` waits for `step/__0_0.distcp`;
// Megatron's `job/latest_checkpointed_iteration.txt` waits for everything in
// `job/iter_*/`.) Until then its upload waits in staging (uploaded_gen).
//
// Retention: a job's "checkpoints" are the entries directly in its
// directory, ordered by the newest commit inside each. Those beyond the
// newest `keep_last` are released file by file once each is P: the writer and
// replicas are cleared (reads go to the origin) and their ids leave
// `keep_files`. Marker files directly in the job directory are never
// released (tiny, and what a restore reads first). Nothing is released
// before P. A committed file a mount opens for writing (CkptSetAttr::reopen)
// is kept (again, if it was released) and not released until a commit of it
// reaches P, or for `reopen_hold` if none comes: nodes must not evict the
// chunks sent ahead for that commit.
//
// Lost holders (ckpt_holders.h): a node down for longer than the
// coordinator's loss timeout is lost. Every chunk of a committed, undrained
// generation that is left with fewer than replicas_wanted copies on nodes not
// lost gets new holders among the up nodes (rendezvous order, never a node
// already listed), added to its replicas durably; the lost node stays listed,
// since it may come back with its disk. A new holder is told at its next
// Work, whose reply then carries its rebuild list, and it fetches the chunk
// from the other holders (as after a lost disk). Until it has, a reader or
// drainer that asks it misses and asks the next holder. Only while some
// holder is up (a copy to fetch from), and never for a file already at P:
// the origin holds it.
//
// Shown level: Lookup, List and the status replies show a file committed at
// R as L while some chunk has fewer than replicas_wanted holders that count:
// up (SetUpNodes), and, for a holder Rereplicate gave, only once that node
// confirmed it holds its rebuild list (CkptWork.rebuilt echoing the list's
// rebuild_seq). Both the naming and the confirmation are journalled (the
// entry's `unconfirmed`), so after a coordinator restart a holder that had
// not confirmed still does not count, and gets its rebuild list at its next
// Work. The committed level itself (the journal's, and Commit's reply) never
// changes that way.
//
// Drain health (drain_health.h): the outcome of every upload (Drained) and
// of every origin operation of the publisher (OriginOpFailed, OriginOpDone)
// is recorded, so GetStatus and JobSummaries carry each file's last drain
// error and since when, and OriginHealth whether the origin takes the drain.
//
// Thread-safety: every public method may be called concurrently (RPC worker
// threads and the publisher thread). One mutex, mu_, guards all state and is
// held across the journal's fdatasync: namespace changes are serialised, which
// is what makes the journal order the namespace order. The origin-op listener
// is called with mu_ held, so it must only wake someone up (Publisher::Notify)
// and never call back into the table: lock order is CkptTable::mu_, then the
// listener's lock.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <spdlog/spdlog.h>

#include "origin/ckpt_origin.h"
#include "checkpoint/ckpt_drain_queue.h"
#include "checkpoint/ckpt_holders.h"
#include "checkpoint/ckpt_namespace.h"
#include "checkpoint/ckpt_origin_queue.h"
#include "checkpoint/ckpt_store.h"
#include "checkpoint/drain_health.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

class CkptTable {
 public:
  struct Options {
    std::string dir;  // required: DATA/ckpt
    std::shared_ptr<spdlog::logger> logger;  // required
    // Basenames of commit markers (see the top).
    std::vector<std::string> commit_markers = {".metadata", "latest", "latest_checkpointed_iteration.txt"};
    // Checkpoints of a job whose local copies stay after P (see the top).
    uint32_t keep_last = 2;
    // How long a file opened for writing (CkptSetAttr::reopen) is kept from
    // release without a commit: a writer that never commits (it only read,
    // or died) must not pin the file's copies for good.
    std::chrono::milliseconds reopen_hold{std::chrono::hours(1)};
    // A committed generation not at P after this long counts as overdue in
    // Status (it is not dropped or reordered for it).
    std::chrono::milliseconds drain_deadline{std::chrono::seconds(600)};
    // A drain task not reported within this long is handed out again.
    std::chrono::milliseconds lease{std::chrono::seconds(120)};
    // Drain tasks a node holds at once.
    uint32_t max_tasks_per_node = 4;
    // Rebuild list entries per CkptWork reply; a longer list takes several
    // replies (a message's arrays hold at most 65,536 entries).
    size_t rebuild_page = 16384;
    // Drain bandwidth of all nodes together, bytes/s, split evenly among the
    // up nodes in Work replies; 0 = unlimited.
    uint64_t drain_max_bytes_per_s = 0;
    // While datasets are being filled from the origin, the drain takes at
    // most this share of the origin traffic and leaves dataset reads the
    // rest: its budget is fill × share / (1 − share), so that a saturated
    // link settles at `share` for the drain. Never below drain_min_bytes_per_s
    // (the drain always moves), never above drain_max_bytes_per_s. Not
    // applied while a flushed job or an overdue file waits (the operator
    // asked for it, or the deadline passed). 1 turns the share off.
    double drain_share = 0.25;
    uint64_t drain_min_bytes_per_s = 16ull << 20;
    // How long a superseded or removed generation is kept at least (see
    // "Old generations"): longer than a mount takes to report an open.
    std::chrono::milliseconds retire_grace{std::chrono::seconds(15)};
    // A commit made while its file stays open for writing (CkptCommit.
    // writing) is not drained for this long unless a session says more.
    std::chrono::milliseconds writing_hold{std::chrono::seconds(5)};
    // Drops handed out per Work reply.
    size_t drop_page = 4096;
    CkptStore::Options store;
    Clock* clock = Clock::Real();  // leases
    std::function<int64_t()> now_unix_ms;  // null: the system clock
  };

  // What the publisher reports for an origin operation.
  enum class OpOutcome {
    kDone,        // applied (or found already applied)
    kUploadLost,  // a publish whose staging file is gone: drain it again
    kFailed,      // a permanent origin error: logged, the file stays below P
  };

  static Result<std::unique_ptr<CkptTable>> Open(Options options);

  // ---- mount -> coordinator (proto/ckpt_messages.h) ----
  Result<proto::CkptEntry> Lookup(const std::string& path) const;
  // Lookup for an open for reading: moves the atime first (relatime).
  Result<proto::CkptEntry> LookupForRead(const std::string& path);
  Result<proto::CkptListReply> List(const std::string& path) const;
  Result<proto::CkptEntry> Create(const proto::CkptCreate& req);
  Result<proto::CkptEntry> Rename(const proto::CkptRename& req);
  Result<uint64_t> Remove(const proto::CkptRemove& req);  // the removed id
  Result<proto::CkptEntry> SetAttr(const proto::CkptSetAttr& req);
  Result<proto::CkptEntry> Commit(const proto::CkptCommit& req);

  // ---- CLI -> coordinator ----
  Result<proto::CkptStatusReply> GetStatus(const proto::CkptStatus& req) const;
  std::vector<proto::CkptJobStatus> JobSummaries() const;  // every job
  // Whether the checkpoint origin takes the drain (`source` left empty).
  proto::CkptOriginHealth OriginHealth() const;
  // Totals for the metrics (drain_health.h).
  struct DrainStats {
    size_t failing_files = 0;
    size_t looping_files = 0;
    uint64_t lost_uploads = 0;   // uploads reported done that the publisher did not find
    uint64_t failures = 0;       // failed drain attempts (uploads and publishes)
    bool origin_failing = false;
    double origin_failing_s = 0;  // how long the origin has been failing (0: it is not)
  };
  DrainStats drain_stats() const;
  Result<proto::CkptJobStatus> Flush(const std::string& job);

  // ---- node -> coordinator (ckpt_drain.cc) ----
  // `up_nodes`: the names of the nodes up now (the coordinator's view).
  // With `rebuild`, the reply also lists every chunk of a committed, not
  // released generation that `node` should hold (as a replica holder, or
  // every chunk when it wrote the file), with the other holders to fetch it
  // from: a node that lost its disk rebuilds from peers, never the origin.
  // The list goes out Options::rebuild_page entries at a time: the replies
  // after the first carry the next pages unasked, each with its own seq.
  // `dataset_fill_bytes_per_s`: how fast datasets are being filled from the
  // origin right now (see Options::drain_share).
  // `rebuilt`: the node's CkptWork.rebuilt (the rebuild list it holds in
  // full), which confirms the copies Rereplicate gave it.
  // `dropped`: the node's CkptWork.dropped (the drops it carried out).
  proto::CkptWorkReply Work(const std::string& node, const std::set<std::string>& up_nodes, bool rebuild = false,
                            double dataset_fill_bytes_per_s = 0, uint64_t rebuilt = 0, uint64_t dropped = 0);
  // The nodes up now (the coordinator's view, after each change of it): the
  // level shown for a file (see "Shown level" above) counts only holders that
  // are up. Until the first call, levels are shown as committed.
  void SetUpNodes(const std::set<std::string>& up_nodes);
  // The drain budget of all nodes together, bytes/s (0 = unlimited), given
  // the datasets' fill rate.
  uint64_t DrainBudget(double dataset_fill_bytes_per_s) const;

  // New holders for the chunks whose copies are on `lost` nodes (see "Lost
  // holders" above), chosen among `up` but not `leaving` (nodes being
  // drained out of the cluster: they still serve what they hold). Durable
  // before it returns; an append that fails changes nothing (the next call
  // tries again).
  struct Rereplicated {
    size_t files = 0;
    size_t chunks = 0;
    std::vector<std::string> nodes;  // the new holders, told at their next Work
  };
  Result<Rereplicated> Rereplicate(const std::set<std::string>& up, const std::set<std::string>& lost,
                                   const std::set<std::string>& leaving = {});
  // Chunks given a new holder since this table was opened.
  uint64_t rereplicated_chunks() const { return rereplicated_chunks_.load(std::memory_order_relaxed); }
  Result<proto::CkptDrainedReply> Drained(const proto::CkptDrained& req);

  // ---- sessions (checkpoint/ckpt_sessions.h) ----
  // What every live mount session holds (generations open for reading) and
  // writes (files open for writing): held generations are not retired,
  // files being written are not drained. Each call replaces the last.
  // `mount` and `mount_writing`: the session that just reported (0 for a
  // change with no report, e.g. expiries) and what it writes: a commit that
  // mount made while writing (CkptCommit.writing) is drainable once it no
  // longer lists the file.
  void SetSessions(std::set<proto::CkptHold> holds, std::set<uint64_t> writing, uint64_t mount = 0,
                   const std::set<uint64_t>& mount_writing = {});
  // Retires old generations no one holds (see "Old generations"), durably.
  // Returns how many; the coordinator calls it periodically.
  Result<size_t> CollectGarbage();
  // Drops not yet done, over all nodes (tests, metrics).
  size_t pending_drops() const;
  // Old generations kept for readers, over all files (metrics).
  size_t old_generations() const;
  // Whether some live session holds generation `gen` of `id` (tests).
  bool TEST_held(uint64_t id, uint64_t gen) const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return holders_.held(id, gen);
  }

  // ---- the publisher ----
  // The oldest origin operation not yet done, if any.
  std::optional<OriginOp> NextOriginOp() const;
  // Removes operation `seq` from the queue, durably, with its consequence
  // (a publish done: the file is P, and retention may release old copies).
  Status OriginOpDone(uint64_t seq, OpOutcome outcome);
  // An attempt at `op` failed with `s` (`for_good`: it is reported kFailed
  // next, else retried): recorded for the status (drain_health.h).
  void OriginOpFailed(const OriginOp& op, const Status& s, bool for_good);
  // Called (with mu_ held: see the top) after operations were queued.
  void SetOriginOpListener(std::function<void()> listener);

  // The staging name of a generation's upload by `node`:
  // ".hoard-staging/<id>-<gen>-<node>". The node is in the name because a
  // task whose lease ran out is handed to another node while the first may
  // still be uploading: with one shared name, the late one's truncate and
  // writes could land in a file the publisher is renaming into place (a torn
  // file on the origin). A node must not run two uploads of one (id, gen)
  // at once (its own re-issued task included).
  static std::string StagingPath(uint64_t id, uint64_t gen, const std::string& node);
  // The node in a StagingPath ("" if it is not one).
  static std::string StagingNode(const std::string& tmp);

  // Test-only.
  CkptStore& TEST_store() { return store_; }

 private:
  using ChunkOf = CkptHolders::ChunkOf;

  explicit CkptTable(Options options);
  Status Load();

  // The one mutator: makes `r` durable (counters filled in here), applies
  // it, snapshots when due, and wakes the listener when it queued origin
  // operations. A failed append changes nothing.
  Status SaveLocked(CkptRecord r) REQUIRES(mu_);
  // Applies a durable record to every part (live and on replay).
  void Apply(const CkptRecord& r) REQUIRES(mu_);
  void ApplyPut(const CkptNode& n) REQUIRES(mu_);
  void ApplyDel(uint64_t id) REQUIRES(mu_);
  void IndexLocked(const CkptNode& n, bool add) REQUIRES(mu_);  // the parts' derived indexes
  CkptSnapshot SnapshotLocked() const REQUIRES(mu_);

  int64_t NowMs() const;
  int64_t NowNs() const;
  proto::CkptEntry ShownLocked(const CkptNode& n) const REQUIRES(mu_);  // with the shown level
  // Turns `gone` (a committed file removed or replaced) into an orphan in
  // `r`, or deletes it when nothing of it is left to read.
  void RemoveFileLocked(CkptRecord* r, CkptNode gone) REQUIRES(mu_);
  // Journals that `node` holds `chunks` (copies Rereplicate gave it): they
  // count from now on.
  Status ConfirmLocked(const std::string& node, const std::set<ChunkOf>& chunks) REQUIRES(mu_);
  // Queues publishes of held markers that are now ready.
  Status PublishReadyMarkersLocked() REQUIRES(mu_);
  // Releases copies past the job's newest keep_last checkpoints (P only).
  Status ApplyRetentionLocked(uint64_t job) REQUIRES(mu_);
  proto::CkptJobStatus JobStatusLocked(const CkptNode& job) const REQUIRES(mu_);

  Options options_;
  // Set by the constructor, read-only after.
  std::chrono::steady_clock::time_point opened_at_;
  bool wall_injected_ = false;  // Options::now_unix_ms was given (tests): NowNs follows it
  mutable Mutex mu_;
  CkptStore store_ GUARDED_BY(mu_);
  // The parts (each not thread-safe, guarded by mu_). Their durable state
  // changes only in Apply.
  CkptNamespace ns_ GUARDED_BY(mu_);         // the entries
  CkptDrainQueue drain_ GUARDED_BY(mu_);     // what to drain next, by whom, how fast
  CkptOriginQueue origin_ GUARDED_BY(mu_);   // the origin FIFO, commit markers
  CkptHolders holders_ GUARDED_BY(mu_);      // copies: drops, old generations, rebuilds, shown level
  DrainHealth health_ GUARDED_BY(mu_);       // not durable (see drain_health.h)
  std::atomic<uint64_t> rereplicated_chunks_{0};
  std::function<void()> listener_ GUARDED_BY(mu_);
  // By job: the checkpoint (entry directly in the job) of its last commit in
  // this process, so that commits into the same one skip the retention scan
  // (Commit). Not durable: the first commit after a restart scans.
  std::map<uint64_t, uint64_t> last_committed_checkpoint_ GUARDED_BY(mu_);
};

}  // namespace hoard
