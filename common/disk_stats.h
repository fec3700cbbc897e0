// File: common/disk_stats.h
//
// How many bytes the block device under a path has read, from
// /sys/dev/block/MAJOR:MINOR/stat: what tells the scrubber (node/scrubber.h)
// that someone else is reading the disk, since the mount reads chunk files
// directly and the node agent never sees those reads.
//
// A path on a filesystem with no block device of its own (tmpfs, overlay)
// has no stats: Open fails and the caller does without.
//
// Thread-safety: BytesRead may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace hoard {

class DiskStats {
 public:
  static Result<DiskStats> Open(const std::string& path);
  // Bytes read from the device since boot (sectors of 512 bytes).
  Result<uint64_t> BytesRead() const;
  const std::string& stat_path() const { return stat_path_; }

 private:
  explicit DiskStats(std::string stat_path) : stat_path_(std::move(stat_path)) {}
  std::string stat_path_;
};

}  // namespace hoard
