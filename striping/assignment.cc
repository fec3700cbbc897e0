#include "striping/assignment.h"

namespace hoard {

void ForEachChunk(const Manifest& manifest, const std::function<void(const ChunkRef&)>& fn) {
  const uint64_t chunk_size = manifest.chunk_size();
  for (uint32_t e = 0; e < manifest.entry_count(); ++e) {
    const EntryRecord& r = manifest.entry(e);
    if (!r.is_file()) continue;
    const uint64_t n = ChunkCount(r.size, chunk_size);
    for (uint64_t i = 0; i < n; ++i) {
      fn(ChunkRef{e, static_cast<uint32_t>(i), r.first_chunk() + i, ChunkLength(r.size, chunk_size, i)});
    }
  }
}

std::vector<ChunkRef> OwnedChunks(const Manifest& manifest, const Placement& placement, int replicas,
                                  uint32_t member) {
  std::vector<ChunkRef> out;
  ForEachChunk(manifest, [&](const ChunkRef& c) {
    if (placement.IsOwner(manifest.chunk_key(c.entry, c.index).PlacementHash(), replicas, member)) {
      out.push_back(c);
    }
  });
  return out;
}

std::vector<MemberShare> AssignAll(const Manifest& manifest, const Placement& placement, int replicas) {
  std::vector<MemberShare> out(placement.members().size());
  std::vector<uint32_t> owners;
  ForEachChunk(manifest, [&](const ChunkRef& c) {
    placement.Owners(manifest.chunk_key(c.entry, c.index).PlacementHash(), replicas, &owners);
    for (uint32_t m : owners) {
      out[m].ordinals.push_back(c.ordinal);
      out[m].bytes += c.length;
    }
  });
  return out;
}

}  // namespace hoard
