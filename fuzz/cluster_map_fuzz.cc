// Fuzz target: what a node agent or a mount reads back at start to serve
// before the coordinator answers (cluster/cluster_view.h,
// ClusterWatcher::LoadCached): CACHE/cluster-map.msgpack and the manifests
// cached beside it.
//
// Input: the saved map as a part (fuzz_util.h), then a manifest file, saved
// under the name of every dataset the map names. LoadCached must publish a
// view or refuse (kCorruption), never crash or allocate without bound; a view
// it publishes must place chunks over its members.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/file_util.h"
#include "cluster/cluster_view.h"
#include "common/msgpack_codec.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static zmq::context_t context(0);
  const std::string& dir = hoard::fuzz::Scratch::Fresh();
  // One watcher for the process (it owns sockets); its cache directory is the
  // scratch directory, emptied for each input. It never connects: nothing
  // here calls the coordinator.
  static hoard::ClusterWatcher watcher({.coordinator = "tcp://127.0.0.1:9",
                                        .self = "n1",
                                        .cache_dir = dir,
                                        .logger = std::make_shared<spdlog::logger>("fuzz"),
                                        .context = &context});
  hoard::fuzz::InputReader in(data, size);
  const std::string_view map_bytes = in.Part();
  const std::string_view manifest = in.Rest();
  hoard::fuzz::WriteOrDie(dir + "/cluster-map.msgpack", map_bytes);
  hoard::proto::ClusterMap map;
  try {
    hoard::UnpackState(map_bytes.data(), map_bytes.size(), &map);
    (void)hoard::MakeDirs(dir + "/manifests");
    for (size_t i = 0; i < map.datasets.size() && i < 4; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "/manifests/%016llx-v%u.manifest",
                    static_cast<unsigned long long>(map.datasets[i].uid), map.datasets[i].version);
      hoard::fuzz::WriteOrDie(dir + name, manifest);
    }
  } catch (const std::exception&) {
    // Not a map: LoadCached must say so itself.
  }

  hoard::Status s = watcher.LoadCached();
  if (!s.ok()) {
    if (s.code() != hoard::Code::kCorruption) std::abort();
    return 0;
  }
  std::shared_ptr<const hoard::ClusterView> view = watcher.Current();
  std::vector<uint32_t> owners;
  for (uint64_t h = 0; h < 16; ++h) {
    view->placement().Owners(h * 0x9E3779B97F4A7C15ULL, 3, &owners);
    for (uint32_t o : owners) {
      if (o >= view->map().nodes.size()) std::abort();
    }
  }
  for (const auto& [name, d] : view->datasets()) {
    if (d->manifest.checksum() != d->meta.manifest_checksum) std::abort();
  }
  return 0;
}
