// File: proto/ordinals.h
//
// A compact wire encoding of an ascending set of chunk ordinals, used by node
// reports (proto::DatasetReport::cached_ordinals) to say exactly which chunks
// a node holds. The coordinator combines these sets into per-chunk copy counts
// without computing anyone's placement, so its progress work is proportional
// to what nodes hold, not to members x chunks.
//
// Format: one unsigned LEB128 varint per ordinal: the first is the ordinal
// itself, each next one is (gap - 1) from the previous, so a run of
// consecutive chunks costs one byte each and a node's scattered 1/N share
// about log128(N) bytes per chunk.
//
// Thread-safety: an OrdinalEncoder belongs to one thread; DecodeOrdinals is pure.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace hoard::proto {

class OrdinalEncoder {
 public:
  // REQUIRES: ordinals strictly ascending.
  void Add(uint64_t ordinal);
  uint64_t count() const { return count_; }
  std::vector<char> Finish() { return std::move(bytes_); }

 private:
  std::vector<char> bytes_;
  uint64_t count_ = 0;
  uint64_t last_ = 0;
};

// Calls fn for every ordinal, in order. kInvalidArgument (and fn may have
// been called for a prefix) unless the bytes hold exactly `expected_count`
// well-formed, strictly ascending ordinals, all below `limit`: a report is
// untrusted input.
Status DecodeOrdinals(const std::vector<char>& bytes, uint64_t limit, uint64_t expected_count,
                      const std::function<void(uint64_t)>& fn);

}  // namespace hoard::proto
