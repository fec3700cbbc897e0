#include "proto/wire_frames.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "proto/messages.h"

namespace hoard::proto {
namespace {

constexpr uint8_t kLayoutMagic = 0xC1;
constexpr uint8_t kLayoutTag = 'W';
constexpr size_t kLayoutPrefix = 3;

// One frame shared by its pieces; the last piece ZeroMQ releases frees it.
struct SharedFrame {
  explicit SharedFrame(zmq::message_t m, int pieces) : msg(std::move(m)), refs(pieces) {}
  zmq::message_t msg;
  std::atomic<int> refs;
};

void ReleasePiece(void*, void* hint) {
  auto* shared = static_cast<SharedFrame*>(hint);
  if (shared->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete shared;
}

size_t PiecesOf(size_t bytes) { return std::max<size_t>(1, (bytes + kMaxWireFrameBytes - 1) / kMaxWireFrameBytes); }

// By its first byte alone: anything else starting with it is a broken layout.
bool LooksLikeLayout(const zmq::message_t& frame) {
  return frame.size() >= 1 && static_cast<const uint8_t*>(frame.data())[0] == kLayoutMagic;
}

// The piece counts a layout frame names, checked against the frames after it.
Result<std::vector<uint32_t>> ParseLayout(const zmq::message_t& layout, size_t pieces_present) {
  const auto* b = static_cast<const uint8_t*>(layout.data());
  const size_t n = layout.size() >= kLayoutPrefix ? b[2] : 0;
  if (n == 0 || b[1] != kLayoutTag || n > kMaxLayoutFrames || layout.size() != kLayoutPrefix + 4 * n) {
    return Status::InvalidArgument("malformed frame layout (" + std::to_string(layout.size()) + " bytes, " +
                                   std::to_string(n) + " frames)");
  }
  std::vector<uint32_t> counts(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = b + kLayoutPrefix + 4 * i;
    counts[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    if (counts[i] == 0) return Status::InvalidArgument("frame layout names a frame of no pieces");
    total += counts[i];
  }
  if (total != pieces_present) {
    return Status::InvalidArgument("frame layout names " + std::to_string(total) + " pieces, " +
                                   std::to_string(pieces_present) + " came");
  }
  return counts;
}

}  // namespace

std::vector<zmq::message_t> ToWire(std::vector<zmq::message_t> frames, size_t keep) {
  keep = std::min(keep, frames.size());
  const bool fits = std::all_of(frames.begin() + keep, frames.end(),
                                [](const zmq::message_t& f) { return f.size() <= kMaxWireFrameBytes; });
  // After a seal the frames are ciphertext, which could look like a layout:
  // there, a layout always comes, so the receiver never has to guess. So does
  // one before a first frame that starts like a layout (no header does; any
  // bytes still go through unchanged).
  const bool plain = fits && keep == 0 && (frames.empty() || !LooksLikeLayout(frames[0]));
  if (plain || frames.size() - keep > kMaxLayoutFrames) return frames;
  std::vector<zmq::message_t> wire;
  for (size_t i = 0; i < keep; ++i) wire.push_back(std::move(frames[i]));
  std::string layout = {char(kLayoutMagic), char(kLayoutTag), char(frames.size() - keep)};
  for (size_t i = keep; i < frames.size(); ++i) {
    const uint32_t pieces = uint32_t(PiecesOf(frames[i].size()));
    for (int k = 0; k < 4; ++k) layout.push_back(char((pieces >> (8 * k)) & 0xFF));
  }
  wire.emplace_back(layout.data(), layout.size());
  for (size_t i = keep; i < frames.size(); ++i) {
    const size_t size = frames[i].size();
    if (size <= kMaxWireFrameBytes) {
      wire.push_back(std::move(frames[i]));
      continue;
    }
    const int pieces = int(PiecesOf(size));
    auto* shared = new SharedFrame(std::move(frames[i]), pieces);
    auto* data = static_cast<char*>(shared->msg.data());
    for (size_t off = 0; off < size; off += kMaxWireFrameBytes) {
      wire.emplace_back(data + off, std::min(kMaxWireFrameBytes, size - off), &ReleasePiece, shared);
    }
  }
  return wire;
}

Result<size_t> FramesAfterJoin(const std::vector<zmq::message_t>& wire, size_t keep) {
  if (keep > 0 && (wire.size() <= keep || !LooksLikeLayout(wire[keep]))) {
    return Status::InvalidArgument("no frame layout after the seal");
  }
  if (wire.size() <= keep || !LooksLikeLayout(wire[keep])) return wire.size() - std::min(keep, wire.size());
  Result<std::vector<uint32_t>> counts = ParseLayout(wire[keep], wire.size() - keep - 1);
  if (!counts.ok()) return counts.status();
  return counts->size();
}

Status FromWire(std::vector<zmq::message_t>& frames, size_t keep) {
  if (keep > 0 && (frames.size() <= keep || !LooksLikeLayout(frames[keep]))) {
    return Status::InvalidArgument("no frame layout after the seal");
  }
  if (frames.size() <= keep || !LooksLikeLayout(frames[keep])) return Status::Ok();
  Result<std::vector<uint32_t>> counts = ParseLayout(frames[keep], frames.size() - keep - 1);
  if (!counts.ok()) return counts.status();
  std::vector<zmq::message_t> joined;
  joined.reserve(keep + counts->size());
  for (size_t i = 0; i < keep; ++i) joined.push_back(std::move(frames[i]));
  size_t next = keep + 1;
  for (uint32_t pieces : *counts) {
    if (pieces == 1) {
      joined.push_back(std::move(frames[next++]));
      continue;
    }
    size_t bytes = 0;
    for (uint32_t k = 0; k < pieces; ++k) bytes += frames[next + k].size();
    zmq::message_t whole(bytes);
    auto* out = static_cast<char*>(whole.data());
    for (uint32_t k = 0; k < pieces; ++k, ++next) {
      if (frames[next].size() > 0) std::memcpy(out, frames[next].data(), frames[next].size());
      out += frames[next].size();
      frames[next].rebuild(0);  // let go of each piece as soon as it is copied
    }
    joined.push_back(std::move(whole));
  }
  frames = std::move(joined);
  return Status::Ok();
}

}  // namespace hoard::proto
