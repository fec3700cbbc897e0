// File: cli/ckpt_health.h
//
// How the CLI shows why checkpoints are not reaching the checkpoint origin
// (issue 28): a file's last drain error and since when
// (proto::CkptDrainError), and whether the origin takes the drain at all
// (proto::CkptOriginHealth), as `hoard checkpoint status|ls` and `hoard
// status` print them, in text and in --json. One place, so the commands say
// it alike.
//
// JSON, in the CLI's vocabulary (docs/cli-json.md): "code" is the Status
// code's name ("NoSpace"), "error" the message, times are "*_unix_ms" with an
// "age_seconds" (seconds since, at the reply's time), "id" a string:
//   drain error: {"path", "id", "gen", "code", "reason", "error", "node",
//                 "since_unix_ms", "last_unix_ms", "age_seconds", "failures",
//                 "lost_uploads"}, or null when the file has none;
//   origin:      {"source", "failing", "code", "reason", "error", "nodes",
//                 "since_unix_ms", "last_unix_ms", "age_seconds",
//                 "failing_files", "looping_files"};
//   job:         {"job", "files", "bytes", "files_by_level", "undrained_bytes",
//                 "oldest_undrained_age_seconds", "overdue_files",
//                 "failing_files", "drain_error"}, as `hoard checkpoint
//                 status` and `hoard status` list jobs.
// "node" "" (the coordinator's publisher) is shown as "coordinator".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/messages.h"

namespace hoard::cli {

// `e` as JSON; null when e.since_unix_ms is 0 (no error).
nlohmann::json ToJson(const proto::CkptDrainError& e, int64_t now_ms);
nlohmann::json ToJson(const proto::CkptOriginHealth& h, int64_t now_ms);
nlohmann::json ToJson(const proto::CkptJobStatus& j, int64_t now_ms);

// "no space for 18s" (with ", 4 uploads lost" for lost uploads); "-" for none.
std::string ShortDrainError(const proto::CkptDrainError& e, int64_t now_ms);
// One line per error: "  PATH: no space for 18s, 5 attempts (node1): NoSpace: ...".
std::string DrainErrorLines(const std::vector<proto::CkptDrainError>& errors, int64_t now_ms);
// "checkpoint origin SOURCE: FAILING for 18s: no space (node1): NoSpace: ...;
// 3 files failing" or "checkpoint origin SOURCE: ok".
std::string OriginLine(const proto::CkptOriginHealth& h, int64_t now_ms);

}  // namespace hoard::cli
