// NodeAgent::RegisterMetrics: what hoard-node shows on /metrics. Every value
// is read from the counters the node already keeps (the ones it sends with
// its heartbeats, the chunk store's usage, the filler's and the peer source's
// latencies), at scrape time: nothing is counted twice.
#include "node/node_agent.h"

#include <ctime>

namespace hoard {
namespace {

struct CounterMetric {
  const char* key;  // in NodeAgent::Counters()
  const char* name;
  metrics::Type type;
  metrics::Labels labels;
  const char* help;
};

const std::vector<CounterMetric>& CounterMetrics() {
  using metrics::Type;
  static const std::vector<CounterMetric> table = {
      {"served_from_cache_bytes", "hoard_node_served_bytes_total", Type::kCounter, {{"source", "disk"}},
       "Chunk bytes this node served to mounts and peers, by where it got them: its disk (chunk store) or the "
       "origin (read through on a miss)"},
      {"served_from_origin_bytes", "hoard_node_served_bytes_total", Type::kCounter, {{"source", "origin"}}, ""},
      {"peer_fill_bytes", "hoard_node_fill_bytes_total", Type::kCounter, {{"source", "peer"}},
       "Chunk bytes this node fetched to fill its store or a read through (warm-up, misses), by source"},
      {"origin_read_bytes", "hoard_node_fill_bytes_total", Type::kCounter, {{"source", "origin"}}, ""},
      {"origin_reads", "hoard_node_origin_reads_total", Type::kCounter, {}, "Chunks this node read from the origin"},
      {"origin_range_reads", "hoard_node_origin_range_reads_total", Type::kCounter, {},
       "Chunk misses a random reader asked for a range of, answered with just that range read from the origin "
       "(nothing stored)"},
      {"chunk_requests", "hoard_node_chunk_requests_total", Type::kCounter, {},
       "GetChunk requests from mounts and peers"},
      {"chunk_cache_hits", "hoard_node_chunk_hits_total", Type::kCounter, {},
       "GetChunk requests answered from this node's disk"},
      {"chunk_errors", "hoard_node_chunk_errors_total", Type::kCounter, {}, "GetChunk requests that failed"},
      {"warm_fetched_chunks", "hoard_node_warm_fetched_chunks_total", Type::kCounter, {},
       "Chunks fetched by warm-up"},
      {"warm_fetched_bytes", "hoard_node_warm_fetched_bytes_total", Type::kCounter, {}, "Bytes fetched by warm-up"},
      {"ckpt_drained_bytes", "hoard_node_ckpt_drained_bytes_total", Type::kCounter, {},
       "Checkpoint bytes this node uploaded to the checkpoint origin"},
      {"ckpt_drained_files", "hoard_node_ckpt_drained_files_total", Type::kCounter, {},
       "Checkpoint files this node uploaded to the checkpoint origin"},
      {"ckpt_drain_failures", "hoard_node_ckpt_drain_failures_total", Type::kCounter, {},
       "Checkpoint uploads that failed (and were retried)"},
      {"ckpt_rebuilt_chunks", "hoard_node_ckpt_rebuilt_chunks_total", Type::kCounter, {},
       "Checkpoint replica chunks rebuilt from peers"},
      {"ckpt_evicted_files", "hoard_node_ckpt_evicted_files_total", Type::kCounter, {},
       "Local checkpoint files removed once on the origin"},
      {"ckpt_dropped_copies", "hoard_node_ckpt_dropped_copies_total", Type::kCounter, {},
       "Checkpoint replicas and whole-file copies deleted because no generation anyone may read uses them"},
      {"ckpt_repeated_uploads", "hoard_node_ckpt_repeated_uploads_total", Type::kCounter, {},
       "Checkpoint uploads of a generation this node had already uploaded 3 times (a drain loop: the coordinator "
       "does not find the uploads on its origin)"},
      {"ckpt_replica_bytes", "hoard_node_ckpt_replica_bytes", Type::kGauge, {},
       "Bytes of checkpoint replica chunks on this node's disk"},
      {"ckpt_file_bytes", "hoard_node_ckpt_file_bytes", Type::kGauge, {},
       "Bytes of whole checkpoint files written on this node"},
  };
  return table;
}

}  // namespace

void NodeAgent::RegisterMetrics(metrics::Registry* registry) {
  for (const CounterMetric& m : CounterMetrics()) {
    auto read = [this, key = std::string(m.key)] {
      const auto c = Counters();
      auto it = c.find(key);
      return it == c.end() ? 0.0 : double(it->second);
    };
    if (m.type == metrics::Type::kCounter) {
      registry->AddCounter(m.name, m.help, m.labels, read);
    } else {
      registry->AddGauge(m.name, m.help, m.labels, read);
    }
  }
  registry->AddGauge("hoard_node_hit_ratio", "Share of GetChunk requests answered from this node's disk (0 before any)",
                     {}, [this] {
                       const uint64_t requests = service_->counters().requests.load();
                       return requests == 0 ? 0.0 : double(service_->counters().cache_hits.load()) / double(requests);
                     });
  registry->AddGauge("hoard_store_used_bytes", "Bytes in the chunk store (chunk data and trailers)", {},
                     [this] { return double(store_->usage().used_bytes); });
  // One capacity for the three kinds on the node's disk (store/disk_usage.h),
  // as measured for the last heartbeat.
  registry->AddGauge("hoard_node_used_bytes",
                     "Bytes on this node's disk by kind: dataset chunks, the mount's read tier, checkpoint copies "
                     "(--capacity bounds their sum)",
                     {{"kind", "dataset"}}, [this] { return double(usage().dataset_bytes); });
  registry->AddGauge("hoard_node_used_bytes", "", {{"kind", "read_tier"}},
                     [this] { return double(usage().read_tier_bytes); });
  registry->AddGauge("hoard_node_used_bytes", "", {{"kind", "checkpoint"}},
                     [this] { return double(usage().checkpoint_bytes); });
  registry->AddGauge("hoard_store_capacity_bytes",
                     "The node's capacity (--capacity, or the disk's size), for every kind of hoard_node_used_bytes: the "
                     "node's placement weight", {},
                     [this] { return double(capacity_); });
  registry->AddGauge("hoard_store_chunks", "Chunks in the chunk store", {},
                     [this] { return double(store_->usage().chunks); });
  registry->AddCounter("hoard_store_evicted_chunks_total",
                       "Chunks removed from the store: removed datasets, copies no longer owned, old versions, "
                       "corrupt chunks",
                       {}, [this] { return double(store_->usage().removed_chunks); });
  registry->AddCounter("hoard_store_evicted_bytes_total", "Data bytes of the chunks removed from the store", {},
                       [this] { return double(store_->usage().removed_bytes); });
  registry->AddHistogram("hoard_origin_read_seconds",
                         "Latency of one origin (NFS) read call: a chunk, or a paced piece of one", {},
                         &filler_->origin_read_latency());
  registry->AddGauge("hoard_node_data_channel_sessions",
                     "Data channel sessions open on this node (proto/data_channel.h): about the most client connections open at once", {},
                     [this] { return double(server_->data_sessions()); });
  registry->AddCounter("hoard_node_rejected_requests_total",
                       "Requests refused as malformed, forged or replayed (on either socket); each is logged, "
                       "at most 10 lines a second",
                       {}, [this] { return double(server_->rejected()); });
  registry->AddCounter("hoard_node_handshakes_cut_total",
                       "Connections cut while still in their handshake because more than the cap were "
                       "(proto/handshake_gate.h): strangers holding connections open",
                       {}, [this] { return double(server_->handshakes_cut()); });
  registry->AddGauge("hoard_node_pending_handshakes",
                     "Connections accepted in the last handshake timeout that have not sent a message yet",
                     {}, [this] { return double(server_->handshakes_pending()); });
  registry->AddCounter("hoard_node_scrub_bytes_total",
                       "Bytes the scrubber read back from the disk and checked (node/scrubber.h)", {},
                       [this] { return double(scrubber_->progress().bytes_scrubbed); });
  registry->AddCounter("hoard_node_scrub_files_total", "Chunk files the scrubber checked", {},
                       [this] { return double(scrubber_->progress().items_scrubbed); });
  registry->AddCounter("hoard_node_corrupt_chunks_total",
                       "Chunk files found corrupt and quarantined, by the scrubber and by readers, since the "
                       "node was set up",
                       {}, [this] { return double(scrubber_->progress().corrupt_found + store_->corrupt_chunks()); });
  registry->AddGauge("hoard_node_scrub_pass_age_seconds",
                     "Seconds since the scrubber's last full pass ended (-1: none yet)", {}, [this] {
                       const int64_t end = scrubber_->progress().last_pass_end_unix;
                       return end == 0 ? -1.0 : double(std::time(nullptr) - end);
                     });
  registry->AddGauge("hoard_node_scrub_pass_progress_ratio",
                     "How far the running scrub pass got (by bytes); 1 when none runs", {}, [this] {
                       const Scrubber::Progress p = scrubber_->progress();
                       return !p.running || p.pass_bytes == 0 ? 1.0 : double(p.pass_bytes_done) / double(p.pass_bytes);
                     });
  registry->AddHistogram("hoard_peer_request_seconds",
                         "Latency of one GetChunk asked of a peer, with its busy retries", {},
                         &peer_source_->latency());
}

}  // namespace hoard
