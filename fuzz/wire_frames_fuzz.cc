// Fuzz target: joining a message's pieces (proto/wire_frames.h), which every
// server runs on every message, before anything else looks at it.
//
// Input: a flags byte, a frame count (0-9), then that many parts. Flag 1
// keeps the first frame whole (a data channel's seal). Flag 2 makes each
// part a recipe instead of the frame itself: a size (u32 LE, modulo 300 KiB)
// and a fill byte, so frames bigger than a piece are cheap to ask for.
//
// What must hold, beyond "no crash": FromWire and FramesAfterJoin fail only
// with kInvalidArgument and agree with each other; for recipes, what ToWire
// sends joins back to exactly the frames it was given, and no piece is
// bigger than kMaxWireFrameBytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "fuzz/fuzz_util.h"
#include "proto/messages.h"
#include "proto/wire_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hoard::proto;
  hoard::fuzz::InputReader in(data, size);
  const uint8_t flags = in.Byte();
  const size_t keep = (flags & 1) ? 1 : 0;
  const size_t count = in.Byte() % 10;
  std::vector<std::string> frames;
  for (size_t i = 0; i < count; ++i) {
    std::string_view part = in.Part();
    if (flags & 2) {
      uint32_t n = 0;
      std::memcpy(&n, part.data(), std::min<size_t>(4, part.size()));
      const char fill = part.size() > 4 ? part[4] : 'x';
      frames.emplace_back(n % (300u << 10), fill);
    } else {
      frames.emplace_back(part);
    }
  }
  std::vector<zmq::message_t> msg;
  for (const std::string& f : frames) msg.emplace_back(f.data(), f.size());
  if (flags & 2) {
    std::vector<zmq::message_t> wire = ToWire(std::move(msg), keep);
    for (size_t i = keep; i < wire.size(); ++i) {
      if (frames.size() - std::min(keep, frames.size()) <= kMaxLayoutFrames && wire[i].size() > kMaxWireFrameBytes) {
        std::abort();  // a piece no server would take
      }
    }
    hoard::Status s = FromWire(wire, keep);
    if (keep > 0 && frames.size() <= keep) {  // a seal over nothing: no sender makes one, every receiver refuses it
      if (s.ok()) std::abort();
      return 0;
    }
    if (frames.size() - std::min(keep, frames.size()) > kMaxLayoutFrames) return 0;  // not split: refused later
    if (!s.ok() || wire.size() != frames.size()) std::abort();
    for (size_t i = 0; i < frames.size(); ++i) {
      if (wire[i].to_string_view() != frames[i]) std::abort();
    }
    return 0;
  }
  hoard::Result<size_t> n = FramesAfterJoin(msg, keep);
  hoard::Status s = FromWire(msg, keep);
  if (!s.ok() && s.code() != hoard::Code::kInvalidArgument) std::abort();
  if (s.ok() != n.ok()) std::abort();
  if (s.ok() && msg.size() != keep + *n) std::abort();
  return 0;
}
