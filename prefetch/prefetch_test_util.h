// Shared fixture pieces for the prefetch tests: an in-memory origin with a
// dataset, its manifest, and a chunk store in a temp directory.
#pragma once

#include <sys/stat.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "cluster/cluster_view.h"
#include "store/chunk_store.h"
#include "testing/forwarding_origin.h"
#include "testing/mem_origin.h"
#include "origin/origin_pool.h"

namespace hoard {

class PrefetchTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kChunk = 65536;

  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    log_ = spdlog::null_logger_mt("prefetch-" + std::to_string(++n_));
    origin_ = std::make_shared<MemOrigin>("mem://p");
    pool_ = std::make_unique<OriginPool>(OriginOptions{}, ForwardingOrigin::Opener("mem://p", origin_));
  }

  // Adds files to the origin and builds the dataset view over them.
  void MakeDataset(const std::map<std::string, std::string>& files) {
    ManifestBuilder b(42, 1, kChunk);
    std::set<std::string> dirs;
    for (const auto& [path, bytes] : files) {
      ASSERT_TRUE(origin_->AddFile(path, bytes).ok());
      for (size_t s = path.find('/'); s != std::string::npos; s = path.find('/', s + 1)) {
        dirs.insert(path.substr(0, s));
      }
    }
    for (const auto& d : dirs) b.Add(d, S_IFDIR | 0755, 0, 0, 0, 0);
    for (const auto& [path, bytes] : files) {
      Result<OriginEntry> e = origin_->Stat(path);
      ASSERT_TRUE(e.ok());
      b.Add(path, e->mode, 0, 0, e->size, e->mtime_ns);
    }
    Result<std::string> bytes = b.Finish(0);
    ASSERT_TRUE(bytes.ok());
    proto::DatasetMeta meta{.name = "ds", .uid = 42, .version = 1, .source = "mem://p", .chunk_size = kChunk};
    view_ = std::make_shared<DatasetView>(DatasetView{meta, *Manifest::Parse(*bytes)});
  }

  std::unique_ptr<ChunkStore> OpenStore(uint64_t capacity = 0) {
    auto s = ChunkStore::Open({.dir = JoinPath(dir_, "store"), .capacity_bytes = capacity, .logger = log_});
    EXPECT_TRUE(s.ok());
    return std::move(*s);
  }

  ChunkRef Ref(const std::string& path, uint32_t index) {
    uint32_t e = *view_->manifest.Resolve(path);
    const EntryRecord& r = view_->manifest.entry(e);
    return ChunkRef{e, index, r.first_chunk() + index, ChunkLength(r.size, kChunk, index)};
  }

  testing::TempDir tmp_{"hoard-prefetch"};
  std::string dir_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<MemOrigin> origin_;
  std::unique_ptr<OriginPool> pool_;
  std::shared_ptr<DatasetView> view_;
  static inline int n_ = 0;
};

}  // namespace hoard
