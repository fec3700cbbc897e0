#include "cluster/cluster_view.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <unistd.h>

#include "common/file_util.h"
#include "common/msgpack_codec.h"

#include <msgpack.hpp>

namespace hoard {
namespace {

std::vector<PlacementMember> Members(const proto::ClusterMap& map) {
  std::vector<PlacementMember> m;
  for (const auto& n : map.nodes) m.push_back({n.name, proto::PlacementWeight(n)});
  return m;
}

}  // namespace

ClusterView::ClusterView(proto::ClusterMap map, std::map<std::string, std::shared_ptr<const DatasetView>> datasets,
                         const std::string& self)
    : map_(std::move(map)), placement_(Members(map_)), datasets_(std::move(datasets)) {
  for (size_t i = 0; i < placement_.members().size(); ++i) {
    if (placement_.members()[i].name == self) self_index_ = static_cast<int>(i);
  }
}

const DatasetView* ClusterView::dataset(std::string_view name) const {
  auto it = datasets_.find(std::string(name));
  return it == datasets_.end() ? nullptr : it->second.get();
}

const DatasetView* ClusterView::dataset(uint64_t uid, uint32_t version) const {
  for (const auto& [name, d] : datasets_) {
    if (d->meta.uid == uid && d->meta.version == version) return d.get();
  }
  return nullptr;
}

namespace {

// The Ping a mount's polls send: Options::mount completed with this host's
// name and this program's build, the mountpoint cut to its last
// kMaxMountpointBytes so the request stays within its size limit.
proto::Ping PollPing(proto::MountInfo mount) {
  if (mount.mountpoint.empty()) return {};
  if (mount.node.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) mount.node = host;
  }
  if (mount.mountpoint.size() > proto::kMaxMountpointBytes) {
    mount.mountpoint = mount.mountpoint.substr(mount.mountpoint.size() - proto::kMaxMountpointBytes);
  }
  mount.build = proto::OwnBuild();
  return {.mount = std::move(mount)};
}

}  // namespace

ClusterWatcher::ClusterWatcher(Options options)
    : options_(std::move(options)),
      poll_ping_(PollPing(options_.mount)),
      client_(*options_.context, options_.coordinator,
              {.failover_wait = options_.timeout, .connect_timeout = std::min(options_.timeout, std::chrono::milliseconds(500))}),
      view_(std::make_shared<ClusterView>(proto::ClusterMap{}, std::map<std::string, std::shared_ptr<const DatasetView>>{},
                                          options_.self)),
      request_client_(*options_.context, options_.coordinator,
                      {.failover_wait = kRequestFailoverWait, .backoff = std::chrono::milliseconds(50),
                       .connect_timeout = std::min(options_.timeout, std::chrono::milliseconds(300))}) {
  // A coordinator that is down should cost a caller (a lookup in the mount)
  // a fraction of a second, not the whole timeout meant for big replies.
  client_.set_connect_timeout(std::min(options_.timeout, std::chrono::milliseconds(500)));
  request_client_.set_connect_timeout(std::min(options_.timeout, std::chrono::milliseconds(300)));
}

std::shared_ptr<const ClusterView> ClusterWatcher::Current() const {
  MutexLock lock(&view_mu_);
  return view_;
}

Status ClusterWatcher::Poll(std::vector<uint64_t> read_datasets) {
  std::shared_ptr<const ClusterView> cur = Current();
  Result<proto::Pong> pong = [&] {
    MutexLock lock(&sync_mu_);
    if (read_datasets.empty()) return client_.Call(poll_ping_, options_.timeout);
    if (read_datasets.size() > proto::kMaxReadDatasets) read_datasets.resize(proto::kMaxReadDatasets);
    proto::Ping ping = poll_ping_;
    ping.read_datasets = std::move(read_datasets);
    return client_.Call(ping, options_.timeout);
  }();
  if (!pong.ok()) return pong.status();
  if (pong->epoch == cur->epoch() && cur->epoch() != 0) return Status::Ok();
  return Sync(pong->epoch);
}

