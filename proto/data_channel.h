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
// ever taken as data, nor as an error about the data (an unsealed "no space"
// or "permission denied" could come from anyone: it only means "start
// over").
//
// Before any of that, the data socket admits a connection only at its
// handshake (ZMTP PLAIN, checked by the process's ZAP handler: proto/
// curve.h): the client presents its session id and the session's token
// (DataChannel.token), and every message on that connection must be sealed
// for that session. A stranger's connection never gets past the handshake,
// so it cannot make the server hold a message; what it costs the server is
// one frame of at most kMaxWireFrameBytes (64 KiB, bigger frames travel in
// pieces: proto/wire_frames.h) and libzmq's buffers (about 2 x 8 KiB) until
// the handshake times out (2 s), for at most 256 such connections at once
// (proto/handshake_gate.h). docs/data-channel.md is the one-page spec.
//
// On the wire the seal frame is followed by a frame layout and the sealed
// frames' pieces (proto/wire_frames.h): ciphertext could look like anything,
// so the layout always comes.
//
// Sessions: one per client routing id on the CURVE socket (an id's new
// OpenDataChannel replaces its old session, so a member cannot push other
// members' sessions out by opening many), forgotten after 10 minutes unused,
// and at most `max_sessions` (the oldest go). A client keeps its routing id
// across reconnects, and ClientPool gives a closed client's id to its next
// new client (proto/rpc_client.h): so the sessions stay at about the number
// of clients open at once, not the number ever made.
//
// Thread-safety: Seal/Open are pure (thread-local cipher contexts);
// DataSessions is thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/mutex.h"
#include "common/result.h"
#include "proto/messages.h"

namespace hoard::proto {

// The requests sent over a data channel when there is one: those that move
// chunk bytes, the rows of HOARD_MESSAGE_TYPES marked kData.
constexpr bool UsesDataChannel(MsgType type) {
  switch (type) {
#define HOARD_MSG_CHANNEL(name, number, body, kind, access, channel, ...) \
  case MsgType::k##name:                                                  \
    return MsgChannel::channel == MsgChannel::kData;
    HOARD_MESSAGE_TYPES(HOARD_MSG_CHANNEL)
#undef HOARD_MSG_CHANNEL
  }
  return false;
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
// kInvalidArgument for none or more than kMaxSealedFrames; kInternal if the
// cipher fails. `seq` must never repeat for a key in one direction (it is
// the nonce): a client takes it from DataClientSession::NextSeq.
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

// A client's side of a session: the key, and the counter its request
// sequence numbers (the nonces) come from. Atomic, so that two threads
// sealing with one session can never use one nonce twice.
class DataClientSession {
 public:
  DataClientSession() = default;
  explicit DataClientSession(DataKey key) : key_(key) {}
  const DataKey& key() const { return key_; }
  uint64_t NextSeq() { return next_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  DataKey key_;
  std::atomic<uint64_t> next_{0};
};

// A server's open sessions (see the top for their bounds).
class DataSessions {
 public:
  struct Session {
    DataKey key;
    std::string token;  // presented at the data socket's handshake (hex)
    std::string owner;  // the routing id of the CURVE client that opened it
    KeyClass key_class = KeyClass::kClient;  // of the connection that opened it (proto/access.h)
    Mutex mu;
    uint64_t last_seq GUARDED_BY(mu) = 0;
    std::atomic<int64_t> last_used_ms{0};  // steady clock
  };

  explicit DataSessions(size_t max_sessions = 65536,
                        std::chrono::milliseconds idle = std::chrono::minutes(10))
      : max_(max_sessions), idle_(idle) {}

  // A new session with a fresh random key and token for connection `owner`,
  // replacing that connection's previous one. kInternal if the system has
  // no randomness.
  Result<std::shared_ptr<Session>> Create(KeyClass key_class, std::string owner);
  // The session, or null.
  std::shared_ptr<Session> Find(uint64_t id) const;
  // Whether `token` is session `id`'s (the handshake's check; constant time).
  bool CheckToken(uint64_t id, std::string_view token) const;
  // Records `seq` as used (and the session as used now); false if it is not
  // above every seq used before.
  static bool Accept(Session& session, uint64_t seq);

  size_t size() const;

 private:
  // Forgets sessions unused for `idle_`.
  void ExpireLocked() REQUIRES(mu_);
  void EraseLocked(uint64_t id) REQUIRES(mu_);

  const size_t max_;
  const std::chrono::milliseconds idle_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions_ GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> by_owner_ GUARDED_BY(mu_);
  std::deque<uint64_t> order_ GUARDED_BY(mu_);  // creation order
  int64_t last_sweep_ms_ GUARDED_BY(mu_) = 0;
};

// The ZAP User-Id a data socket connection is admitted with: "data:<id>".
std::string DataUserId(uint64_t session);

}  // namespace hoard::proto
