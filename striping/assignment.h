// File: striping/assignment.h
//
// The stripe assignment of a dataset version: which node owns which chunk. It
// is a pure function of the manifest, the member list and the replica count,
// so the coordinator never ships a table: every party computes the part it
// needs, and they agree because they iterate chunks in the same order
// (ascending chunk ordinal, i.e. file entry order, then chunk index).
//
// Thread-safety: pure functions over immutable inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "striping/manifest.h"
#include "striping/placement.h"

namespace hoard {

struct ChunkRef {
  uint32_t entry = 0;    // the file's entry index in the manifest
  uint32_t index = 0;    // chunk index within the file
  uint64_t ordinal = 0;  // chunk ordinal within the dataset
  uint64_t length = 0;   // bytes in this chunk
};

// Calls fn for every chunk of the dataset, in ordinal order.
void ForEachChunk(const Manifest& manifest, const std::function<void(const ChunkRef&)>& fn);

// The chunks member `member` owns (as one of `replicas` owners), in ordinal order.
std::vector<ChunkRef> OwnedChunks(const Manifest& manifest, const Placement& placement, int replicas,
                                  uint32_t member);

// One member's share of a dataset.
struct MemberShare {
  std::vector<uint64_t> ordinals;  // the chunks it owns, ascending
  uint64_t bytes = 0;              // their total length
};

// Every member's share (indexed like placement.members()).
std::vector<MemberShare> AssignAll(const Manifest& manifest, const Placement& placement, int replicas);

}  // namespace hoard
