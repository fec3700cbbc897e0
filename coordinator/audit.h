// File: coordinator/audit.h
//
// The coordinator's audit log: one line per request that changes the
// cluster's state (datasets, membership by hand, node registration, warm-ups,
// job leases), saying who asked, what, and how it ended. CoordinatorService
// writes the lines to the "audit" logger, which shares the coordinator's log
// (stderr/journal or --log-file) and its pattern, so a line reads
// "2026-11-29 10:00:00.000 info audit[PID]: key=client op=LeaseTake ..." and
// `grep ' audit\[' LOG` or `journalctl -u hoard-coordinator | grep ' audit\['`
// finds them.
//
// Who: the key class is proven (the connection's CURVE key: proto/access.h).
// A hook's uid, job and host are what the caller *says* (proto::Caller): no
// peer can prove its uid over the network, so the line writes them as
// claimed_uid=, claimed_job=, claimed_host=. On an insecure coordinator the key
// class is "insecure".
//
// Checkpoint namespace requests (create, rename, remove, commit: one per file
// a job saves) are not audited: mounts make them for local POSIX users, whose
// uid the entry records as its owner.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "proto/messages.h"

namespace hoard {

// One audit line, e.g.
//   key=client op=LeaseTake target=imagenet claimed_uid=1000 claimed_job=4242 claimed_host=gpu7 result=ok
// `target` names what the request acts on (a dataset, a node; "" for none);
// `caller` is null for requests that carry no claims. A value with a space,
// '=' or '"' is written in double quotes with '"' and '\' escaped.
std::string AuditLine(proto::KeyClass key_class, std::string_view op, std::string_view target,
                      const proto::Caller* caller, const Status& outcome);

}  // namespace hoard
