// The mount's sequential read-ahead (fuse/chunk_reader.h) on a real kernel
// FUSE mount over an in-process cluster: three node agents on loopback
// ZeroMQ and an in-memory origin. Requests are counted where they arrive:
// GetChunk requests at the node agents, reads at the origin.
//
// Reads use O_DIRECT, so that each read(2) reaches the mount as one request
// in the order the test issues them (no kernel read-ahead, no page cache).
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/testing.h"
#include "fuse/hoard_fs.h"
#include "testing/test_mount.h"
#include "testing/test_cluster.h"

namespace hoard::fuse {
namespace {

using namespace std::chrono_literals;
using hoard::testing::Eventually;
constexpr uint64_t kChunk = 65536;
constexpr uint32_t kChunks = 400;  // 25 MiB: far more than the sequential slack (8 MiB)
constexpr int kAhead = 4;

class ReadaheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    ASSERT_TRUE(cluster_->Start().ok());
    big_ = hoard::testing::PseudoRandomBytes(kChunks * kChunk - 1000, 7);  // the last chunk is short
    ASSERT_TRUE(origin().AddFile("big.bin", big_).ok());
    ASSERT_TRUE(origin().AddFile("small.bin", hoard::testing::PseudoRandomBytes(5000, 8)).ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(cluster_->StartAgent("node" + std::to_string(i)).ok());
    ASSERT_TRUE(Eventually([&] { return coord().GetClusterMap().nodes.size() == 3; }));
    ASSERT_TRUE(coord().AddDataset({.name = "ds", .source = "mem://o", .chunk_size = kChunk}).ok());
    ASSERT_TRUE(coord().AddDataset({.name = "all", .source = "mem://o", .chunk_size = kChunk, .replicas = 3}).ok());

    HoardFs::Options options = TestMountOptions(*cluster_);
    options.peer_timeout = 5000ms;  // owners read through a slow origin in some tests
    options.readahead_chunks = kAhead;
    fs_ = std::make_unique<HoardFs>(options);
    mnt_ = JoinPath(dir_, "mnt");
    mount_ = TestMount::Start(fs_.get(), mnt_);
    ASSERT_NE(mount_, nullptr) << "cannot start the mount, or mount FUSE here";
    path_ = JoinPath(mnt_, "datasets/ds/big.bin");
    ASSERT_TRUE(Eventually([&] { return ::access(path_.c_str(), F_OK) == 0; }));
    ASSERT_TRUE(Eventually([&] { return ::access(JoinPath(mnt_, "datasets/all/big.bin").c_str(), F_OK) == 0; }));
    buf_ = static_cast<char*>(std::aligned_alloc(4096, kChunk));
  }

  void TearDown() override {
    mount_.reset();
    fs_.reset();
    cluster_.reset();
    std::free(buf_);
  }

  Coordinator& coord() { return cluster_->coordinator(); }
  MemOrigin& origin() { return cluster_->origin(); }
  const ChunkReader::Counters& counters() { return fs_->reader().counters(); }

  // Chunks the mount fetched over the network (GetChunk requests that its
  // peers answered; a node that reads through first asks its peers too, so
  // the node agents' own request counts are twice as high).
  uint64_t Fetches() { return counters().remote_fetches.load(); }
  // Reads the origin served: each chunk read once, whoever asked.
  uint64_t OriginReads() { return origin().TotalReadCount(); }

  // Reads chunk `c` of `fd` (an O_DIRECT file) and checks its bytes.
  void ReadChunk(int fd, uint32_t c, const std::string& want) {
    const uint64_t off = uint64_t(c) * kChunk;
    const ssize_t n = ::pread(fd, buf_, kChunk, off_t(off));
    const auto expect = static_cast<ssize_t>(std::min<uint64_t>(kChunk, want.size() - off));
    ASSERT_EQ(n, expect) << "chunk " << c << ": " << std::strerror(errno);
    EXPECT_EQ(std::memcmp(buf_, want.data() + off, size_t(n)), 0) << "chunk " << c;
  }

  UniqueFd OpenDirect(const std::string& path) { return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECT)); }

  // Waits until no read-ahead is queued or running: after the reads so far
  // returned, nothing more is fetched ahead (each read queues its read-ahead
  // before it is answered), so the counts below are final.
  void WaitReadaheadIdle() {
    ASSERT_TRUE(Eventually([&] { return fs_->reader().TEST_readahead_pending() == 0; }, 20s));
  }

  hoard::testing::TempDir tmp_{"hoard-readahead"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<hoard::testing::TestCluster> cluster_ =
      std::make_unique<hoard::testing::TestCluster>(dir_, "mem://o");
  std::string mnt_, path_, big_;
  std::unique_ptr<HoardFs> fs_;
  std::unique_ptr<TestMount> mount_;
  char* buf_ = nullptr;
};

