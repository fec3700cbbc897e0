#include "coordinator/state_store.h"

#include <dirent.h>

#include <cstdio>
#include <set>

#include "common/file_util.h"

namespace hoard {

std::string StateStore::ManifestPath(const proto::DatasetMeta& meta) const {
  char uid[17];
  std::snprintf(uid, sizeof uid, "%016llx", static_cast<unsigned long long>(meta.uid));
  return JoinPath(dir_, "manifests/" + meta.name + "-" + uid + "-v" + std::to_string(meta.version) +
                            ".manifest");
}

Result<CoordinatorState> StateStore::Open() {
  HOARD_RETURN_IF_ERROR(MakeDirs(JoinPath(dir_, "manifests")));
  const std::string path = JoinPath(dir_, "state.msgpack");
  Result<std::string> bytes = ReadFile(path);
  CoordinatorState state;
  if (!bytes.ok()) {
    if (bytes.status().code() != Code::kNotFound) return bytes.status();
  } else {
    try {
      msgpack::object_handle h = msgpack::unpack(bytes->data(), bytes->size());
      h.get().convert(state);
    } catch (const std::exception& e) {
      return Status::Corruption("coordinator state " + path + " is unreadable (" + e.what() +
                                "); restore it from a backup or move it away to start empty");
    }
    if (state.format != CoordinatorState::kFormat) {
      return Status::Corruption("coordinator state " + path + " has format " + std::to_string(state.format) +
                                ", this coordinator reads format " + std::to_string(CoordinatorState::kFormat));
    }
  }

  // Remove manifests no dataset refers to (a crash between SaveManifest and
  // Save, or a remove whose unlink did not happen).
  std::set<std::string> wanted;
  for (const auto& d : state.datasets) wanted.insert(ManifestPath(d));
  const std::string mdir = JoinPath(dir_, "manifests");
  if (DIR* dir = ::opendir(mdir.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string full = JoinPath(mdir, name);
      if (!wanted.count(full)) std::remove(full.c_str());
    }
    ::closedir(dir);
  }
  return state;
}

Status StateStore::Save(const CoordinatorState& state) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, state);
  return WriteFileAtomic(JoinPath(dir_, "state.msgpack"), std::string_view(buf.data(), buf.size()));
}

Status StateStore::SaveManifest(const proto::DatasetMeta& meta, std::string_view bytes) {
  return WriteFileAtomic(ManifestPath(meta), bytes);
}

Result<Manifest> StateStore::LoadManifest(const proto::DatasetMeta& meta) const {
  return Manifest::Load(ManifestPath(meta));
}

Status StateStore::RemoveManifest(const proto::DatasetMeta& meta) {
  if (std::remove(ManifestPath(meta).c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "remove manifest of " + meta.name);
  }
  return Status::Ok();
}

}  // namespace hoard
