// Helpers for the tests of the coordinator's parts (membership_test.cc,
// catalogue_test.cc, progress_test.cc): small datasets and reports built
// without a coordinator.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <vector>

#include "coordinator/catalogue.h"
#include "proto/ordinals.h"
#include "striping/manifest.h"

namespace hoard {
namespace parts_test {

constexpr uint64_t kChunk = 65536;

inline std::chrono::steady_clock::time_point At(std::chrono::milliseconds t) {
  return std::chrono::steady_clock::time_point{} + std::chrono::hours(1) + t;
}

// A dataset of files "f0", "f1"... of `sizes` bytes, chunks of kChunk.
inline Catalogue::Dataset MakeDataset(const std::string& name, uint64_t uid, uint32_t version,
                                      const std::vector<uint64_t>& sizes, uint32_t replicas = 1) {
  ManifestBuilder b(uid, version, kChunk);
  b.SetRoot(S_IFDIR | 0755, 0, 0, 0);
  for (size_t i = 0; i < sizes.size(); ++i) b.Add("f" + std::to_string(i), S_IFREG | 0644, 0, 0, sizes[i], 0, "");
  Result<std::string> bytes = b.Finish(0);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<Manifest> m = Manifest::Parse(std::move(*bytes));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  Catalogue::Dataset d{
      .meta = {.name = name, .uid = uid, .version = version, .chunk_size = kChunk, .replicas = replicas},
      .manifest = std::move(*m)};
  d.meta.file_count = d.manifest.file_count();
  d.meta.total_bytes = d.manifest.total_bytes();
  d.meta.total_chunks = d.manifest.total_chunks();
  return d;
}

// The ordinals of each file of `d`, in manifest order.
inline std::vector<std::vector<uint64_t>> FileChunks(const Catalogue::Dataset& d) {
  std::vector<std::vector<uint64_t>> out;
  for (uint32_t e = 0; e < d.manifest.entry_count(); ++e) {
    if (!d.manifest.entry(e).is_file()) continue;
    out.emplace_back();
    for (uint64_t i = 0; i < d.manifest.chunk_count(e); ++i)
      out.back().push_back(d.manifest.entry(e).first_chunk() + i);
  }
  return out;
}

// A report on `d` from a node owning `owned` chunks, `cached` of them held
// (ascending ordinals), each counted as `chunk_bytes`.
inline proto::DatasetReport MakeReport(const Catalogue::Dataset& d, uint64_t placement_epoch,
                                       const std::vector<uint64_t>& owned, const std::vector<uint64_t>& cached,
                                       uint64_t chunk_bytes = kChunk) {
  proto::DatasetReport r{.uid = d.meta.uid, .version = d.meta.version, .placement_epoch = placement_epoch};
  r.owned_chunks = owned.size();
  r.owned_bytes = owned.size() * chunk_bytes;
  proto::OrdinalEncoder enc;
  for (uint64_t o : cached) enc.Add(o);
  r.cached_chunks = cached.size();
  r.cached_bytes = cached.size() * chunk_bytes;
  r.cached_ordinals = enc.Finish();
  return r;
}

}  // namespace parts_test
}  // namespace hoard
