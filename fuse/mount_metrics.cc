// HoardFs::RegisterMetrics: what hoard-fuse shows on /metrics, read at scrape
// time from the counters the mount already keeps (ChunkReader::Counters,
// MountStats) and its latency histograms.
#include "fuse/hoard_fs.h"

#include <algorithm>

namespace hoard::fuse {

void HoardFs::RegisterMetrics(metrics::Registry* registry) {
  const ChunkReader::Counters& c = reader_.counters();
  auto load = [](const std::atomic<uint64_t>& a) {
    return [&a] { return double(a.load(std::memory_order_relaxed)); };
  };
  const char* bytes_help =
      "Bytes read for the mount's readers, by source: the local chunk store (this node's disk, read directly), "
      "files the kernel reads from a local chunk file itself (passthrough: their sizes, counted at open), a peer "
      "node agent (GetChunk), or the origin (no owner could serve it)";
  registry->AddCounter("hoard_mount_read_bytes_total", bytes_help, {{"source", "local"}}, load(c.local_bytes));
  registry->AddCounter("hoard_mount_read_bytes_total", bytes_help, {{"source", "passthrough"}},
                       load(stats_.passthrough_bytes));
  registry->AddCounter("hoard_mount_read_bytes_total", bytes_help, {{"source", "peer"}}, load(c.peer_bytes));
  registry->AddCounter("hoard_mount_read_bytes_total", bytes_help, {{"source", "origin"}}, load(c.origin_bytes));
  registry->AddGauge("hoard_mount_hit_ratio",
                     "Share of the bytes read through the mount that came from the local disk, passthrough files "
                     "included (0 before any read)",
                     {}, [this, &c] {
                       const double local = double(c.local_bytes.load(std::memory_order_relaxed)) +
                                            double(stats_.passthrough_bytes.load(std::memory_order_relaxed));
                       const double all = local + double(c.peer_bytes.load(std::memory_order_relaxed)) +
                                          double(c.origin_bytes.load(std::memory_order_relaxed));
                       return all == 0 ? 0.0 : local / all;
                     });
  registry->AddCounter("hoard_mount_reads_total", "Read requests the kernel sent the mount", {}, load(stats_.reads));
  registry->AddCounter("hoard_mount_passthrough_opens_total",
                       "Opens of dataset files the kernel reads from a local chunk file without the mount", {},
                       load(stats_.passthrough_opens));
  registry->AddCounter("hoard_mount_read_errors_total", "Read requests that failed (EIO and others)", {},
                       load(stats_.read_errors));
  registry->AddCounter("hoard_mount_corrupt_local_chunks_total",
                       "Local chunk files (the node's store or the read tier) that failed their check: never "
                       "served again, read elsewhere",
                       {}, load(c.corrupt_local_chunks));
  registry->AddCounter("hoard_mount_rechecked_ranges_total",
                       "Local reads whose bytes were checked again before they were served, because they were no "
                       "longer in the page cache (common/page_cache.h)",
                       {}, load(c.rechecked_ranges));
  registry->AddCounter("hoard_mount_range_fetches_total",
                       "Random reads of a chunk neither local nor in memory that fetched just their range from an "
                       "owner or the origin, not the whole chunk (their bytes are in hoard_mount_read_bytes_total)",
                       {}, load(c.range_fetches));
  registry->AddCounter("hoard_mount_peer_failures_total",
                       "Chunk requests to an owner that failed (the next owner or the origin was tried)", {},
                       load(c.peer_failures));
  const Hedger& h = reader_.hedger();
  registry->AddCounter("hoard_mount_overdue_requests_total",
                       "Chunk requests to peers or the origin still unanswered when their hedge delay passed (the "
                       "read then went on without them: a hedge, or the next source after a read-ahead gave up)",
                       {}, [&h] { return double(h.overdue()); });
  registry->AddCounter("hoard_mount_hedged_requests_total",
                       "Chunk requests sent to the next source (another owner, or the origin) while an earlier "
                       "request for the same chunk was still unanswered past its hedge delay",
                       {}, [&h] { return double(h.hedges()); });
  registry->AddCounter("hoard_mount_hedges_won_total",
                       "Hedged chunk requests whose answer was used (it came before the request it hedged)", {},
                       [&h] { return double(h.hedges_won()); });
  registry->AddCounter("hoard_mount_slow_peer_suspicions_total",
                       "Times a peer was skipped for leaving chunk requests unanswered past their hedge delay several "
                       "times in a row (as a dead one is)",
                       {}, [&h] { return double(h.slow_suspicions()); });
  registry->AddGauge("hoard_mount_hedge_delay_seconds",
                     "How long a chunk request may go unanswered before the next source is asked too (4x the p99 "
                     "of recent answers from peers, 0.1 to 1 s)",
                     {}, [&h] { return std::chrono::duration<double>(h.HedgeDelay()).count(); });
  const char* ckpt_help =
      "Bytes of committed checkpoint files read through the mount, by source: this node's own copies (read from "
      "its disk), another holder (GetCkptChunk), or the checkpoint origin";
  const CkptChunks& ck = ckpt_->chunks();
  registry->AddCounter("hoard_mount_ckpt_read_bytes_total", ckpt_help, {{"source", "local"}},
                       [&ck] { return double(ck.local_bytes()); });
  registry->AddCounter("hoard_mount_ckpt_read_bytes_total", ckpt_help, {{"source", "peer"}},
                       [&ck] { return double(ck.peer_bytes()); });
  registry->AddCounter("hoard_mount_ckpt_read_bytes_total", ckpt_help, {{"source", "origin"}},
                       [&ck] { return double(ck.origin_bytes()); });
  const char* sent_help =
      "Chunks of committed checkpoint files by when they reached their holders: while the file was being written "
      "(write-behind), or read back and sent by the commit at fsync/close; or not sent at all (reused: the "
      "committed generation's copies already held those bytes)";
  const Committer& cm = ckpt_->committer();
  registry->AddCounter("hoard_mount_ckpt_chunks_committed_total", sent_help, {{"sent", "ahead"}},
                       [&cm] { return double(cm.chunks_sent_ahead()); });
  registry->AddCounter("hoard_mount_ckpt_chunks_committed_total", sent_help, {{"sent", "at_commit"}},
                       [&cm] { return double(cm.chunks_sent_at_commit()); });
  registry->AddCounter("hoard_mount_ckpt_chunks_committed_total", sent_help, {{"sent", "reused"}},
                       [&cm] { return double(cm.chunks_reused()); });
  // The read tier's figures (0 without one).
  auto tier = [this](std::atomic<uint64_t> ReadTier::Counters::*field) {
    return [this, field] {
      const ReadTier* t = reader_.read_tier();
      return t == nullptr ? 0.0 : double((t->counters().*field).load(std::memory_order_relaxed));
    };
  };
  registry->AddGauge("hoard_mount_read_tier_bytes",
                     "Bytes of chunk copies the read tier holds on this node's disk (chunks read from peers)", {},
                     tier(&ReadTier::Counters::used_bytes));
  registry->AddGauge("hoard_mount_read_tier_capacity_bytes", "The most the read tier may hold (0: no tier)", {},
                     [this] {
                       const ReadTier* t = reader_.read_tier();
                       return t == nullptr ? 0.0 : double(t->capacity_bytes());
                     });
  registry->AddGauge("hoard_mount_read_tier_allowed_bytes",
                     "The most the read tier may hold now: its capacity, less what the node's datasets and "
                     "checkpoints take of the node's --capacity, and the disk's free space (0: no tier)",
                     {}, [this] {
                       const ReadTier* t = reader_.read_tier();
                       return t == nullptr ? 0.0
                                           : double(std::min(t->capacity_bytes(),
                                                             t->counters().allowed_bytes.load(std::memory_order_relaxed)));
                     });
  registry->AddCounter("hoard_mount_read_tier_stored_bytes_total", "Bytes of chunk copies written to the read tier",
                       {}, tier(&ReadTier::Counters::stored_bytes));
  registry->AddCounter("hoard_mount_read_tier_evicted_bytes_total",
                       "Bytes of chunk copies evicted from the read tier (its budget: capacity, the node's --capacity, or the disk low on space)", {},
                       tier(&ReadTier::Counters::evicted_bytes));
  registry->AddCounter("hoard_mount_read_tier_dropped_total",
                       "Chunk copies not kept: the write queue was full, no space, or a write error", {},
                       tier(&ReadTier::Counters::dropped_chunks));
  for (const char* op : OpLatency::kOps) {
    registry->AddHistogram("hoard_fuse_op_seconds", "Time the mount took to answer a FUSE operation, by operation",
                           {{"op", op}}, stats_.op_latency.Find(op));
  }
  registry->AddHistogram("hoard_origin_read_seconds",
                         "Latency of one origin (NFS) read call: a chunk, or a paced piece of one", {},
                         &reader_.origin_read_latency());
  registry->AddHistogram("hoard_peer_request_seconds",
                         "Latency of one GetChunk asked of a peer, with its busy retries", {},
                         &reader_.peer_latency());
}

}  // namespace hoard::fuse
