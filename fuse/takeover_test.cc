// What a serving process leaves for its successor on the same FUSE
// connection (fuse/supervisor.h), taken over by a second object as a
// restarted process would: the passthrough open table (Passthrough::Persist)
// and the INIT request with the resend that follows its replay (SessionIo).
// Dataset slots: NamespaceTest.ASuccessorGivesEachDatasetVersionItsSlot.
// The whole restart, with a real kernel mount and kill -9, is
// tests/e2e/test_mount_restart.py.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>
#include <linux/fuse.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/passthrough.h"
#include "fuse/session_io.h"
#include "fuse/systemd_fdstore.h"

namespace hoard::fuse {
namespace {

TEST(TakeoverTest, PassthroughOpensOutliveTheProcessThatCountedThem) {
  hoard::testing::TempDir dir;
  const std::string path = JoinPath(dir.path(), "open-files");
  auto log = spdlog::default_logger();
  {
    Passthrough first(log);
    ASSERT_TRUE(first.Persist(path, /*takeover=*/false).ok());
    first.Start(nullptr, /*enable=*/false);
    // Cached opens (no chunk file to back them): two of inode 7, one of 9.
    EXPECT_FALSE(first.Open(7, -1).passthrough);
    EXPECT_FALSE(first.Open(7, -1).passthrough);
    EXPECT_FALSE(first.Open(9, -1).passthrough);
    first.Release(9, false);
    EXPECT_EQ(first.open_inodes(), 1u);
  }  // the process dies: no release reaches it
  Passthrough successor(log);
  ASSERT_TRUE(successor.Persist(path, /*takeover=*/true).ok());
  successor.Start(nullptr, /*enable=*/false);
  EXPECT_EQ(successor.open_inodes(), 1u) << "the kernel still has inode 7 open twice";
  successor.Release(7, false);
  EXPECT_EQ(successor.open_inodes(), 1u);
  successor.Release(7, false);
  EXPECT_EQ(successor.open_inodes(), 0u);

  Passthrough fresh(log);
  ASSERT_TRUE(fresh.Persist(path, /*takeover=*/false).ok());
  EXPECT_EQ(fresh.open_inodes(), 0u);
}

// A FUSE INIT request as the kernel sends it: header, then fuse_init_in.
std::string InitRequest(uint64_t unique) {
  std::string req(sizeof(fuse_in_header) + sizeof(fuse_init_in), '\0');
  auto* h = reinterpret_cast<fuse_in_header*>(req.data());
  h->len = static_cast<uint32_t>(req.size());
  h->opcode = FUSE_INIT;
  h->unique = unique;
  auto* in = reinterpret_cast<fuse_init_in*>(req.data() + sizeof(fuse_in_header));
  in->major = 7;
  in->minor = 38;
  return req;
}

TEST(TakeoverTest, TheInitIsKeptThenReplayedAndItsReplyBecomesAResend) {
  hoard::testing::TempDir dir;
  const std::string init_file = JoinPath(dir.path(), "init");
  auto log = spdlog::default_logger();
  Passthrough pt(log);
  int kernel[2];  // what "the kernel" sends: [0] is read by the session
  int replies[2];  // what the session writes: read back by the test at [0]
  ASSERT_EQ(::pipe(kernel), 0);
  ASSERT_EQ(::pipe(replies), 0);
  UniqueFd k0(kernel[0]), k1(kernel[1]), r0(replies[0]), r1(replies[1]);
  char buf[4096];
  {
    SessionIo first(SessionIo::Options{.init_file = init_file, .passthrough = &pt, .logger = log});
    EXPECT_FALSE(first.Prepare());
    const std::string init = InitRequest(2);
    ASSERT_EQ(::write(k1.get(), init.data(), init.size()), ssize_t(init.size()));
    ASSERT_EQ(first.Read(k0.get(), buf, sizeof buf), ssize_t(init.size()));
    Result<std::string> kept = ReadFile(init_file);
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    EXPECT_EQ(*kept, init);
  }
  SessionIo successor(SessionIo::Options{.init_file = init_file, .takeover = true, .passthrough = &pt, .logger = log});
  EXPECT_FALSE(successor.Prepare()) << "a saved INIT: no resend before the replay";
  // The first read is the saved INIT, under a unique the kernel never uses.
  const ssize_t n = successor.Read(k0.get(), buf, sizeof buf);
  ASSERT_EQ(n, ssize_t(InitRequest(0).size()));
  fuse_in_header replayed;
  std::memcpy(&replayed, buf, sizeof replayed);
  EXPECT_EQ(replayed.opcode, uint32_t(FUSE_INIT));
  EXPECT_NE(replayed.unique, 2u);
  // A second reader waits until the replayed INIT is answered.
  std::string request = InitRequest(4);
  reinterpret_cast<fuse_in_header*>(request.data())->opcode = FUSE_GETATTR;
  ASSERT_EQ(::write(k1.get(), request.data(), request.size()), ssize_t(request.size()));
  hoard::testing::Gate second_read;
  std::thread reader([&] {
    char b[4096];
    EXPECT_EQ(successor.Read(k0.get(), b, sizeof b), ssize_t(request.size()));
    second_read.Open();
  });
  EXPECT_FALSE(second_read.WaitFor(std::chrono::milliseconds(100))) << "read before the replayed INIT was answered";
  // The reply to the replay is not sent; a resend notification is.
  fuse_out_header out{.len = sizeof(fuse_out_header) + 8, .error = 0, .unique = replayed.unique};
  char body[8] = {};
  iovec iov[2] = {{&out, sizeof out}, {body, sizeof body}};
  EXPECT_EQ(successor.Writev(r1.get(), iov, 2), ssize_t(sizeof out + sizeof body));
  fuse_out_header sent;
  ASSERT_EQ(::read(r0.get(), &sent, sizeof sent), ssize_t(sizeof sent));
  EXPECT_EQ(sent.unique, 0u) << "a notification";
  EXPECT_EQ(sent.error, 7) << "FUSE_NOTIFY_RESEND";
  EXPECT_EQ(sent.len, sizeof(fuse_out_header));
  EXPECT_TRUE(second_read.WaitFor(std::chrono::seconds(10)));
  reader.join();
  EXPECT_TRUE(successor.taken_over());
  // (A pipe takes any write: resent() only says the write went through.)
  EXPECT_TRUE(successor.resent());

  // Without a saved INIT a successor serves as a new session and asks for
  // a resend at once (the INIT itself may be what was lost).
  ASSERT_EQ(::unlink(init_file.c_str()), 0);
  SessionIo orphan(SessionIo::Options{.init_file = init_file, .takeover = true, .passthrough = &pt, .logger = log});
  EXPECT_TRUE(orphan.Prepare());
}

// Under systemd the supervisor keeps a copy of the FUSE descriptor in
// systemd's store: the datagram sd_notify(3) describes, with the descriptor
// attached; and a restarted supervisor finds it among the ones passed back.
TEST(TakeoverTest, TheDescriptorGoesToSystemdsStoreAndComesBack) {
  hoard::testing::TempDir dir;
  const std::string path = JoinPath(dir.path(), "notify");
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  UniqueFd p0(p[0]), p1(p[1]);

  ::unsetenv("NOTIFY_SOCKET");
  Result<bool> none = StoreFdInSystemd(p0.get(), kFuseFdName);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none) << "no systemd: nothing sent";

  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  Result<bool> stored = StoreFdInSystemd(p0.get(), kFuseFdName);
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(*stored);
  char text[256] = {};
  iovec iov{text, sizeof text - 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ASSERT_GT(::recvmsg(sock.get(), &msg, 0), 0);
  EXPECT_STREQ(text, "FDSTORE=1\nFDNAME=hoard-fuse");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->cmsg_type, SCM_RIGHTS);
  int got = -1;
  std::memcpy(&got, CMSG_DATA(c), sizeof got);
  UniqueFd received(got);
  struct stat a, b;
  ASSERT_EQ(::fstat(p0.get(), &a), 0);
  ASSERT_EQ(::fstat(received.get(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "the same pipe";

  // Passed back to a restarted supervisor, second of two, from fd 3 on.
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("LISTEN_FDS", "2", 1);
  ::setenv("LISTEN_FDNAMES", "other:hoard-fuse", 1);
  EXPECT_EQ(FdFromSystemd(kFuseFdName), 4);
  EXPECT_EQ(FdFromSystemd("nope"), -1);
  ::setenv("LISTEN_PID", "1", 1);
  EXPECT_EQ(FdFromSystemd(kFuseFdName), -1) << "passed to another process";
  for (const char* var : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}) ::unsetenv(var);
}

}  // namespace
}  // namespace hoard::fuse
