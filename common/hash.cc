#include "common/hash.h"

#include <xxhash.h>

#include <cstdio>

namespace hoard {

std::string Hash128Value::Hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return std::string(buf, 32);
}

uint64_t Checksum64(const void* data, size_t len) { return XXH3_64bits(data, len); }

uint64_t Hash64(std::string_view bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

Hash128Value Hash128(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Hash128Value{h.low64, h.high64};
}

struct StreamingChecksum::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

StreamingChecksum::StreamingChecksum() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(state_->s);
}
StreamingChecksum::~StreamingChecksum() = default;

void StreamingChecksum::Update(const void* data, size_t len) {
  XXH3_64bits_update(state_->s, data, len);
}

uint64_t StreamingChecksum::Digest() const { return XXH3_64bits_digest(state_->s); }

}  // namespace hoard
