#include "fuse/chunk_reader.h"

#include <algorithm>
#include <utility>

#include "striping/chunking.h"

namespace hoard::fuse {

ChunkReader::ChunkReader(Options options, std::function<std::shared_ptr<const ClusterView>()> current_view)
    : options_(std::move(options)),
      local_(LocalChunks::Options{.local_store = options_.local_store,
                                  .read_tier_dir = options_.read_tier_dir,
                                  .read_tier_bytes = options_.read_tier_bytes,
                                  .read_tier_min_free = options_.read_tier_min_free,
                                  .logger = options_.logger},
             &counters_),
      cache_(ChunkCache::Options{.capacity_bytes = options_.memory_cache_bytes,
                                 // Read-ahead must leave room in the memory cache for what readers use.
                                 .ahead_max_bytes =
                                     std::min(options_.readahead_max_bytes, options_.memory_cache_bytes / 2),
                                 .ahead_ttl = options_.readahead_ttl,
                                 .clock = options_.clock},
             &counters_),
      remote_(RemoteChunks::Options{.peer_timeout = options_.peer_timeout,
                                    .peer_connect_timeout = options_.peer_connect_timeout,
                                    .suspect_for = options_.suspect_for,
                                    .slow_after = options_.slow_after,
                                    .hedge = options_.hedge,
                                    .logger = options_.logger,
                                    .clock = options_.clock,
                                    .context = options_.context,
                                    .origin = options_.origin,
                                    .open_origin = options_.open_origin,
                                    .on_newer_placement = options_.on_newer_placement},
              std::move(current_view), &counters_),
      ahead_(Readahead::Options{.chunks = options_.readahead_chunks,
                                .threads = options_.readahead_threads,
                                .sequential_slack = options_.sequential_slack},
             &local_, &cache_, &counters_, [this](const AheadTask& task) { FetchAhead(task); }) {}

ChunkReader::~ChunkReader() = default;

Result<ChunkReader::Bytes> ChunkReader::FetchRemote(const MountedDataset& ds, uint32_t entry, uint32_t index) {
  const ChunkKey key = ds.manifest().chunk_key(entry, index);
  if (Bytes b = cache_.Use(key)) return b;
  auto fetch = [&]() -> Fetched {
    // A transfer (a read-ahead) that ended between the lookup above and
    // this flight left the chunk in the cache: no second fetch.
    if (Bytes b = cache_.Use(key)) return {b};
    // So may one that had this node's agent store the chunk (it keeps no
    // copy in memory then): read that copy, not the network.
    if (Bytes b = local_.ReadCopy(ds, entry, index)) return {b};
    Result<Bytes> f = remote_.Fetch(ds, entry, index);
    if (f.ok()) {
      cache_.Remember(key, *f, /*ahead=*/false);
      local_.KeepCopy(ds, key, *f);
    }
    return {std::move(f)};
  };
  bool leader = false;
  Fetched fetched = flights_.Do(key, fetch, &leader);
  // We joined a read-ahead transfer, which gives up where a demand read goes
  // on (it never reads the origin itself): try again as our own. The retry
  // may join the next read-ahead of the same chunk, so after a few such
  // joins the demand read fetches on its own, outside the flight. A failed
  // demand transfer is the answer for everyone who joined it.
  for (int joins = 1; !fetched.bytes.ok() && fetched.ahead; ++joins) {
    if (joins == 3) return fetch().bytes;
    fetched = flights_.Do(key, fetch, &leader);
  }
  Result<Bytes> r = std::move(fetched.bytes);
  if (!leader && r.ok()) {
    // We joined another transfer, maybe a read-ahead one, which left the
    // chunk among those read ahead: it is used now.
    (void)cache_.Use(key);
  }
  return r;
}

Result<ChunkReader::Bytes> ChunkReader::FetchRange(const MountedDataset& ds, uint32_t entry, uint32_t index,
                                                   uint64_t offset, uint64_t length, uint64_t* at) {
  *at = offset;
  // The whole chunk is worth keeping (memory, read tier) like any other.
  if (offset == 0 && length == ChunkLength(ds.manifest().entry(entry).size, ds.manifest().chunk_size(), index)) {
    return FetchRemote(ds, entry, index);
  }
  if (Bytes b = cache_.Use(ds.manifest().chunk_key(entry, index))) return b;
  *at = 0;
  return remote_.FetchRange(ds, entry, index, offset, length);
}

void ChunkReader::FetchAhead(const AheadTask& task) {
  // A demand read may have fetched it meanwhile, or the node agent stored it.
  if (cache_.Peek(task.key) != nullptr) return;
  if (local_.Held(task.key)) return;
  counters_.readahead_chunks.fetch_add(1, std::memory_order_relaxed);
  bool transferred = false;  // by this read-ahead (only a flight's leader runs `fetch`)
  auto fetch = [&]() -> Fetched {
    // A demand read that ended between the check above and this flight
    // left the chunk in the cache: no second transfer.
    if (Bytes b = cache_.Peek(task.key)) return {b, /*ahead=*/true};
    transferred = true;
    Result<Bytes> f = remote_.FetchAhead(*task.ds, task.entry, task.index);
    // This node's own agent may have stored it while serving us (it owns
    // it): the demand read will open the file, so keep no second copy.
    if (f.ok() && !local_.Held(task.key)) {
      cache_.Remember(task.key, *f, /*ahead=*/true);
      local_.KeepCopy(*task.ds, task.key, *f);
    }
    return {std::move(f), /*ahead=*/true};
  };
  Result<Bytes> r = flights_.Do(task.key, fetch).bytes;
  // Bytes a demand read fetched, which this read-ahead merely joined or
  // found cached, are not read-ahead bytes.
  if (r.ok()) {
    if (transferred) counters_.readahead_bytes.fetch_add((*r)->size(), std::memory_order_relaxed);
  } else {
    // Silent: the demand read of the chunk tries again, and reports.
    counters_.readahead_failures.fetch_add(1, std::memory_order_relaxed);
    options_.logger->debug("read-ahead of {} of {}: {}", task.key.Name(), task.ds->name, r.status().ToString());
  }
}

}  // namespace hoard::fuse
