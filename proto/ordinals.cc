#include "proto/ordinals.h"

#include <string>

namespace hoard::proto {

void OrdinalEncoder::Add(uint64_t ordinal) {
  uint64_t v = count_ == 0 ? ordinal : ordinal - last_ - 1;
  do {
    char byte = static_cast<char>(v & 0x7f);
    v >>= 7;
    if (v != 0) byte = static_cast<char>(byte | 0x80);
    bytes_.push_back(byte);
  } while (v != 0);
  last_ = ordinal;
  ++count_;
}

Status DecodeOrdinals(const std::vector<char>& bytes, uint64_t limit, uint64_t expected_count,
                      const std::function<void(uint64_t)>& fn) {
  uint64_t count = 0, last = 0;
  size_t i = 0;
  while (i < bytes.size()) {
    uint64_t v = 0;
    int shift = 0;
    while (true) {
      if (i >= bytes.size()) return Status::InvalidArgument("ordinal list ends inside a number");
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      if (shift == 63 && (b & 0x7e) != 0) return Status::InvalidArgument("ordinal list number overflows");
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
      shift += 7;
      if (shift > 63) return Status::InvalidArgument("ordinal list number is too long");
    }
    uint64_t ordinal = v;
    if (count > 0) {
      // last + 1 + v, refusing to wrap past 2^64.
      if (v >= limit || last + 1 + v < last) return Status::InvalidArgument("ordinal list gap is out of range");
      ordinal = last + 1 + v;
    }
    if (ordinal >= limit) {
      return Status::InvalidArgument("ordinal " + std::to_string(ordinal) + " is past the dataset's " +
                                     std::to_string(limit) + " chunks");
    }
    if (++count > expected_count) break;
    fn(ordinal);
    last = ordinal;
  }
  if (count != expected_count) {
    return Status::InvalidArgument("ordinal list holds " + std::string(count > expected_count ? "more than " : "") +
                                   std::to_string(count) + " ordinals, the report says " +
                                   std::to_string(expected_count));
  }
  return Status::Ok();
}

}  // namespace hoard::proto