Status ClusterWatcher::RefreshForRequest(SyncInProgress in_progress, std::chrono::milliseconds ping_timeout,
                                         std::chrono::milliseconds backoff) {
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const int64_t failed_at = refresh_failed_at_ns_.load();
  if (failed_at != 0 && now_ns() - failed_at < backoff.count() * 1'000'000) {
    return Status::Unavailable("the coordinator did not answer a moment ago");
  }
  return refresh_flight_.Do(0, [&] {
    Status s;
    Result<proto::Pong> pong = request_client_.Call(proto::Ping{}, ping_timeout);
    if (!pong.ok()) {
      s = pong.status();
    } else if (pong->epoch != Current()->epoch() || pong->epoch == 0) {
      if (in_progress == SyncInProgress::kWait) {
        MutexLock lock(&sync_mu_);
        s = SyncLocked(pong->epoch);
      } else if (sync_mu_.TryLock()) {
        MutexLock lock(&sync_mu_, std::adopt_lock);
        s = SyncLocked(pong->epoch);
      } else {
        s = Status::Unavailable("the cluster map is being fetched by another thread");
      }
    }
    refresh_failed_at_ns_.store(s.ok() || s.code() != Code::kUnavailable ? 0 : now_ns());
    return s;
  });
}

Status ClusterWatcher::Sync(uint64_t known_epoch) {
  MutexLock lock(&sync_mu_);
  return SyncLocked(known_epoch);
}

Status ClusterWatcher::SyncLocked(uint64_t known_epoch) {
  std::shared_ptr<const ClusterView> cur = Current();
  if (known_epoch != 0 && known_epoch == cur->epoch()) return Status::Ok();
  Result<proto::ClusterMap> map = client_.Call(proto::GetClusterMap{}, options_.timeout);
  if (!map.ok()) return map.status().Annotate("fetch cluster map from " + options_.coordinator);
  if (map->epoch == cur->epoch()) return Status::Ok();

  std::map<std::string, std::shared_ptr<const DatasetView>> datasets;
  Status first_error;
  for (const auto& meta : map->datasets) {
    const DatasetView* old = cur->dataset(meta.name);
    if (old != nullptr && old->meta.uid == meta.uid && old->meta.version == meta.version) {
      // Same manifest; carry the rest of the metadata (e.g. the warm flag) over.
      datasets[meta.name] = std::make_shared<DatasetView>(DatasetView{meta, old->manifest});
      continue;
    }
    Result<std::shared_ptr<const DatasetView>> d = LoadDataset(meta);
    if (!d.ok()) {
      // Leave the dataset out of this view rather than block every other one;
      // the next sync retries. A new version of a dataset we hold (a refresh)
      // keeps the version we have meanwhile, rather than vanish from mounts.
      options_.logger->warn("dataset {}: {}", meta.name, d.status().ToString());
      if (first_error.ok()) first_error = d.status();
      if (old != nullptr && old->meta.uid == meta.uid) datasets[meta.name] = cur->datasets().at(meta.name);
      continue;
    }
    datasets[meta.name] = *d;
  }
  auto view = std::make_shared<const ClusterView>(std::move(*map), std::move(datasets), options_.self);
  if (!first_error.ok()) {
    // Publish, but keep the epoch of the incomplete view from matching so the
    // next Sync/Poll tries again.
    proto::ClusterMap m = view->map();
    m.epoch = 0;
    std::map<std::string, std::shared_ptr<const DatasetView>> ds = view->datasets();
    view = std::make_shared<const ClusterView>(std::move(m), std::move(ds), options_.self);
  }
  if (first_error.ok()) {
    PruneCache(view->map());
    msgpack::sbuffer buf;
    msgpack::pack(buf, view->map());
    Status s = WriteFileAtomic(JoinPath(options_.cache_dir, "cluster-map.msgpack"),
                               std::string_view(buf.data(), buf.size()));
    if (!s.ok()) options_.logger->warn("cannot save the cluster map: {}", s.ToString());
  }
  Publish(std::move(view));
  return first_error;
}

void ClusterWatcher::Publish(std::shared_ptr<const ClusterView> view) {
  {
    MutexLock vlock(&view_mu_);
    view_ = view;
  }
  if (options_.on_change) options_.on_change(view);
}

