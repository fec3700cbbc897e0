// File: proto/access.h
//
// Which requests need the admin key: the one table of hoard's access policy.
//
// A connection authenticated with the cluster key (User-Id "member": node
// agents, mounts, and a CLI holding only cluster.key) may read everything
// and do what members do to run the cluster: register and heartbeat, fetch
// maps, manifests and chunks, write, commit, drain and flush checkpoints.
// Requests that change the cluster at the operator's will (which datasets
// exist and which version, which nodes serve) need the admin key (User-Id
// "admin"); a member gets kPermissionDenied for them. Warm is a member's: job
// hooks (a Slurm prolog, a Kubernetes init container) pre-warm as the job's
// user, warming only fetches what `dataset add` already admitted, and the
// origin is protected by the cluster-wide fill limits, not by who asks. See proto/curve.h for
// how the User-Id is established. On a server without keys (--insecure) there
// is no identity, and everything is allowed.
//
// Thread-safety: pure functions.
#pragma once

#include "proto/messages.h"

namespace hoard::proto {

// True for the requests only the admin key may make: the rows of
// HOARD_MESSAGE_TYPES (proto/message_types.h) marked kAdmin, today the
// dataset catalogue (add, refresh, remove) and membership by hand (drain and
// undrain, remove). Every other request, and every reply type, is allowed to
// members.
constexpr bool RequiresAdmin(MsgType type) {
  switch (type) {
#define HOARD_MSG_ADMIN(name, number, body, kind, access, ...) \
  case MsgType::k##name:                                       \
    return MsgAccess::access == MsgAccess::kAdmin;
    HOARD_MESSAGE_TYPES(HOARD_MSG_ADMIN)
#undef HOARD_MSG_ADMIN
  }
  return false;
}

}  // namespace hoard::proto
