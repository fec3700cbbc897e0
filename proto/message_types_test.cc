// Walks HOARD_MESSAGE_TYPES (proto/message_types.h) and checks what the wire
// relies on: every number is one type's and no other number is accepted, each
// type has a name and an access class, and the functions generated from the
// list answer as their rows say. Who needs the admin key, what travels over
// the data channel and which types get small headers or payloads are listed
// here again on purpose: a change to them changes security or limits, and
// must be made in two places to be made at all.
#include "proto/message_types.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

#include "proto/access.h"
#include "proto/data_channel.h"
#include "proto/leader_client.h"
#include "proto/messages.h"

namespace hoard::proto {
namespace {

struct Row {
  MsgType type;
  uint32_t number;
  std::string_view name;
  MsgKind kind;
  MsgAccess access;
  MsgChannel channel;
  MessageLimits limits;
};

constexpr Row kRows[] = {
#define HOARD_TEST_ROW(name, number, body, kind, access, channel, header, payload) \
  {MsgType::k##name, number, #name, MsgKind::kind, MsgAccess::access, MsgChannel::channel, {header, payload}},
    HOARD_MESSAGE_TYPES(HOARD_TEST_ROW)
#undef HOARD_TEST_ROW
};

// A request's struct names its own row's type and a reply row's struct as its
// Reply; a reply's struct names neither (rpc_client/rpc_server read both).
template <typename Body>
concept NamesItsType = requires {
  Body::kType;
};
template <typename Body>
concept NamesAReply = requires {
  typename Body::Reply;
};
template <typename Body>
constexpr bool AgreesWithItsRow() {
  using Traits = TypeOfBody<Body>;
  if constexpr (Traits::kKind == MsgKind::kReply) {
    return !NamesItsType<Body> && !NamesAReply<Body>;
  } else if constexpr (NamesItsType<Body> && NamesAReply<Body>) {
    return Body::kType == Traits::kType && TypeOfBody<typename Body::Reply>::kKind == MsgKind::kReply;
  } else {
    return false;
  }
}
#define HOARD_TEST_AGREES(name, number, body, ...) \
  static_assert(AgreesWithItsRow<body>(), #body "'s kType or Reply disagrees with its row");
HOARD_MESSAGE_TYPES(HOARD_TEST_AGREES)
#undef HOARD_TEST_AGREES

std::set<MsgType> TypesWhere(bool (*pred)(const Row&)) {
  std::set<MsgType> out;
  for (const Row& r : kRows) {
    if (pred(r)) out.insert(r.type);
  }
  return out;
}

TEST(MessageTypesTest, EveryNumberIsOneNamedType) {
  std::set<uint32_t> numbers;
  std::set<std::string_view> names;
  for (const Row& r : kRows) {
    SCOPED_TRACE(std::string(r.name));
    EXPECT_GT(r.number, 0u);
    EXPECT_LE(r.number, 0xFFFFu);
    EXPECT_TRUE(numbers.insert(r.number).second) << "number used twice";
    EXPECT_TRUE(names.insert(r.name).second) << "name used twice";
    EXPECT_EQ(static_cast<uint32_t>(r.type), r.number);
    EXPECT_TRUE(IsKnownType(static_cast<uint16_t>(r.number)));
    EXPECT_FALSE(r.name.empty());
    EXPECT_EQ(TypeName(r.type), r.name);
  }
  for (uint32_t t = 0; t <= 0xFFFF; ++t) {
    if (numbers.count(t)) continue;
    EXPECT_FALSE(IsKnownType(static_cast<uint16_t>(t))) << t;
    EXPECT_STREQ(TypeName(static_cast<MsgType>(t)), "Unknown") << t;
  }
}

TEST(MessageTypesTest, OnlyTheOperatorsRequestsNeedTheAdminKey) {
  for (const Row& r : kRows) {
    SCOPED_TRACE(std::string(r.name));
    EXPECT_EQ(AccessOf(r.type), r.access);
    EXPECT_EQ(RequiresAdmin(r.type), r.access == MsgAccess::kAdmin);
    if (r.kind == MsgKind::kReply) {
      EXPECT_EQ(r.access, MsgAccess::kMember);
    }
  }
  const std::set<MsgType> admin = {MsgType::kDatasetAdd, MsgType::kDatasetRefresh, MsgType::kDatasetRemove,
                                   MsgType::kNodeDrain, MsgType::kNodeRemove,     MsgType::kDatasetSet,
                                   MsgType::kQuotaSet};
  EXPECT_EQ(TypesWhere([](const Row& r) { return r.access == MsgAccess::kAdmin; }), admin);
  EXPECT_FALSE(RequiresAdmin(static_cast<MsgType>(999)));
}

// What the client key (job hooks, users) may send: pinned, like the admin
// set, so widening it is a visible change.
TEST(MessageTypesTest, TheClientKeyReadsWarmsAndLeasesOnly) {
  const std::set<MsgType> client = {MsgType::kPing,          MsgType::kGetClusterMap, MsgType::kGetManifest,
                                    MsgType::kClusterStatus, MsgType::kDatasetList,   MsgType::kWarm,
                                    MsgType::kNodeStatus,    MsgType::kCkptList,      MsgType::kCkptStatus,
                                    MsgType::kLeaseTake,     MsgType::kLeaseRelease,  MsgType::kLeaseList,
                                    MsgType::kQuotaList};
  EXPECT_EQ(TypesWhere([](const Row& r) { return r.access == MsgAccess::kClient; }), client);
  for (const Row& r : kRows) {
    if (r.kind != MsgKind::kRequest) continue;
    SCOPED_TRACE(std::string(r.name));
    EXPECT_EQ(MayCall(KeyClass::kClient, r.type), client.count(r.type) == 1);
    EXPECT_EQ(MayCall(KeyClass::kMember, r.type), r.access != MsgAccess::kAdmin);
    EXPECT_TRUE(MayCall(KeyClass::kAdmin, r.type));
    EXPECT_TRUE(MayCall(KeyClass::kInsecure, r.type));
  }
  for (MsgType t : {MsgType::kRegisterNode, MsgType::kHeartbeat, MsgType::kCkptCreate, MsgType::kCkptCommit,
                    MsgType::kPutCkptChunk, MsgType::kGetChunk, MsgType::kDatasetAdd, MsgType::kNodeDrain}) {
    EXPECT_FALSE(MayCall(KeyClass::kClient, t)) << TypeName(t);
  }
}

TEST(MessageTypesTest, OnlyChunkRequestsUseTheDataChannel) {
  for (const Row& r : kRows) {
    SCOPED_TRACE(std::string(r.name));
    EXPECT_EQ(UsesDataChannel(r.type), r.channel == MsgChannel::kData);
    if (r.kind == MsgKind::kReply) {
      EXPECT_EQ(r.channel, MsgChannel::kCurve);
    }
  }
  const std::set<MsgType> data = {MsgType::kGetChunk, MsgType::kPutCkptChunk, MsgType::kGetCkptChunk};
  EXPECT_EQ(TypesWhere([](const Row& r) { return r.channel == MsgChannel::kData; }), data);
  EXPECT_FALSE(UsesDataChannel(static_cast<MsgType>(999)));
}

// Which requests a client may send twice (proto::LeaderClient after a lost
// reply): listed again here, as a change decides whether a takeover can
// apply a request twice. Only requests; never a reply or an unknown type.
TEST(MessageTypesTest, OnlyReadsHeartbeatsAndSettingsAreIdempotent) {
  const std::set<MsgType> idempotent = {
      MsgType::kPing,       MsgType::kGetClusterMap, MsgType::kGetManifest,  MsgType::kClusterStatus,
      MsgType::kDatasetList, MsgType::kCkptLookup,   MsgType::kCkptList,     MsgType::kCkptStatus,
      MsgType::kGetChunk,   MsgType::kNodeStatus,    MsgType::kGetCkptChunk, MsgType::kRegisterNode,
      MsgType::kHeartbeat,  MsgType::kCkptSession,   MsgType::kWarm,         MsgType::kNodeDrain,
      MsgType::kCkptSetAttr, MsgType::kDatasetSet,   MsgType::kQuotaSet,     MsgType::kQuotaList,
      MsgType::kLeaseTake,   MsgType::kLeaseRelease, MsgType::kLeaseList};
  EXPECT_EQ(TypesWhere([](const Row& r) { return IsIdempotent(static_cast<uint16_t>(r.type)); }), idempotent);
  for (const Row& r : kRows) {
    if (r.kind == MsgKind::kReply) {
      EXPECT_FALSE(IsIdempotent(static_cast<uint16_t>(r.type))) << r.name;
    }
  }
  for (MsgType t : {MsgType::kCkptCommit, MsgType::kDatasetAdd, MsgType::kCkptCreate, MsgType::kCkptLock}) {
    EXPECT_FALSE(IsIdempotent(static_cast<uint16_t>(t))) << TypeName(t);
  }
  EXPECT_FALSE(IsIdempotent(999));
}

// The requests LeaderClient resends with `retry` set, whose handlers count
// finding their own effect as success: pinned, like the idempotent ones.
TEST(MessageTypesTest, OnlyNamespaceAndMembershipChangesAreResent) {
  std::set<MsgType> resent;
#define HOARD_TEST_RESENT(name, number, body, kind, access, channel, header, payload) \
  if constexpr (Resendable<body>) resent.insert(MsgType::k##name);
  HOARD_MESSAGE_TYPES(HOARD_TEST_RESENT)
#undef HOARD_TEST_RESENT
  const std::set<MsgType> want = {MsgType::kDatasetAdd, MsgType::kDatasetRemove, MsgType::kNodeRemove,
                                  MsgType::kCkptCreate, MsgType::kCkptRename,    MsgType::kCkptRemove,
                                  MsgType::kCkptCommit};
  EXPECT_EQ(resent, want);
  for (MsgType t : resent) EXPECT_FALSE(IsIdempotent(static_cast<uint16_t>(t))) << TypeName(t) << ": one or the other";
}

TEST(MessageTypesTest, LimitsAreTheRowsAndOnlyDataPathTypesDiffer) {
  for (const Row& r : kRows) {
    SCOPED_TRACE(std::string(r.name));
    EXPECT_EQ(LimitsOf(r.type).header, r.limits.header);
    EXPECT_EQ(LimitsOf(r.type).payload, r.limits.payload);
    EXPECT_TRUE(r.limits.header == kSmallHeaderBytes || r.limits.header == kMaxHeaderBytes);
    EXPECT_TRUE(r.limits.payload == 0 || r.limits.payload == kMaxPayloadBytes);
  }
  const std::set<MsgType> small_header = {MsgType::kPing,         MsgType::kOpenDataChannel, MsgType::kGetChunk,
                                          MsgType::kGetCkptChunk, MsgType::kScrub,           MsgType::kPutCkptChunk};
  EXPECT_EQ(TypesWhere([](const Row& r) { return r.limits.header == kSmallHeaderBytes; }), small_header);
  // Only PutCkptChunk carries bytes to a server; the others are replies.
  const std::set<MsgType> payload = {MsgType::kPutCkptChunk, MsgType::kChunkData, MsgType::kManifestPart,
                                     MsgType::kCkptChunkData};
  EXPECT_EQ(TypesWhere([](const Row& r) { return r.limits.payload > 0; }), payload);
  EXPECT_EQ(LimitsOf(static_cast<MsgType>(999)).header, kMaxHeaderBytes);
  EXPECT_EQ(LimitsOf(static_cast<MsgType>(999)).payload, 0u);
}

}  // namespace
}  // namespace hoard::proto
