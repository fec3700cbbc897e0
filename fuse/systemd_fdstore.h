// File: fuse/systemd_fdstore.h
//
// systemd's file descriptor store, for the mount's FUSE descriptor. Where
// systemd runs hoard-fuse's unit (FileDescriptorStoreMax=1,
// NotifyAccess=main, Restart=always: ansible/), the supervisor
// (fuse/supervisor.h) gives systemd a copy of the /dev/fuse descriptor it
// mounted with. Then even the supervisor's own death does not end the
// connection: systemd keeps the copy, restarts the unit and passes the
// descriptor back (LISTEN_FDS, LISTEN_FDNAMES), and the new supervisor takes
// the connection over as after a restart in place. A stop of the unit
// removes the copy (FDSTOREREMOVE) before the supervisor unmounts.
//
// The protocol is sd_notify(3)'s, spoken directly (libsystemd is not needed
// for one datagram): "FDSTORE=1\nFDNAME=NAME" with the descriptor attached
// (SCM_RIGHTS) to the AF_UNIX socket named by $NOTIFY_SOCKET.
//
// Thread-safety: call from one thread (the supervisor's); they read the
// environment.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "common/status.h"

namespace hoard::fuse {

inline constexpr std::string_view kFuseFdName = "hoard-fuse";

// Gives systemd a copy of `fd` under `name`. Returns false (and does
// nothing) where $NOTIFY_SOCKET is unset: no systemd, or it does not listen.
Result<bool> StoreFdInSystemd(int fd, std::string_view name);
// Asks systemd to close its copy of the descriptor named `name`.
Status RemoveFdFromSystemd(std::string_view name);
// The descriptor systemd passed this process under `name` ($LISTEN_PID is
// ours, $LISTEN_FDS counts from fd 3, $LISTEN_FDNAMES names them), or -1.
int FdFromSystemd(std::string_view name);

}  // namespace hoard::fuse
