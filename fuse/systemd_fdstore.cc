#include "fuse/systemd_fdstore.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/file_util.h"

namespace hoard::fuse {
namespace {

// Sends `message` (and `fd` unless -1) to $NOTIFY_SOCKET; false if unset.
Result<bool> Notify(const std::string& message, int fd) {
  const char* path = ::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path) || (path[0] != '/' && path[0] != '@')) {
    return Status::InvalidArgument(std::string("NOTIFY_SOCKET is not a socket path: ") + path);
  }
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno(errno, "socket for NOTIFY_SOCKET");
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  if (::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) < 0) return Status::FromErrno(errno, std::string("notify ") + path);
  return true;
}

}  // namespace

Result<bool> StoreFdInSystemd(int fd, std::string_view name) {
  return Notify("FDSTORE=1\nFDNAME=" + std::string(name), fd);
}

Status RemoveFdFromSystemd(std::string_view name) {
  Result<bool> r = Notify("FDSTOREREMOVE=1\nFDNAME=" + std::string(name), -1);
  return r.ok() ? Status::Ok() : r.status();
}

int FdFromSystemd(std::string_view name) {
  const char* pid = ::getenv("LISTEN_PID");
  const char* fds = ::getenv("LISTEN_FDS");
  const char* names = ::getenv("LISTEN_FDNAMES");
  if (pid == nullptr || fds == nullptr || names == nullptr || std::strtol(pid, nullptr, 10) != ::getpid()) return -1;
  const long count = std::strtol(fds, nullptr, 10);
  std::string_view rest = names;
  for (long i = 0; i < count && !rest.empty(); ++i) {
    const size_t colon = rest.find(':');
    if (rest.substr(0, colon) == name) return 3 + static_cast<int>(i);  // SD_LISTEN_FDS_START
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return -1;
}

}  // namespace hoard::fuse
