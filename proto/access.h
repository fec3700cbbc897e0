// File: proto/access.h
//
// Who may send which request: the one table of hoard's access policy is the
// access column of HOARD_MESSAGE_TYPES (proto/message_types.h); this header
// only reads it.
//
// Three key classes (proto/curve.h says how a connection proves its class):
//   admin   (admin.key, User-Id "admin"): the operator. Everything, including
//           the requests that change the cluster at the operator's will
//           (kAdmin rows): which datasets exist and at which version
//           (add, refresh, remove), membership by hand (drain, remove).
//   member  (cluster.key, User-Id "member"): node agents and mounts. What
//           members do to run the cluster (kMember rows): register and
//           heartbeat, fetch chunks, write, commit, drain and flush
//           checkpoints, plus everything a client may do.
//   client  (client.key, User-Id "client"): job hooks and users, the key a
//           site may give to every job (readable by a group: docs/security.md).
//           Only the kClient rows: read (status, lists, maps, manifests,
//           checkpoint status), warm a dataset and take, renew and release
//           job leases. Warm is a client's: warming only fetches what
//           `dataset add` already admitted, and the origin is protected by
//           the cluster-wide fill limits, not by who asks. Never register or
//           heartbeat a node, write checkpoints, or anything of an admin's.
// A key of one class may send its own rows and every lower one (kClient <
// kMember < kAdmin). A refused request gets kPermissionDenied naming the
// class it needs. On a server without keys (--insecure) there is no
// identity (KeyClass::kInsecure), and everything is allowed.
//
// Thread-safety: pure functions.
#pragma once

#include "proto/messages.h"

namespace hoard::proto {

// The least key class that may send `type`: its row's access column. Unknown
// types and replies: kMember (a server answers an unknown type anyway).
constexpr MsgAccess AccessOf(MsgType type) {
  switch (type) {
#define HOARD_MSG_ACCESS(name, number, body, kind, access, ...) \
  case MsgType::k##name:                                        \
    return MsgAccess::access;
    HOARD_MESSAGE_TYPES(HOARD_MSG_ACCESS)
#undef HOARD_MSG_ACCESS
  }
  return MsgAccess::kMember;
}

// True for the requests only the admin key may make (the kAdmin rows).
constexpr bool RequiresAdmin(MsgType type) { return AccessOf(type) == MsgAccess::kAdmin; }

// Whether a connection of class `who` may send `type`.
constexpr bool MayCall(KeyClass who, MsgType type) {
  return who == KeyClass::kInsecure || static_cast<uint8_t>(who) >= static_cast<uint8_t>(AccessOf(type));
}

// "admin", "member", "client", "insecure": the audit log's and errors' words.
constexpr const char* KeyClassName(KeyClass who) {
  switch (who) {
    case KeyClass::kClient: return "client";
    case KeyClass::kMember: return "member";
    case KeyClass::kAdmin: return "admin";
    case KeyClass::kInsecure: return "insecure";
  }
  return "?";
}

// What a refusal says: which key the request needs.
constexpr const char* NeededKey(MsgType type) {
  switch (AccessOf(type)) {
    case MsgAccess::kAdmin: return "the admin key";
    case MsgAccess::kMember: return "a member key (cluster.key) or the admin key";
    case MsgAccess::kClient: return "any cluster key";
  }
  return "?";
}

}  // namespace hoard::proto
