#include "coordinator/manifest_store.h"

#include <algorithm>
#include <cstdio>


namespace hoard {

namespace {

constexpr std::string_view kSharedDir = "manifests";
constexpr size_t kFetchBlock = 4u << 20;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string BaseName(const proto::DatasetMeta& meta) {
  return meta.name + "-" + Hex16(meta.uid) + "-v" + std::to_string(meta.version);
}

}  // namespace

ManifestStore::ManifestStore(StateStore* local, std::shared_ptr<CkptOrigin> shared)
    : local_(local), shared_(std::move(shared)) {}

std::string ManifestStore::SharedPath(const proto::DatasetMeta& meta) const {
  return std::string(kSharedDir) + "/" + BaseName(meta) + "-" + Hex16(meta.manifest_checksum) + ".manifest";
}

Status ManifestStore::Save(const proto::DatasetMeta& meta, std::string_view bytes) {
  if (shared_ != nullptr) {
    const std::string path = SharedPath(meta);
    const std::string tmp = std::string(kCkptStagingDir) + "/" + BaseName(meta) + ".manifest.tmp";
    HOARD_RETURN_IF_ERROR(shared_->MakeDirs(kSharedDir).Annotate("shared store " + shared_->source()));
    HOARD_ASSIGN_OR_RETURN(std::unique_ptr<CkptWriter> w, shared_->Create(tmp));
    for (size_t off = 0; off < bytes.size(); off += kFetchBlock) {
      const size_t n = std::min(kFetchBlock, bytes.size() - off);
      HOARD_RETURN_IF_ERROR(w->WriteAt(off, bytes.data() + off, n).Annotate("write " + tmp));
    }
    HOARD_RETURN_IF_ERROR(w->Close().Annotate("close " + tmp));
    HOARD_RETURN_IF_ERROR(shared_->Rename(tmp, path).Annotate("shared store " + shared_->source()));
  }
  return local_->SaveManifest(meta, bytes);
}

Result<std::string> ManifestStore::FetchShared(const proto::DatasetMeta& meta) {
  const std::string path = SharedPath(meta);
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<OriginFile> f, shared_->Open(path));
  std::string bytes(meta.manifest_bytes, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    HOARD_ASSIGN_OR_RETURN(size_t n, f->ReadAt(got, std::min(kFetchBlock, bytes.size() - got), bytes.data() + got));
    if (n == 0) break;
    got += n;
  }
  if (got != meta.manifest_bytes) {
    return Status::Corruption(shared_->source() + "/" + path + " has " + std::to_string(got) + " bytes, the state says " +
                              std::to_string(meta.manifest_bytes));
  }
  return bytes;
}

Result<Manifest> ManifestStore::Load(const proto::DatasetMeta& meta) {
  Result<Manifest> m = local_->LoadManifest(meta);
  if (m.ok() || shared_ == nullptr || m.status().code() != Code::kNotFound) return m;
  // A version another coordinator made: fetch it and check it is the one
  // the state names before keeping it.
  Result<std::string> bytes = FetchShared(meta);
  if (!bytes.ok()) {
    return bytes.status().Annotate("manifest of " + BaseName(meta) + " is not here and not in the shared store " +
                                   shared_->source());
  }
  HOARD_ASSIGN_OR_RETURN(Manifest fetched, Manifest::Parse(*bytes));
  if (fetched.checksum() != meta.manifest_checksum || fetched.dataset_uid() != meta.uid) {
    return Status::Corruption("the manifest of " + BaseName(meta) + " in the shared store " + shared_->source() +
                              " is not the one the state names (checksum or uid differ)");
  }
  HOARD_RETURN_IF_ERROR(local_->SaveManifest(meta, *bytes));
  return local_->LoadManifest(meta);
}

Status ManifestStore::Remove(const proto::DatasetMeta& meta, bool shared_too) {
  if (shared_ != nullptr && shared_too) {
    Status s = shared_->Unlink(SharedPath(meta));
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return local_->RemoveManifest(meta);
}

}  // namespace hoard
