// File: coordinator/catalogue.h
//
// Catalogue is the coordinator's list of datasets: for each name the current
// version's DatasetMeta (uid, version, source, chunk size, replicas, warm
// flag, sizes) and its parsed Manifest, which it serves in parts
// (GetManifest). Only the current version of a dataset exists here.
//
// Walks: adding or refreshing a dataset walks its source outside the
// coordinator's mutex. The name is reserved for that time (Reserve/Release)
// so that two adds or refreshes of one name cannot race, and at most
// `max_walks` walks run at once.
//
// Changes are made by the coordinator, which journals them (StateStore) and
// undoes them if that fails; the catalogue only keeps them.
//
// Invariants: datasets are keyed by name and meta.name equals the key; each
// manifest is the one of its meta's uid and version. A name is reserved by
// at most one walk.
//
// Thread-safety: none; the coordinator calls it under its mutex.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "proto/messages.h"
#include "striping/manifest.h"
#include "striping/manifest_diff.h"

namespace hoard {

class Catalogue {
 public:
  struct Dataset {
    proto::DatasetMeta meta;
    Manifest manifest;
    // After a refresh in this process: the chunks this version kept from
    // version kept_from (ManifestDiff::kept), so that reports still on that
    // version count what they hold of it (Progress). Not journaled: after a
    // restart, nodes report on the current version within a heartbeat.
    uint32_t kept_from = 0;
    std::shared_ptr<const std::vector<KeptRun>> kept;
  };

  Dataset* Find(const std::string& name);
  const Dataset* Find(const std::string& name) const;
  // Adds or replaces the dataset named meta.name.
  void Put(Dataset d);
  // Forgets the dataset and returns true if there was one.
  bool Erase(const std::string& name);

  // By name.
  const std::map<std::string, Dataset>& datasets() const { return datasets_; }
  std::vector<proto::DatasetMeta> Metas() const;
  size_t size() const { return datasets_.size(); }

  // Reserves `name` for a walk of its source: kUnavailable when `max_walks`
  // walks are running. `name` must not be reserved.
  Status Reserve(const std::string& name, int max_walks);
  void Release(const std::string& name);
  bool Reserved(const std::string& name) const { return walking_.count(name) > 0; }

  // OK if a node's report is well formed for the dataset version it names:
  // chunk counts within the manifest and ordinals that decode. A report on
  // another version (or an unknown uid) is OK: it is kept, and ignored until
  // that version is current.
  Status CheckReport(const proto::DatasetReport& r) const;

  // Fills `payload` with the requested slice of the current manifest.
  // kNotFound for an unknown dataset, kStale for another version,
  // kInvalidArgument for an offset past the end.
  Result<proto::ManifestPart> GetManifest(const proto::GetManifest& req, std::string* payload) const;

 private:
  std::map<std::string, Dataset> datasets_;  // by name
  std::set<std::string> walking_;            // names being added or refreshed
};

}  // namespace hoard
