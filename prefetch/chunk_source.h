// File: prefetch/chunk_source.h
//
// ChunkSource is where a chunk may be found before going to the origin: the
// node agent's implementation (node/peer_source.h) asks the peers that own or
// owned it. Tests substitute their own.
//
// Thread-safety: implementations must allow Fetch from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "cluster/cluster_view.h"
#include "striping/assignment.h"

namespace hoard {

class ChunkSource {
 public:
  using Bytes = std::shared_ptr<const std::string>;
  virtual ~ChunkSource() = default;
  // The whole chunk, or kNotFound when no peer has it (any other error is
  // also a miss for the caller, which then reads the origin).
  virtual Result<Bytes> Fetch(const DatasetView& dataset, const ChunkRef& chunk) = 0;
};

}  // namespace hoard
