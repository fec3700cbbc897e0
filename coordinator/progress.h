// File: coordinator/progress.h
//
// Progress is what the nodes report they hold of each dataset, and what the
// coordinator makes of it: warm-up progress (`hoard status`: bytes and whole
// files cached, rate, ETA), fill rates (how fast caches fill, which the
// checkpoint drain yields to) and which datasets are settled.
//
// Nobody's placement is computed here: each node reports, per dataset, how
// many of the chunks it owns it holds and which ones, by ordinal
// (proto::DatasetReport); progress only adds those up, so its work grows with
// the chunks held, not members x chunks. Only a report on the dataset's
// current version at the current placement epoch, from a node that is up,
// counts; except that, right after a refresh, a report on the previous
// version counts the chunks the new version kept from it (its unchanged
// files' chunks keep their names and owners, so the node holds them on the
// new version too): `hoard status` does not drop to 0% until every node has
// reported again. Such a report never makes a dataset complete or settled.
//
// Settled: a dataset is settled when every node that owns a share (positive
// placement weight) is up and reports all its owned chunks held, at the
// current version and placement. Nodes are told (settled()) only once it has
// stayed so for a whole down timeout: an owner whose last report counted may
// have died a moment ago, and the copies others hold would then be the only
// ones left. Within that timeout it is marked down and the dataset is not
// settled while it is: a down owner keeps its share until --out-after
// (proto::NodeInfo::held), and the copies others hold are what the new owners
// copy from if it goes out.
//
// Status is computed in two steps so that the coordinator can hold its mutex
// for the cheap one only: Input copies what is needed (under the mutex),
// Compute combines the reports (without it; a pure function).
//
// Invariants: reports are kept per member name, replaced whole by each
// heartbeat that carries them, and each was checked by
// Catalogue::CheckReport when it arrived.
//
// Thread-safety: none; the coordinator calls it under its mutex (Compute is
// a static function of its input and may run anywhere).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/catalogue.h"
#include "coordinator/fill_rate.h"
#include "coordinator/membership.h"
#include "proto/messages.h"
#include "striping/manifest.h"

namespace spdlog {
class logger;
}

namespace hoard {

class Progress {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Replaces `node`'s reports with `reports` (each already checked). A
  // dataset's cached bytes that grew since the node's previous report on the
  // same version count to the dataset's fill rate.
  void Report(const std::string& node, const std::vector<proto::DatasetReport>& reports, TimePoint now);
  // Whether `node` sent its reports since it registered (or since we started).
  bool HasReported(const std::string& node) const;
  // Forgets `node`'s reports: it restarted (registered again) or was removed.
  void ForgetNode(const std::string& node);
  // Forgets a removed dataset's fill rate.
  void ForgetDataset(uint64_t uid);
  // The bytes `node` last reported holding of dataset `uid` (any version);
  // 0 without a report.
  uint64_t HeldBytes(const std::string& node, uint64_t uid) const {
    const proto::DatasetReport* r = Find(node, uid);
    return r == nullptr ? 0 : r->cached_bytes;
  }
  // The bytes the placement gives `node` of dataset `uid` (its owned share,
  // replicas counted), as it last reported for `version` at
  // `placement_epoch`; nullopt without such a report. Exact, where an
  // estimate from weights is off by the hash's spread (eviction.h).
  std::optional<uint64_t> OwnedBytes(const std::string& node, uint64_t uid, uint32_t version,
                                     uint64_t placement_epoch) const {
    const proto::DatasetReport* r = Find(node, uid);
    if (r == nullptr || r->version != version || r->placement_epoch != placement_epoch) return std::nullopt;
    return r->owned_bytes;
  }

  // Bytes/s landing in all dataset caches (the datasets' share of the origin).
  double TotalFillRate(TimePoint now) const;

  // The datasets settled right now.
  std::vector<proto::SettledDataset> SettledNow(const Catalogue& catalogue, const Membership& members,
                                                uint64_t placement_epoch) const;
  // Recomputes settled(): the datasets settled for at least `down_after`.
  void UpdateSettled(const Catalogue& catalogue, const Membership& members, uint64_t placement_epoch, TimePoint now,
                     std::chrono::milliseconds down_after);
  // What heartbeat replies tell the nodes.
  const std::vector<proto::SettledDataset>& settled() const { return settled_; }

  // A snapshot of what one dataset's status is computed from.
  struct StatusInput {
    proto::DatasetMeta meta;
    Manifest manifest;
    uint64_t placement_epoch = 0;
    double fill_rate = 0;  // bytes/s
    struct Node {
      std::string name;
      bool up = false;
      bool eligible = false;  // positive placement weight: owns a share
      std::optional<proto::DatasetReport> report;
    };
    std::vector<Node> nodes;  // in member order
    uint32_t kept_from = 0;   // Catalogue::Dataset::kept_from and kept
    std::shared_ptr<const std::vector<KeptRun>> kept;
  };
  StatusInput Input(const Catalogue::Dataset& d, const Membership& members, uint64_t placement_epoch,
                    TimePoint now) const;
  // The dataset's status from `in`; warns on `logger` about reports whose
  // ordinals do not decode.
  static proto::DatasetStatus Compute(const StatusInput& in, spdlog::logger& logger);

 private:
  struct NodeReports {
    std::map<uint64_t, proto::DatasetReport> by_uid;
    bool reported = false;  // a heartbeat with reports arrived
  };
  // The report of `node` on dataset `uid`, or nullptr.
  const proto::DatasetReport* Find(const std::string& node, uint64_t uid) const;

  std::map<std::string, NodeReports> nodes_;  // by member name
  std::map<uint64_t, FillRate> fill_rates_;   // by dataset uid
  struct SettledSince {
    proto::SettledDataset dataset;
    TimePoint since;
  };
  std::map<uint64_t, SettledSince> settled_since_;  // by uid
  std::vector<proto::SettledDataset> settled_;      // settled for a down timeout
};

}  // namespace hoard
