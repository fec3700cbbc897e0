// File: proto/wire_frames.h
//
// Frames larger than kMaxWireFrameBytes travel in pieces, so that a server
// socket can refuse any bigger frame (ZMQ_MAXMSGSIZE) from everyone.
//
// Why: ZeroMQ checks a peer's credentials only once the handshake's HELLO
// command has arrived, and it allocates (and fills) a command frame of
// whatever size the peer announces, up to ZMQ_MAXMSGSIZE, before that. With
// the old limit (96 MiB, a chunk plus a header) a stranger could make a node
// hold 92 MiB per connection without any key; with 64 KiB pieces it is
// 64 KiB, and the handshake timer ends such a connection within seconds.
//
// Format: a message whose frames all fit goes unchanged, unless `keep` > 0
// or its first frame starts with the layout's magic byte.
// Otherwise, after `keep` leading frames that go unchanged (a data channel's
// seal, followed by ciphertext that could look like anything, so a layout
// then always comes), a layout frame and then each frame's pieces in order:
//   layout  [0xC1]['W'][n u8][n x pieces u32 LE]
// 0xC1 is a byte msgpack never uses, so a header (a msgpack array) is never
// mistaken for a layout. Every frame has at least one piece; an empty frame
// is one empty piece.
//
// Thread-safety: functions are pure. Pieces ToWire makes share the original
// frame's buffer (zero copy) and release it when ZeroMQ has sent the last.
#pragma once

#include <cstddef>
#include <vector>

#include <zmq.hpp>

#include "common/result.h"

namespace hoard::proto {

// The most frames (after `keep`) a layout may describe: a header and a payload
// today, with room to grow.
inline constexpr size_t kMaxLayoutFrames = 8;

// The frames to send for `frames`: unchanged if `keep` is 0, each fits in
// kMaxWireFrameBytes and the first does not start like a layout, else the
// first `keep` frames, a layout and the pieces.
std::vector<zmq::message_t> ToWire(std::vector<zmq::message_t> frames, size_t keep = 0);

// How many frames follow `keep` once `wire` is joined: the layout's count, or
// the frames there are. kInvalidArgument for a malformed layout, or none after
// `keep` > 0 frames.
Result<size_t> FramesAfterJoin(const std::vector<zmq::message_t>& wire, size_t keep = 0);

// Joins a received message in place: the layout's pieces become whole frames
// again (copied together; a frame of one piece is moved). Without a layout the
// frames are left as they are (with `keep` 0). kInvalidArgument, with the
// frames unusable, for a layout that does not match the pieces that came or a
// missing one after `keep` > 0 frames.
Status FromWire(std::vector<zmq::message_t>& frames, size_t keep = 0);

}  // namespace hoard::proto
