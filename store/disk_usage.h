// File: store/disk_usage.h
//
// One capacity per node for everything hoard keeps on its disk (issue 33).
// A node's disk holds three kinds of bytes, written by two processes:
//   - dataset chunks: the node agent's chunk store (STORE/store/chunks,
//     store/chunk_store.h);
//   - checkpoint copies: replicas and the whole-file copies of files written
//     on this node (STORE/store/ckpt, store/replica_store.h; the agent writes
//     the replicas, the mount writes files/<id>);
//   - the read tier: the mount's copies of chunks it fetched over the network
//     (STORE/store/read-tier, fuse/read_tier.h, in hoard-fuse).
// The node agent's --capacity bounds their sum. Each process publishes what it
// holds in a small file the other reads:
//   STORE/store/node-usage   the agent (NodeUsageRecord): the capacity, its
//                            dataset and checkpoint bytes, and the bytes of
//                            the chunks it owns of warm datasets (what its
//                            warm-ups are filling), every heartbeat;
//   READ_TIER/usage          the mount (ReadTierUsage): what its read tier
//                            holds, and the most it may hold before it
//                            writes this file again (a copy is written only
//                            after the file says there is room for it).
// Both are text ("key value" lines; unknown keys are ignored), replaced
// atomically (written aside and renamed) and never fsynced: they are
// recomputed every second, and a lost one reads as absent.
//
// Who yields to whom:
//   1. Checkpoint copies not yet drained to the origin are the only copies of
//      those bytes: they are never dropped to make room, and always counted.
//   2. Dataset chunks: the chunk store admits a chunk only if datasets +
//      checkpoints + the read tier (counted up to its allowance) + the chunk
//      fit in the capacity (ChunkStore::SetOtherBytes).
//   3. The read tier, a cache of a cache, gets what is left: its allowance
//      (ReadTierAllowance) leaves room for the checkpoints and for the larger
//      of the datasets' bytes and what the warm-ups fill, so a warm-up never
//      waits for the tier. It evicts its oldest copies to stay within
//      ReadTierBudget::Allowed (on each store and on a timer, every second).
// The sum can pass the capacity only for the moment between a change of the
// allowance (a warm-up or a checkpoint grew) and the tier's next trim, by
// what it then gives back, and, as each process reads the other's figures as
// of its last write (a heartbeat), while both fill the same free room at once
// (the tier bounds that by growing a step a second: fuse/read_tier.h). A
// checkpoint written while everything is full makes the others shrink, never
// itself.
//
// Thread-safety: the functions are stateless; ReadTierBudget is immutable
// after construction and may be used from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

// What a node's disk holds, by kind.
struct NodeUsage {
  uint64_t dataset_bytes = 0;
  uint64_t read_tier_bytes = 0;
  uint64_t checkpoint_bytes = 0;
  uint64_t total() const { return dataset_bytes + read_tier_bytes + checkpoint_bytes; }
  bool operator==(const NodeUsage&) const = default;
};

// What the node agent publishes in STORE/store/node-usage.
struct NodeUsageRecord {
  uint64_t capacity_bytes = 0;  // --capacity; 0: only the disk bounds the node
  // The agent's view (read_tier_bytes: as last read from the tier's file).
  NodeUsage usage;
  // Bytes of the chunks this node owns of warm datasets: what its warm-ups
  // fill, held for them even before they have stored it.
  uint64_t dataset_wanted_bytes = 0;
  bool operator==(const NodeUsageRecord&) const = default;
};

// What the mount publishes in READ_TIER/usage.
struct ReadTierUsage {
  uint64_t used_bytes = 0;      // the copies' files now
  uint64_t reserved_bytes = 0;  // >= used_bytes: what the agent counts against the capacity
  bool operator==(const ReadTierUsage&) const = default;
};

// STORE/store/node-usage, for the chunk store's directory `store_dir`.
std::string NodeUsagePath(std::string_view store_dir);
// READ_TIER/usage.
std::string ReadTierUsagePath(std::string_view read_tier_dir);
// The read tier's directory by default: STORE/store/read-tier.
std::string DefaultReadTierDir(std::string_view store_dir);

Status WriteNodeUsage(const std::string& path, const NodeUsageRecord& record);
// kNotFound if there is no such file (no node agent ran on this store yet).
Result<NodeUsageRecord> ReadNodeUsage(const std::string& path);
Status WriteReadTierUsage(const std::string& path, const ReadTierUsage& usage);
// kNotFound if there is no such file (no read tier).
Result<ReadTierUsage> ReadReadTierUsage(const std::string& path);

// The most the read tier may hold by the node's capacity (not counting its
// own --read-tier-size or the disk): the capacity less the checkpoints and
// the larger of the datasets' bytes and what their warm-ups want. UINT64_MAX
// when the node has no --capacity.
uint64_t ReadTierAllowance(const NodeUsageRecord& node);

// How large the read tier may be now.
class ReadTierBudget {
 public:
  struct Options {
    std::string dir;               // the tier's directory (its disk's free space)
    std::string node_usage_path;   // "" = no node agent: only the size and the disk bound the tier
    uint64_t size_bytes = 0;       // --read-tier-size
    uint64_t min_free_bytes = 0;   // the disk keeps at least this much free
    // The disk's free bytes now; default statvfs(dir). nullopt: unknown.
    std::function<std::optional<uint64_t>()> disk_free;
  };
  explicit ReadTierBudget(Options options);

  // min(--read-tier-size, the node's allowance (ReadTierAllowance), what
  // the tier holds plus the disk's free space above min_free_bytes), for a
  // tier holding `tier_used` bytes.
  uint64_t Allowed(uint64_t tier_used) const;

 private:
  Options options_;
};

}  // namespace hoard
