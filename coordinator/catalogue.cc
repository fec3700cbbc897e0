#include "coordinator/catalogue.h"

#include <algorithm>

#include "proto/ordinals.h"

namespace hoard {

Catalogue::Dataset* Catalogue::Find(const std::string& name) {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : &it->second;
}

const Catalogue::Dataset* Catalogue::Find(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : &it->second;
}

void Catalogue::Put(Dataset d) {
  const std::string name = d.meta.name;
  datasets_.insert_or_assign(name, std::move(d));
}

bool Catalogue::Erase(const std::string& name) { return datasets_.erase(name) > 0; }

std::vector<proto::DatasetMeta> Catalogue::Metas() const {
  std::vector<proto::DatasetMeta> out;
  out.reserve(datasets_.size());
  for (const auto& [name, d] : datasets_) out.push_back(d.meta);
  return out;
}

Status Catalogue::Reserve(const std::string& name, int max_walks) {
  if (walking_.size() >= static_cast<size_t>(max_walks)) {
    return Status::Unavailable(std::to_string(walking_.size()) +
                               " datasets are walking their sources; retry when one finishes");
  }
  walking_.insert(name);
  return Status::Ok();
}

void Catalogue::Release(const std::string& name) { walking_.erase(name); }

Status Catalogue::CheckReport(const proto::DatasetReport& r) const {
  for (const auto& [name, d] : datasets_) {
    if (d.meta.uid != r.uid || d.meta.version != r.version) continue;
    if (r.cached_chunks > r.owned_chunks || r.owned_chunks > d.meta.total_chunks) {
      return Status::InvalidArgument("chunk counts out of range");
    }
    return proto::DecodeOrdinals(r.cached_ordinals, d.meta.total_chunks, r.cached_chunks, [](uint64_t) {});
  }
  return Status::Ok();  // another version: kept, and ignored until it is current
}

Result<proto::ManifestPart> Catalogue::GetManifest(const proto::GetManifest& req, std::string* payload) const {
  const Dataset* d = Find(req.name);
  if (d == nullptr) return Status::NotFound("dataset " + req.name + " does not exist");
  if (d->meta.version != req.version) {
    return Status::Stale("dataset " + req.name + " is at version " + std::to_string(d->meta.version) + ", not " +
                         std::to_string(req.version));
  }
  std::string_view bytes = d->manifest.bytes();
  if (req.offset > bytes.size()) return Status::InvalidArgument("manifest offset past its end");
  uint64_t len = std::min<uint64_t>({req.length, proto::GetManifest::kMaxPart, bytes.size() - req.offset});
  payload->assign(bytes.substr(req.offset, len));
  return proto::ManifestPart{bytes.size(), req.offset};
}

}  // namespace hoard