Status ClusterWatcher::LoadCached() {
  MutexLock lock(&sync_mu_);
  HOARD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(JoinPath(options_.cache_dir, "cluster-map.msgpack")));
  proto::ClusterMap map;
  try {
    // Bounded: a damaged file must not make msgpack allocate for an array
    // header claiming 4 billion entries (found by fuzz/cluster_map_fuzz.cc).
    UnpackState(bytes.data(), bytes.size(), &map);
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("saved cluster map is unreadable: ") + e.what());
  }
  std::map<std::string, std::shared_ptr<const DatasetView>> datasets;
  for (const auto& meta : map.datasets) {
    Result<Manifest> m = Manifest::Load(ManifestPath(meta));
    if (m.ok() && m->checksum() == meta.manifest_checksum) {
      datasets[meta.name] = std::make_shared<const DatasetView>(DatasetView{meta, std::move(*m)});
    }
  }
  // Epoch 0: the first successful Sync replaces this view whatever its epoch.
  map.epoch = 0;
  options_.logger->info("serving with the saved cluster map ({} nodes, {} datasets) until the coordinator answers",
                        map.nodes.size(), datasets.size());
  Publish(std::make_shared<const ClusterView>(std::move(map), std::move(datasets), options_.self));
  return Status::Ok();
}

std::string ClusterWatcher::ManifestPath(const proto::DatasetMeta& meta) const {
  char uid[17];
  std::snprintf(uid, sizeof uid, "%016llx", static_cast<unsigned long long>(meta.uid));
  return JoinPath(options_.cache_dir, std::string("manifests/") + uid + "-v" + std::to_string(meta.version) +
                                          ".manifest");
}

Result<std::shared_ptr<const DatasetView>> ClusterWatcher::LoadDataset(const proto::DatasetMeta& meta) {
  const std::string path = ManifestPath(meta);
  Result<Manifest> m = Manifest::Load(path);
  if (!m.ok() || m->checksum() != meta.manifest_checksum || m->dataset_uid() != meta.uid) {
    m = FetchManifest(meta);
    if (!m.ok()) return m.status();
    Status s = MakeDirs(DirName(path));
    if (s.ok()) s = WriteFileAtomic(path, m->bytes());
    if (!s.ok()) options_.logger->warn("cannot cache manifest of {}: {}", meta.name, s.ToString());
  }
  return std::make_shared<const DatasetView>(DatasetView{meta, std::move(*m)});
}

void ClusterWatcher::PruneCache(const proto::ClusterMap& map) {
  std::set<std::string> keep;
  for (const auto& d : map.datasets) keep.insert(ManifestPath(d));
  const std::string dir = JoinPath(options_.cache_dir, "manifests");
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    if (!keep.count(it->path().string())) std::filesystem::remove(it->path(), ec);
  }
}

Result<Manifest> ClusterWatcher::FetchManifest(const proto::DatasetMeta& meta) {
  if (meta.manifest_bytes > kMaxManifestBytes || meta.manifest_bytes < Manifest::kHeaderSize) {
    return Status::InvalidArgument("manifest of " + meta.name + " claims " + std::to_string(meta.manifest_bytes) +
                                   " bytes; refusing to fetch it");
  }
  std::string bytes;
  bytes.reserve(meta.manifest_bytes);
  while (bytes.size() < meta.manifest_bytes) {
    zmq::message_t part;
    Result<proto::ManifestPart> r = client_.Call(
        proto::GetManifest{.name = meta.name, .version = meta.version, .offset = bytes.size()}, options_.timeout,
        &part);
    if (!r.ok()) return r.status().Annotate("fetch manifest of " + meta.name);
    if (part.size() == 0 || r->total_bytes != meta.manifest_bytes) {
      return Status::Stale("manifest of " + meta.name + " changed while being fetched");
    }
    bytes.append(static_cast<const char*>(part.data()), part.size());
  }
  HOARD_ASSIGN_OR_RETURN(Manifest m, Manifest::Parse(std::move(bytes)));
  if (m.checksum() != meta.manifest_checksum || m.dataset_uid() != meta.uid || m.version() != meta.version) {
    return Status::Corruption("manifest of " + meta.name + " does not match its metadata");
  }
  return m;
}

}  // namespace hoard
