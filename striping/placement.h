// File: striping/placement.h
//
// Which nodes own a chunk: weighted rendezvous (highest-random-weight) hashing.
// Every (chunk, node) pair gets a score -weight / ln(u), u uniform in (0,1)
// drawn from a hash of the pair; the k highest-scoring nodes own the chunk, in
// rank order (the first is the primary). Everyone who knows the member list
// computes the same owners, so placement needs no table and no coordination.
//
// Properties the tests check: a node's share of chunks is proportional to its
// weight, and when a node joins or leaves only the chunks it gains or loses
// move (about 1/N of them), all other owners stay.
//
// Thread-safety: a Placement is immutable after construction and may be
// shared by any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "striping/chunk_key.h"

namespace hoard {

struct PlacementMember {
  std::string name;   // node name, unique
  double weight = 1;  // > 0, e.g. the node's cache capacity in MiB
};

class Placement {
 public:
  // Members with a weight <= 0 never own anything. The order of `members`
  // does not matter: owners are reported as indices into members().
  explicit Placement(std::vector<PlacementMember> members);

  const std::vector<PlacementMember>& members() const { return members_; }

  // Fills `out` with up to `k` owners of the chunk (fewer when there are fewer
  // members with positive weight), highest score first.
  void Owners(uint64_t placement_hash, int k, std::vector<uint32_t>* out) const;
  std::vector<uint32_t> Owners(const ChunkKey& key, int k) const {
    std::vector<uint32_t> out;
    Owners(key.PlacementHash(), k, &out);
    return out;
  }
  // True if member `index` is one of the k owners.
  bool IsOwner(uint64_t placement_hash, int k, uint32_t index) const;

 private:
  std::vector<PlacementMember> members_;
  std::vector<uint64_t> name_hashes_;  // per member, seeds the pair hash
};

}  // namespace hoard
