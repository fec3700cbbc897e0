#include "coordinator/audit.h"

#include <gtest/gtest.h>

namespace hoard {
namespace {

TEST(AuditTest, ALineSaysWhoWhatAndHowItEnded) {
  const proto::Caller hook{.uid = 1000, .job = "4242", .host = "gpu7"};
  EXPECT_EQ(AuditLine(proto::KeyClass::kClient, "LeaseTake", "imagenet", &hook, Status::Ok()),
            "key=client op=LeaseTake target=imagenet claimed_uid=1000 claimed_job=4242 claimed_host=gpu7 result=ok");
  EXPECT_EQ(AuditLine(proto::KeyClass::kAdmin, "DatasetRemove", "ds", nullptr, Status::NotFound("dataset ds does not exist")),
            "key=admin op=DatasetRemove target=ds result=\"NotFound: dataset ds does not exist\"");
  const proto::Caller none;
  EXPECT_EQ(AuditLine(proto::KeyClass::kInsecure, "Warm", "ds", &none, Status::Ok()),
            "key=insecure op=Warm target=ds result=ok")
      << "claims not made are not written";
}

TEST(AuditTest, ClaimsCannotForgeFields) {
  const proto::Caller forged{.uid = 0, .job = "x result=ok key=admin", .host = "a\"b"};
  EXPECT_EQ(AuditLine(proto::KeyClass::kClient, "LeaseTake", "ds", &forged, Status::Ok()),
            "key=client op=LeaseTake target=ds claimed_uid=0 claimed_job=\"x result=ok key=admin\" "
            "claimed_host=\"a\\\"b\" result=ok");
}

}  // namespace
}  // namespace hoard