TEST_F(ReadaheadTest, ASequentialReaderHasTheNextChunksFetchedBeforeItAsks) {
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  // The first read starts a stream; the next two make it sequential.
  for (uint32_t c = 0; c < 3; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  // Chunks 3..6 are requested without the reader asking for them.
  // (On a starved machine a peer may time out: a read-ahead that fails is
  // left to the demand read, which fetches it then.)
  auto ended = [&] { return Fetches() + counters().readahead_failures.load(); };
  ASSERT_TRUE(Eventually([&] { return ended() == 3 + kAhead; }, 10s)) << Fetches();
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(ended(), 3u + kAhead) << "no more than kAhead chunks ahead";
  EXPECT_EQ(counters().readahead_chunks.load(), uint64_t(kAhead));

  // Reading on: each chunk was fetched exactly once (ahead, or on demand),
  // none past the end of the file, and the bytes are the origin's.
  for (uint32_t c = 3; c < kChunks; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  EXPECT_EQ(Fetches(), uint64_t(kChunks)) << "a chunk was fetched twice (or not at all)";
  EXPECT_EQ(OriginReads(), uint64_t(kChunks));
  EXPECT_GT(counters().readahead_used.load(), 0u) << "chunks of node2 and node3 came from the read-ahead";
  // Not every chunk is read ahead: node1's own ones it stores while serving
  // us, and those are then read from its store.
  EXPECT_GT(counters().local_bytes.load(), 0u);
}

TEST_F(ReadaheadTest, ARandomReaderGetsNoReadahead) {
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  // Each jump is farther than the sequential slack (8 MiB = 128 chunks).
  const std::vector<uint32_t> order = {10, 200, 30, 250, 60, 390, 100, 300, 150, 5};
  for (uint32_t c : order) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(Fetches(), order.size());
  EXPECT_EQ(counters().readahead_chunks.load(), 0u);
}

TEST_F(ReadaheadTest, AFileThatTurnsRandomStopsItsReadahead) {
  origin().SetDelay(50ms);  // read-ahead is still queued when the reader jumps
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  for (uint32_t c = 0; c < 3; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  for (uint32_t c : {200u, 50u, 300u, 120u}) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  // The 3 + 4 chunks read, and the 4 read ahead after chunk 2; nothing more.
  ASSERT_TRUE(Eventually([&] { return Fetches() == 7 + kAhead; }, 10s)) << Fetches();
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(Fetches(), 7u + kAhead);
  EXPECT_EQ(counters().readahead_chunks.load(), uint64_t(kAhead));
}

TEST_F(ReadaheadTest, ConcurrentReadersOfOneChunkCauseOneFetch) {
  origin().SetDelay(100ms);  // the readers overlap
  constexpr int kReaders = 8;
  std::vector<std::thread> readers;
  std::atomic<int> good{0};
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      UniqueFd fd = OpenDirect(path_);
      void* b = std::aligned_alloc(4096, kChunk);
      if (fd.valid() && ::pread(fd.get(), b, kChunk, off_t(77 * kChunk)) == ssize_t(kChunk) &&
          std::memcmp(b, big_.data() + 77 * kChunk, kChunk) == 0) {
        good.fetch_add(1);
      }
      std::free(b);
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(good.load(), kReaders);
  EXPECT_EQ(Fetches(), 1u);
  EXPECT_EQ(OriginReads(), 1u);
}

TEST_F(ReadaheadTest, ADemandReadOfAChunkBeingReadAheadWaitsForThatFetch) {
  origin().SetDelay(100ms);  // read-ahead transfers are still running when the reader asks
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  for (uint32_t c = 0; c < 12; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  // Every chunk once: 0..11 read, 12..15 ahead (perhaps still in flight).
  ASSERT_TRUE(Eventually([&] { return Fetches() == 12 + kAhead; }, 10s)) << Fetches();
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(Fetches(), 12u + kAhead);
}

TEST_F(ReadaheadTest, ChunksInTheLocalStoreAreNotReadAhead) {
  ASSERT_TRUE(coord().Warm("all").ok());  // replicas 3: node1 holds every chunk
  ASSERT_TRUE(Eventually([&] { return coord().GetStatus("all")->datasets[0].complete; }, 30s));
  const uint64_t before = Fetches();
  UniqueFd fd = OpenDirect(JoinPath(mnt_, "datasets/all/big.bin"));
  ASSERT_TRUE(fd.valid());
  for (uint32_t c = 0; c < 40; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(Fetches(), before);
  EXPECT_EQ(counters().readahead_chunks.load(), 0u);
  EXPECT_EQ(counters().peer_bytes.load(), 0u);
}

TEST_F(ReadaheadTest, ReadAheadNeverReadsTheOriginItselfWhenNoOwnerAnswers) {
  // Every owner is gone (the map still lists them up): demand reads fall
  // back to the origin; read-ahead gives up instead of reading it too, so
  // the origin serves each chunk the reader asks for once and no other.
  for (int i = 1; i <= 3; ++i) cluster_->StopAgent("node" + std::to_string(i));
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  constexpr uint32_t kRead = 10;
  for (uint32_t c = 0; c < kRead; ++c) ASSERT_NO_FATAL_FAILURE(ReadChunk(fd.get(), c, big_));
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(OriginReads(), uint64_t(kRead));
  EXPECT_EQ(counters().origin_bytes.load(), uint64_t(kRead) * kChunk);
  EXPECT_GT(counters().readahead_failures.load(), 0u);
  EXPECT_EQ(counters().readahead_bytes.load(), 0u);
}

TEST_F(ReadaheadTest, ARandomReaderFetchesJustItsRangesAndNothingIsStored) {
  UniqueFd fd = OpenDirect(path_);
  ASSERT_TRUE(fd.valid());
  // 4 KiB reads, each farther than the sequential slack (8 MiB = 128
  // chunks) from the last, the first too; one crosses a chunk boundary
  // (two ranges: the end of chunk 299 and the start of chunk 300).
  struct Read {
    uint64_t off, len;
  };
  const std::vector<Read> reads = {{200 * kChunk + 4096, 4096}, {10 * kChunk + 12288, 4096},
                                   {350 * kChunk, 4096},        {150 * kChunk + 61440, 4096},
                                   {5 * kChunk + 32768, 4096},  {300 * kChunk - 4096, 8192}};
  uint64_t total = 0;
  for (const Read& r : reads) {
    ASSERT_EQ(::pread(fd.get(), buf_, r.len, off_t(r.off)), ssize_t(r.len)) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(buf_, big_.data() + r.off, r.len), 0) << "at " << r.off;
    total += r.len;
  }
  ASSERT_NO_FATAL_FAILURE(WaitReadaheadIdle());
  EXPECT_EQ(counters().range_fetches.load(), reads.size() + 1);
  EXPECT_EQ(counters().peer_bytes.load() + counters().origin_bytes.load(), total) << "no whole chunk moved";
  EXPECT_EQ(origin().TotalBytesRead(), total) << "the owners read just the ranges from the origin";
  EXPECT_EQ(counters().readahead_chunks.load(), 0u);
  uint64_t ranges = 0, stored = 0;
  for (int i = 1; i <= 3; ++i) {
    NodeAgent* a = cluster_->agent("node" + std::to_string(i));
    ranges += a->counters().range_reads.load();
    a->store()->ForEach([&](const ChunkKey&, uint64_t, uint64_t) { ++stored; });
  }
  EXPECT_EQ(ranges, reads.size() + 1);
  EXPECT_EQ(stored, 0u) << "a range is never stored as a chunk";
}

TEST_F(ReadaheadTest, AWholeFileReadThroughTheKernelIsTheOriginsBytes) {
  // Plain reads: the kernel's own read-ahead sends 1 MiB requests out of
  // order, on several FUSE threads; ours must not confuse them for random.
  Result<std::string> got = ReadFile(path_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == big_);
  EXPECT_GT(counters().readahead_chunks.load(), 0u);
  EXPECT_EQ(Fetches(), uint64_t(kChunks)) << "each chunk fetched once";
  EXPECT_EQ(OriginReads(), uint64_t(kChunks));
  EXPECT_EQ(counters().range_fetches.load(), 0u) << "a sequential reader fetches whole chunks";
  Result<std::string> small = ReadFile(JoinPath(mnt_, "datasets/ds/small.bin"));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size(), 5000u);
}

}  // namespace
}  // namespace hoard::fuse
