#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

#include "common/result.h"

namespace hoard {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  HOARD_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

Status CheckEven(int x) {
  HOARD_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(StatusTest, OkAndCodes) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::Unavailable("node2 timed out");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.ToString(), "Unavailable: node2 timed out");
  EXPECT_EQ(s.Annotate("read a.jpg").ToString(), "Unavailable: read a.jpg: node2 timed out");
}

TEST(StatusTest, FromErrnoMapsCodes) {
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write").code(), Code::kNoSpace);
  EXPECT_EQ(Status::FromErrno(ENOENT, "open").code(), Code::kNotFound);
  EXPECT_EQ(Status::FromErrno(EIO, "read").code(), Code::kIoError);
  EXPECT_NE(Status::FromErrno(ENOSPC, "write x").message().find("write x"), std::string::npos);
}

TEST(StatusTest, WireCodesOutOfRangeBecomeInternal) {
  EXPECT_EQ(CodeFromWire(4), Code::kUnavailable);
  EXPECT_EQ(CodeFromWire(200), Code::kInternal);
  EXPECT_EQ(CodeName(static_cast<Code>(77)), "Unknown");
}

TEST(ResultTest, ValueAndErrorPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(3).code(), Code::kInvalidArgument);
}

TEST(ResultTest, OkStatusWithoutValueIsInternal) {
  Result<int> r = Status::Ok();
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

}  // namespace
}  // namespace hoard
