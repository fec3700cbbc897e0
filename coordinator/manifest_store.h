// File: coordinator/manifest_store.h
//
// ManifestStore keeps the coordinator's dataset manifests, one file per
// dataset version:
//
//   DATA/manifests/<name>-<uid>-v<version>.manifest   always (this process's
//       copy, what GetManifest serves from; StateStore owns these files)
//   SHARED/manifests/<name>-<uid>-v<version>-<checksum>.manifest
//       with coordinators in high availability (Options::shared: an NFS
//       export or a directory every coordinator reaches)
//
// Why not etcd: a manifest is bulk, immutable data (about 90 bytes a file: a
// 10 M-file dataset's is ~900 MB), far past etcd's 1.5 MiB requests and its
// few-GB store. etcd keeps what names it (DatasetMeta: size and checksum), so
// any coordinator can fetch it from the shared store after a takeover and
// check it is the one the state means.
//
// Save writes the shared copy (durable: CkptWriter::Close fsyncs, then a
// rename) before the local one, and both before the caller commits the state
// that names the version, so a committed state never names a manifest that is
// nowhere. Load reads the local copy, else fetches the shared one, checks its
// checksum and uid against the meta, and keeps it locally. A shared copy
// left by a leader that died before committing is never named and never
// read; Remove deletes both copies of a version the state no longer names.
//
// Thread-safety: Save/Load/Remove may run concurrently for different
// versions (the coordinator never races two calls for one version).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "coordinator/state_store.h"
#include "origin/ckpt_origin.h"
#include "proto/messages.h"
#include "striping/manifest.h"

namespace hoard {

class ManifestStore {
 public:
  // `local` keeps this process's copies; `shared` may be null (the
  // single-coordinator default: then this is `local` alone).
  ManifestStore(StateStore* local, std::shared_ptr<CkptOrigin> shared);

  Status Save(const proto::DatasetMeta& meta, std::string_view bytes);
  Result<Manifest> Load(const proto::DatasetMeta& meta);
  // `shared_too` false: only this process's copy (a version whose commit
  // failed: if this coordinator was fenced out, the leader may have
  // committed the very same version, whose shared copy must stay).
  Status Remove(const proto::DatasetMeta& meta, bool shared_too = true);

  std::string SharedPath(const proto::DatasetMeta& meta) const;

 private:
  Result<std::string> FetchShared(const proto::DatasetMeta& meta);

  StateStore* local_;
  std::shared_ptr<CkptOrigin> shared_;
};

}  // namespace hoard
