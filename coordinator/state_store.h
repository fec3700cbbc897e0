// File: coordinator/state_store.h
//
// StateStore keeps the coordinator's durable state in its data directory:
//
//   DATA/state.msgpack                 the cluster state (CoordinatorState),
//                                      replaced atomically on every change
//   DATA/manifests/<name>-<uid>-v<version>.manifest
//                                      one file per dataset version, written
//                                      before the state that refers to it
//
// Ordering makes a crash safe at any point: a manifest is fully written and
// fsynced before the state naming it is, so the state never points at a
// missing or partial manifest; a crash between the two leaves an orphan
// manifest that Open() removes.
//
// What is not persisted, on purpose: node liveness and the chunks each node
// reports. After a restart nodes are given a full down-timeout to heartbeat
// again, and their next heartbeat re-reports what they hold.
//
// Thread-safety: not thread-safe; the Coordinator serialises calls.
#pragma once

#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/result.h"
#include "proto/messages.h"
#include "striping/manifest.h"

namespace hoard {

struct CoordinatorState {
  static constexpr uint32_t kFormat = 1;
  uint32_t format = kFormat;
  uint64_t epoch = 0;            // bumps on every change of the cluster map
  uint64_t placement_epoch = 0;  // bumps when members or weights change
  std::vector<proto::NodeInfo> nodes;
  std::vector<proto::DatasetMeta> datasets;
  MSGPACK_DEFINE_MAP(format, epoch, placement_epoch, nodes, datasets);
};

class StateStore {
 public:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}

  // Creates the directory if needed and loads the state (empty on first start).
  // kCorruption if the state file exists but cannot be read: the coordinator
  // must not start over silently and forget every dataset.
  Result<CoordinatorState> Open();

  Status Save(const CoordinatorState& state);

  Status SaveManifest(const proto::DatasetMeta& meta, std::string_view bytes);
  Result<Manifest> LoadManifest(const proto::DatasetMeta& meta) const;
  Status RemoveManifest(const proto::DatasetMeta& meta);

  const std::string& dir() const { return dir_; }

 private:
  std::string ManifestPath(const proto::DatasetMeta& meta) const;

  std::string dir_;
};

}  // namespace hoard
