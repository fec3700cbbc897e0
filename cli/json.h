// File: cli/json.h
//
// JSON forms of the wire structs, as `hoard ... --json` prints them, in the
// one vocabulary every command uses (docs/cli-json.md): a value has the same
// name wherever it appears, and its unit is in the name (`_bytes`,
// `_seconds`, `_bytes_per_s`, `_unix`, `_unix_ms`). Wire names are not JSON
// names: the wire may change names with its version, the JSON is a promise to
// scripts. Derived fields (percent) are added where a script would otherwise
// have to compute them. 64-bit identifiers are strings (Id): jq and
// JavaScript read numbers as doubles and would round one above 2^53.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/messages.h"

namespace hoard::cli {

// A 64-bit identifier (dataset uid, checkpoint file id) as a JSON string.
inline nlohmann::json Id(uint64_t id) { return std::to_string(id); }

// Now, in milliseconds since the epoch: the ages of *_unix_ms times where a
// reply brings no clock of its own.
int64_t WallClockMs();

nlohmann::json ToJson(const proto::NodeInfo& n);
nlohmann::json ToJson(const proto::MountInfo& m);
nlohmann::json ToJson(const proto::DatasetMeta& d);
nlohmann::json ToJson(const proto::DatasetStatus& s);
nlohmann::json ToJson(const proto::TenantQuota& q);
// A job lease; `now_unix` (the coordinator's clock) gives expires_in_seconds.
nlohmann::json ToJson(const proto::Lease& l, int64_t now_unix);

// Percent of a dataset cached (all replicas), 100.0 when complete.
double PercentCached(const proto::DatasetStatus& s);

// Files of a dataset not yet whole on all their owners: every one, where
// `failures` lists a sample (at most 100).
uint64_t UncachedFiles(const proto::DatasetStatus& s);

}  // namespace hoard::cli
