// File: cli/json.h
//
// JSON forms of the wire structs, as `hoard ... --json` prints them. Field
// names follow the wire names; derived fields (percent, human sizes) are added
// where a script would otherwise have to compute them.
#pragma once

#include <nlohmann/json.hpp>

#include "proto/messages.h"

namespace hoard::cli {

nlohmann::json ToJson(const proto::NodeInfo& n);
nlohmann::json ToJson(const proto::DatasetMeta& d);
nlohmann::json ToJson(const proto::DatasetStatus& s);

// Percent of a dataset cached (all replicas), 100.0 when complete.
double PercentCached(const proto::DatasetStatus& s);

}  // namespace hoard::cli
