#include "proto/wire_frames.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing.h"
#include "proto/messages.h"

namespace hoard::proto {
namespace {

std::vector<zmq::message_t> Message(const std::vector<std::string>& frames) {
  std::vector<zmq::message_t> out;
  for (const std::string& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

std::vector<std::string> Strings(const std::vector<zmq::message_t>& frames) {
  std::vector<std::string> out;
  for (const zmq::message_t& f : frames) out.push_back(f.to_string());
  return out;
}

TEST(WireFramesTest, FramesThatFitGoUnchanged) {
  const std::vector<std::string> frames = {"header", std::string(kMaxWireFrameBytes, 'p')};
  std::vector<zmq::message_t> wire = ToWire(Message(frames));
  EXPECT_EQ(Strings(wire), frames);
  ASSERT_TRUE(FromWire(wire).ok());
  EXPECT_EQ(Strings(wire), frames);
}

TEST(WireFramesTest, ABigFrameGoesInPiecesAndComesBackWhole) {
  for (size_t size : {kMaxWireFrameBytes + 1, size_t{5} << 20, (size_t{3} << 20) + 17}) {
    const std::vector<std::string> frames = {"header", testing::PseudoRandomBytes(size, 7), ""};
    std::vector<zmq::message_t> wire = ToWire(Message(frames));
    ASSERT_GT(wire.size(), frames.size()) << size;
    for (const zmq::message_t& f : wire) EXPECT_LE(f.size(), kMaxWireFrameBytes);
    Result<size_t> n = FramesAfterJoin(wire);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, frames.size());
    ASSERT_TRUE(FromWire(wire).ok());
    EXPECT_EQ(Strings(wire), frames) << size;
  }
}

// After a seal the bytes are ciphertext: a layout always follows, so no
// frame is ever taken for one by chance, and its absence is an error.
TEST(WireFramesTest, AfterKeptFramesALayoutAlwaysComes) {
  const std::vector<std::string> frames = {"seal", "\xC1W\x01\x01\x00\x00\x00", "payload"};
  std::vector<zmq::message_t> wire = ToWire(Message(frames), 1);
  ASSERT_EQ(wire.size(), 4u);
  EXPECT_EQ(wire[0].to_string(), "seal");
  ASSERT_TRUE(FromWire(wire, 1).ok());
  EXPECT_EQ(Strings(wire), frames);

  std::vector<zmq::message_t> bare = Message(frames);
  EXPECT_EQ(FramesAfterJoin(bare, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FromWire(bare, 1).code(), Code::kInvalidArgument);
}

TEST(WireFramesTest, ALayoutThatDoesNotMatchItsPiecesIsRefused) {
  auto layout = [](std::vector<uint32_t> counts, size_t declared) {
    std::string l = {char(0xC1), 'W', char(declared)};
    for (uint32_t c : counts) {
      for (int k = 0; k < 4; ++k) l.push_back(char((c >> (8 * k)) & 0xFF));
    }
    return l;
  };
  const std::vector<std::vector<std::string>> bad = {
      {layout({2}, 1), "a"},                 // fewer pieces than named
      {layout({1}, 1), "a", "b"},            // more
      {layout({0, 2}, 2), "a", "b"},         // a frame of no pieces
      {layout({}, 0)},                       // no frames
      {layout({1, 1}, 3), "a", "b"},         // count and length disagree
      {layout(std::vector<uint32_t>(9, 1), 9), "1", "2", "3", "4", "5", "6", "7", "8", "9"},  // too many
      {std::string("\xC1W", 2)},             // cut short
  };
  for (const auto& frames : bad) {
    std::vector<zmq::message_t> wire = Message(frames);
    EXPECT_EQ(FramesAfterJoin(wire).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(FromWire(wire).code(), Code::kInvalidArgument);
  }
  // And a good one, by hand.
  std::vector<zmq::message_t> good = Message({layout({2, 1}, 2), "ab", "cd", "e"});
  ASSERT_TRUE(FromWire(good).ok());
  EXPECT_EQ(Strings(good), (std::vector<std::string>{"abcd", "e"}));
}

// The pieces share the frame's buffer, which lives until the last is gone.
TEST(WireFramesTest, PiecesShareTheFrameUntilTheLastIsReleased) {
  static int freed = 0;
  freed = 0;
  auto* buffer = new std::string(testing::PseudoRandomBytes(300u << 10, 3));
  const char* base = buffer->data();
  std::vector<zmq::message_t> frames;
  frames.emplace_back(buffer->data(), buffer->size(),
                      [](void*, void* hint) {
                        delete static_cast<std::string*>(hint);
                        ++freed;
                      },
                      buffer);
  std::vector<zmq::message_t> wire = ToWire(std::move(frames));
  ASSERT_EQ(wire.size(), 1u + 5u);  // layout + 300 KiB in 64 KiB pieces
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(wire[1].data(), static_cast<const void*>(base)) << "a piece is a copy";
  EXPECT_EQ(wire[2].data(), static_cast<const void*>(base + kMaxWireFrameBytes));
  wire.pop_back();
  EXPECT_EQ(freed, 0) << "freed while pieces still point into it";
  ASSERT_EQ(FramesAfterJoin(wire).status().code(), Code::kInvalidArgument);  // a piece is missing now
  wire.clear();
  EXPECT_EQ(freed, 1);
}

}  // namespace
}  // namespace hoard::proto
