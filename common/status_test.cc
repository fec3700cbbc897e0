#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <iterator>
#include <utility>

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

// The errno -> Code table, row by row (status.h says why each row).
TEST(StatusTest, ErrnoTable) {
  const struct {
    int err;
    Code code;
  } kRows[] = {
      {ENOENT, Code::kNotFound},         {EINVAL, Code::kInvalidArgument},
      {ENAMETOOLONG, Code::kInvalidArgument},
      {EEXIST, Code::kAlreadyExists},    {ENOSPC, Code::kNoSpace},
      {EDQUOT, Code::kNoSpace},          {ENOTEMPTY, Code::kNotEmpty},
      {EISDIR, Code::kIsDirectory},      {ENOTDIR, Code::kNotDirectory},
      {ELOOP, Code::kNotDirectory},      {ESTALE, Code::kStale},
      {ETIMEDOUT, Code::kUnavailable},   {ECONNREFUSED, Code::kUnavailable},
      {EHOSTUNREACH, Code::kUnavailable}, {EAGAIN, Code::kUnavailable},
      {EWOULDBLOCK, Code::kUnavailable},
      // Not in the table: the rest is kIoError.
      {EIO, Code::kIoError},             {EACCES, Code::kIoError},
      {EPERM, Code::kIoError},           {EROFS, Code::kIoError},
      {EXDEV, Code::kIoError},           {EFBIG, Code::kIoError},
      {EBADF, Code::kIoError},           {EINTR, Code::kIoError},
      {0, Code::kIoError},               {-ENOENT, Code::kIoError},  // libnfs's rc must be negated first
  };
  for (const auto& row : kRows) {
    EXPECT_EQ(CodeFromErrno(row.err), row.code) << row.err << " " << std::strerror(row.err);
    Status s = Status::FromErrno(row.err, "op");
    EXPECT_EQ(s.code(), row.code) << row.err;
    EXPECT_EQ(s.message(), std::string("op: ") + std::strerror(row.err));
  }
}

// The Code -> errno direction the FUSE edge answers with, for every code.
// kUnavailable and below: nothing the application could act on differently;
// kStale is not ESTALE (status.h).
TEST(StatusTest, ErrnoForEveryCode) {
  const std::pair<Code, int> kRows[] = {
      {Code::kOk, 0},          {Code::kInvalidArgument, EINVAL}, {Code::kNotFound, ENOENT},
      {Code::kAlreadyExists, EEXIST}, {Code::kUnavailable, EIO}, {Code::kNoSpace, ENOSPC},
      {Code::kCorruption, EIO}, {Code::kIoError, EIO},           {Code::kStale, EIO},
      {Code::kInternal, EIO},  {Code::kNotEmpty, ENOTEMPTY},     {Code::kIsDirectory, EISDIR},
      {Code::kNotDirectory, ENOTDIR}, {Code::kPermissionDenied, EACCES}, {Code::kNotLeader, EIO},
  };
  ASSERT_EQ(std::size(kRows), static_cast<size_t>(Code::kNotLeader) + 1) << "a code without a row";
  for (const auto& [code, err] : kRows) EXPECT_EQ(ErrnoFromCode(code), err) << CodeName(code);
  EXPECT_EQ(ErrnoFromCode(static_cast<Code>(77)), EIO);
}

// A POSIX error the checkpoint namespace gets from its origin reaches the
// application as the same errno; and a code that some errno gives survives
// errno -> code -> errno -> code.
TEST(StatusTest, ErrnoRoundTrips) {
  for (int err : {ENOENT, EINVAL, EEXIST, ENOSPC, ENOTEMPTY, EISDIR, ENOTDIR, EIO}) {
    EXPECT_EQ(ErrnoFromCode(CodeFromErrno(err)), err) << std::strerror(err);
  }
  // Many errnos to one code: they come back as the code's errno.
  EXPECT_EQ(ErrnoFromCode(CodeFromErrno(EDQUOT)), ENOSPC);
  EXPECT_EQ(ErrnoFromCode(CodeFromErrno(ENAMETOOLONG)), EINVAL);
  EXPECT_EQ(ErrnoFromCode(CodeFromErrno(ELOOP)), ENOTDIR);
  EXPECT_EQ(ErrnoFromCode(CodeFromErrno(ESTALE)), EIO);
  EXPECT_EQ(ErrnoFromCode(CodeFromErrno(ETIMEDOUT)), EIO);
  for (Code c : {Code::kNotFound, Code::kInvalidArgument, Code::kAlreadyExists, Code::kNoSpace, Code::kNotEmpty,
                 Code::kIsDirectory, Code::kNotDirectory, Code::kIoError}) {
    EXPECT_EQ(CodeFromErrno(ErrnoFromCode(c)), c) << CodeName(c);
  }
  // Codes no errno gives do not come back: the errno they become means
  // something else coming in.
  EXPECT_EQ(CodeFromErrno(ErrnoFromCode(Code::kPermissionDenied)), Code::kIoError);
  EXPECT_EQ(CodeFromErrno(ErrnoFromCode(Code::kStale)), Code::kIoError);
  EXPECT_EQ(CodeFromErrno(ErrnoFromCode(Code::kUnavailable)), Code::kIoError);
}

TEST(StatusTest, WireCodesOutOfRangeBecomeInternal) {
  EXPECT_EQ(CodeFromWire(4), Code::kUnavailable);
  EXPECT_EQ(CodeFromWire(200), Code::kInternal);
  // The newest code crosses the wire (a standby's answer) and has its name.
  EXPECT_EQ(CodeFromWire(14), Code::kNotLeader);
  EXPECT_EQ(CodeFromWire(15), Code::kInternal);
  EXPECT_EQ(CodeName(Code::kNotLeader), "NotLeader");
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
