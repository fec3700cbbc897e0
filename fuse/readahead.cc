#include "fuse/readahead.h"

#include <algorithm>

#include "common/hash.h"
#include "striping/chunking.h"

namespace hoard::fuse {

Readahead::Readahead(Options options, LocalChunks* local, ChunkCache* cache, ReadCounters* counters,
                     std::function<void(const AheadTask&)> fetch)
    : options_(options),
      local_(local),
      cache_(cache),
      counters_(counters),
      fetch_(std::move(fetch)),
      streams_(kStreamSlots) {
  if (options_.chunks != 0 && options_.threads > 0) {
    queue_ = std::make_unique<WorkQueue<AheadTask>>(
        WorkQueue<AheadTask>::Options{.name = "readahead",
                                      .threads = size_t(options_.threads),
                                      // A dropped task gives its reservation back.
                                      .on_drop = [this](AheadTask& t) { cache_->ReleaseAhead(t.key, t.len); }},
        [this](AheadTask& t) {
          fetch_(t);
          cache_->ReleaseAhead(t.key, t.len);
        });
  }
}

Readahead::~Readahead() {
  if (queue_ != nullptr) queue_->Stop();
}

uint32_t Readahead::Depth(uint64_t chunk_size) const {
  if (options_.chunks == 0 || queue_ == nullptr || chunk_size == 0) return 0;
  if (options_.chunks > 0) return static_cast<uint32_t>(options_.chunks);
  constexpr uint64_t kAutoBytes = 16u << 20;
  constexpr uint64_t kAutoMaxChunks = 64;  // small chunks: 16 MiB would be hundreds of requests
  return static_cast<uint32_t>(std::clamp<uint64_t>(kAutoBytes / chunk_size, 4, kAutoMaxChunks));
}

bool Readahead::Sequential(const Stream& s) const { return s.streak >= kSequentialReads; }

Readahead::Stream& Readahead::SlotLocked(uint64_t stream) { return streams_[Mix64(stream, 0x5eed) % kStreamSlots]; }

bool Readahead::NoteRead(const MountedDataset& ds, uint32_t entry, uint64_t offset, uint64_t end) {
  const Manifest& m = ds.manifest();
  const uint64_t chunk_size = m.chunk_size();
  const auto chunks = static_cast<uint32_t>(m.chunk_count(entry));
  const uint32_t depth = Depth(chunk_size);
  if (chunks <= 1 || depth == 0 || end <= offset) return false;
  const uint64_t stream = StreamKey(ds, entry);
  const auto last = static_cast<uint32_t>((end - 1) / chunk_size);  // the last chunk this read touches
  const uint64_t slack = options_.sequential_slack;
  uint32_t from = 0, to = 0;
  bool turned_random = false;
  bool random = false;
  {
    MutexLock lock(&streams_mu_);
    Stream& s = SlotLocked(stream);
    if (s.stream != stream) {
      // A first read near the file's start (FUSE threads may pass the
      // requests of the first window in any order) may be a stream's; one
      // anywhere else reads where it needs, as after a jump.
      s = Stream{.stream = stream, .end = end, .streak = 0, .ahead_to = last + 1, .jumped = offset > slack};
      return s.jumped;
    }
    if (offset <= s.end + slack && end + slack >= s.end) {
      // Near where the reads ended: sequential, and progress if it goes
      // further (a late request of the same window, or another reader of
      // the same bytes, is neither progress nor a jump).
      if (end > s.end) {
        ++s.streak;
        s.end = end;
      }
    } else {
      turned_random = Sequential(s);
      s.streak = 0;
      s.end = end;
      s.ahead_to = last + 1;
      s.jumped = true;
    }
    random = s.jumped && !Sequential(s);
    if (Sequential(s)) {
      from = std::max(s.ahead_to, last + 1);
      to = static_cast<uint32_t>(std::min<uint64_t>(chunks, uint64_t(last) + 1 + depth));
      if (from < to) s.ahead_to = to;
    }
  }
  if (turned_random) Drop(stream, m.chunk_key(entry, 0).file);
  if (from >= to) return random;
  const uint32_t stopped = Queue(ds, entry, stream, from, to);
  if (stopped < to) {
    // Out of budget: the next read of the file tries again from there.
    MutexLock lock(&streams_mu_);
    Stream& s = SlotLocked(stream);
    if (s.stream == stream) s.ahead_to = std::min(s.ahead_to, stopped);
  }
  return random;
}

uint32_t Readahead::Queue(const MountedDataset& ds, uint32_t entry, uint64_t stream, uint32_t from, uint32_t to) {
  const Manifest& m = ds.manifest();
  const uint64_t file_size = m.entry(entry).size;
  std::vector<AheadTask> tasks;
  uint32_t c = from;
  for (; c < to; ++c) {
    const ChunkKey key = m.chunk_key(entry, c);
    if (local_->Held(key)) continue;  // read from the store directly
    const uint64_t len = ChunkLength(file_size, m.chunk_size(), c);
    const ChunkCache::Reservation r = cache_->ReserveAhead(key, len);
    if (r == ChunkCache::Reservation::kSkip) continue;
    if (r == ChunkCache::Reservation::kFull) break;
    tasks.push_back(AheadTask{&ds, entry, c, stream, key, len});
  }
  for (AheadTask& t : tasks) {
    // Unbounded queue: refused only while stopping, then the reservation goes back.
    if (!queue_->Push(AheadTask(t))) cache_->ReleaseAhead(t.key, t.len);
  }
  return c;
}

void Readahead::Drop(uint64_t stream, const FileKey& file) {
  const size_t dropped = queue_->DropIf([stream](const AheadTask& t) { return t.stream == stream; });
  counters_->readahead_unused.fetch_add(dropped, std::memory_order_relaxed);
  // What was already read ahead for it ages like any other entry.
  cache_->AgeAhead(file);
}

}  // namespace hoard::fuse
