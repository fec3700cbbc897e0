// File: common/hash.h
//
// The hashes hoard uses, all xxHash (XXH3) from libxxhash:
//   - Checksum64: the per-chunk checksum, stored with every chunk and checked
//     before cached bytes are served or sent to a peer.
//   - Hash64 / Hash128: identities (file keys, node ids) and placement scores.
// None of these is cryptographic: they detect corruption, not tampering.
//
// Thread-safety: pure functions; StreamingChecksum is a value owned by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace hoard {

struct Hash128Value {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Hash128Value&) const = default;
  auto operator<=>(const Hash128Value&) const = default;
  // 32 lower-case hex digits, hi first.
  std::string Hex() const;
};

uint64_t Checksum64(const void* data, size_t len);
uint64_t Hash64(std::string_view bytes, uint64_t seed = 0);
Hash128Value Hash128(std::string_view bytes);

// Mixes two 64-bit values into one well-distributed 64-bit value
// (a splitmix64 finaliser over a ^ rotated b). Used for rendezvous scores,
// where hashing a (chunk, node) pair must be cheap.
inline uint64_t Mix64(uint64_t a, uint64_t b) {
  uint64_t x = a ^ ((b << 29) | (b >> 35)) ^ 0x9E3779B97F4A7C15ULL;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

// Checksum64 computed over data that arrives in pieces; Digest() of the pieces
// equals Checksum64 of their concatenation.
class StreamingChecksum {
 public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;

  void Update(const void* data, size_t len);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hoard
