// Fuzz target: the data channel's sealed messages (proto/data_channel.h), the
// only decoder that a host without the cluster's CURVE keys can reach (the
// data socket has no CURVE), and the one a client runs on every reply.
//
// Input: a flags byte, the direction byte, the seq (u32), a frame count
// (0-5), that many frames as parts, then a byte offset (u32) and a mask.
// Flag 1 replaces frame 0 with the seal that Seal() makes for the other
// frames under a fixed key (so the fuzzer reaches the success path, which
// random bytes never do against AES-GCM); flag 2 then XORs the mask (forced
// non-zero) into the byte at the offset, counted over all frames.
//
// What must hold, beyond "no crash": ParseSeal and OpenMessage fail only
// with kInvalidArgument or kPermissionDenied; a message we sealed opens to
// exactly the frames sealed; a sealed message with any byte changed never
// opens; and nothing we did not seal opens (a seal of zero frames neither
// seals nor parses).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "fuzz/fuzz_util.h"
#include "proto/data_channel.h"

namespace hoard::proto {
namespace {

DataKey FixedKey() {
  DataKey k{.session = 0x1122334455667788ULL};
  for (size_t i = 0; i < k.key.size(); ++i) k.key[i] = static_cast<uint8_t>(i * 7 + 1);
  return k;
}

bool Documented(const Status& s) {
  return s.ok() || s.code() == Code::kInvalidArgument || s.code() == Code::kPermissionDenied;
}

}  // namespace
}  // namespace hoard::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hoard::proto;
  hoard::fuzz::InputReader in(data, size);
  const uint8_t flags = in.Byte();
  const SealDirection direction = (in.Byte() & 1) ? SealDirection::kReply : SealDirection::kRequest;
  const uint64_t seq = in.U32();
  const size_t count = in.Byte() % (kMaxSealedFrames + 2);
  std::vector<std::string> frames;
  for (size_t i = 0; i < count; ++i) frames.emplace_back(in.Part());
  const uint32_t offset = in.U32();
  const uint8_t mask = in.Byte() | 1;

  static const DataKey key = FixedKey();
  const bool sealed = (flags & 1) && !frames.empty();
  std::vector<std::string> plain(frames.begin() + (frames.empty() ? 0 : 1), frames.end());
  if (sealed) {
    std::vector<SealIo> io;
    for (size_t i = 1; i < frames.size(); ++i) io.push_back(SealInPlace(frames[i]));
    hoard::Result<std::string> seal = Seal(key, direction, seq, io);
    if (!seal.ok()) {
      // Too many frames, or none: nothing is sent.
      if (seal.status().code() != hoard::Code::kInvalidArgument || (io.size() <= kMaxSealedFrames && !io.empty())) {
        std::abort();
      }
      return 0;
    }
    frames[0] = *seal;
  }
  bool altered = false;
  if (sealed && (flags & 2)) {
    size_t total = 0;
    for (const std::string& f : frames) total += f.size();
    if (total > 0) {
      size_t at = offset % total;
      for (std::string& f : frames) {
        if (at < f.size()) {
          f[at] = static_cast<char>(f[at] ^ mask);
          altered = true;
          break;
        }
        at -= f.size();
      }
    }
  }

  // What a receiver does: recognise, parse, open.
  if (!frames.empty() && LooksSealed(frames[0])) {
    hoard::Result<SealInfo> info = ParseSeal(frames[0]);
    if (!Documented(info.status())) std::abort();
    if (info.ok() && (info->frames > kMaxSealedFrames ||
                      frames[0].size() != kSealPrefixBytes + kSealTagBytes * info->frames)) {
      std::abort();
    }
  }
  std::vector<zmq::message_t> message;
  for (const std::string& f : frames) message.emplace_back(f.data(), f.size());
  const hoard::Status opened = OpenMessage(key, direction, message);
  if (!Documented(opened)) std::abort();
  if (sealed && !altered) {
    if (!opened.ok() || message.size() != plain.size()) std::abort();
    for (size_t i = 0; i < plain.size(); ++i) {
      if (message[i].to_string_view() != plain[i]) std::abort();
    }
  }
  if (opened.ok() && (altered || !sealed)) std::abort();
  return 0;
}
