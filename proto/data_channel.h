// File: proto/data_channel.h
//
// The data channel: chunk bytes between members, sealed with AES-256-GCM
// instead of CURVE.
//
// Why. CURVE (proto/curve.h) encrypts with XSalsa20-Poly1305 on ZeroMQ's I/O
// thread, with a copy in and out: about 1 CPU second per GB at each end here,
// which made a checkpoint's replication and a peer read CPU-bound on a 2-core
// node (bench/RESULTS.md). AES-GCM with AES-NI/VAES (OpenSSL) costs ~0.15 s per
// GB, runs in place, and runs on the caller's and the server's worker threads,
// in parallel, instead of on one I/O thread.
//
// How. A server with a data channel (RpcServer::Options::data_endpoint) binds
// a second ROUTER socket without CURVE. A client asks for a session over its
// CURVE connection (OpenDataChannel): the server makes a random session id and
// a random 256-bit key, remembers them with the connection's User-Id, and
// replies; CURVE's encryption keeps the key secret, its ZAP check decides who
// gets one. The client then sends the requests UsesDataChannel names to the
// data socket (same host as its CURVE endpoint, the port from the reply),
// every frame sealed; the server answers sealed. Everything else stays on
// CURVE.
//
// A sealed message is the seal frame followed by the message's frames
// (header, payload), each encrypted in place (same length):
//   seal frame  [0xD5][version 1][session u64 LE][seq u64 LE][n u8][n GCM tags, 16 bytes each]
// The nonce of frame i is [direction][i][0][0][seq u64 LE] (direction 0 for a
// request, 1 for its reply), and the seal frame's first 19 bytes are each
// frame's associated data, so frames cannot be swapped, dropped, reordered or
// moved to another message. `seq` is the client's request id: the server
// accepts each session's ids only in increasing order (no replay), and a reply
// carries its request's id, so nonces never repeat under one key.
//
// A message the server cannot open (unknown or evicted session, bad tag,
// replayed id) gets a plain, unsealed error reply. A client that receives an
// unsealed reply drops its session and opens a new one; nothing unsealed is
// ever taken as data.
//
// Thread-safety: Seal/Open are pure (thread-local cipher contexts);
// DataSessions is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/result.h"
#include "proto/messages.h"

namespace hoard::proto {

// The requests sent over a data channel when there is one: those that move
// chunk bytes.
constexpr bool UsesDataChannel(MsgType type) {
  return type == MsgType::kGetChunk || type == MsgType::kPutCkptChunk || type == MsgType::kGetCkptChunk;
}

inline constexpr size_t kDataKeyBytes = 32;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kSealPrefixBytes = 19;
inline constexpr size_t kMaxSealedFrames = 4;

struct DataKey {
  uint64_t session = 0;
  std::array<uint8_t, kDataKeyBytes> key{};
};

enum class SealDirection : uint8_t { kRequest = 0, kReply = 1 };

// One frame to seal: `in` encrypted into `out` (the same bytes for in place).
struct SealIo {
  const uint8_t* in;
  uint8_t* out;
  size_t size;
};

inline SealIo SealInPlace(std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()};
}

// Encrypts `frames` and returns the seal frame that goes before them.
// kInvalidArgument for more than kMaxSealedFrames; kInternal if the cipher fails.
Result<std::string> Seal(const DataKey& key, SealDirection direction, uint64_t seq, std::span<const SealIo> frames);

// The seal frame's fields, before anything is decrypted.
struct SealInfo {
  uint64_t session = 0;
  uint64_t seq = 0;
  size_t frames = 0;
};
// True if `frame` starts like a seal frame (a plain header never does: it is a
// msgpack array).
bool LooksSealed(std::string_view frame);
// kInvalidArgument if `frame` is not a well-formed seal frame.
Result<SealInfo> ParseSeal(std::string_view frame);

// Decrypts `frames` in place and checks every tag. kPermissionDenied if any
// frame was not sealed with `key` in `direction` (forged, altered, reordered,
// or another session's); the frames' contents are then unspecified.
Status Open(const DataKey& key, SealDirection direction, std::string_view seal, std::span<std::span<uint8_t>> frames);
// Open for a received message, [seal, frame...]: on success the frames are
// opened in place and the seal frame is removed.
Status OpenMessage(const DataKey& key, SealDirection direction, std::vector<zmq::message_t>& message);

// A server's open sessions. Bounded: past `max_sessions` the oldest is
// forgotten, and its client opens a new one on its next call.
class DataSessions {
 public:
  struct Session {
    DataKey key;
    bool admin = false;  // opened over a connection with the admin key (proto/access.h)
    std::mutex mu;
    uint64_t last_seq = 0;  // guarded by mu
  };

  explicit DataSessions(size_t max_sessions = 65536) : max_(max_sessions) {}

  // A new session with a fresh random key. kInternal if the system has no randomness.
  Result<std::shared_ptr<Session>> Create(bool admin);
  // The session, or null.
  std::shared_ptr<Session> Find(uint64_t id) const;
  // Records `seq` as used; false if it is not above every seq used before.
  static bool Accept(Session& session, uint64_t seq);

  size_t size() const;

 private:
  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions_;  // guarded by mu_
  std::deque<uint64_t> order_;                                      // creation order; guarded by mu_
};

}  // namespace hoard::proto
