#include "node/scrubber.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "common/direct_io.h"
#include "common/file_util.h"
#include "store/chunk_file.h"

namespace hoard {
namespace {

constexpr auto kSaveEvery = std::chrono::seconds(5);

// The scrubber's disk reads go at the idle I/O priority where the scheduler
// honours it (BFQ; mq-deadline since 5.14 orders by class): demand reads
// first, on top of the rate limit.
void LowerIoPriority() {
  constexpr int kWhoProcess = 1;  // IOPRIO_WHO_PROCESS: with 0, the calling thread
  constexpr int kClassIdle = 3;   // IOPRIO_CLASS_IDLE
  (void)::syscall(SYS_ioprio_set, kWhoProcess, 0, kClassIdle << 13);
}


}  // namespace

std::chrono::nanoseconds Scrubber::Pace(Bucket* b, uint64_t rate, uint64_t bytes,
                                        std::chrono::steady_clock::time_point now) {
  if (rate == 0) return std::chrono::nanoseconds(0);
  // Refill since the last call, up to one second's worth (no long bursts
  // after an idle spell), then take this read's bytes; a debt is waited off.
  if (b->at.time_since_epoch().count() != 0) {
    const double secs = std::chrono::duration<double>(now - b->at).count();
    b->tokens = std::min<double>(double(rate), b->tokens + secs * double(rate));
  }
  b->at = now;
  b->tokens -= double(bytes);
  if (b->tokens >= 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(int64_t(-b->tokens / double(rate) * 1e9));
}

Result<std::unique_ptr<Scrubber>> Scrubber::Create(Options options) {
  if (options.store == nullptr || options.logger == nullptr || options.state_path.empty()) {
    return Status::InvalidArgument("scrubber: store, logger and state_path are required");
  }
  std::unique_ptr<Scrubber> s(new Scrubber(std::move(options)));
  s->LoadState();
  return s;
}

Scrubber::Scrubber(Options options)
    : options_(std::move(options)), quarantine_(options_.store->quarantine_dir()) {}

Scrubber::~Scrubber() { Stop(); }

void Scrubber::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Scrubber::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t Scrubber::RequestPass() {
  MutexLock lock(&mu_);
  if (progress_.running || resume_) return progress_.pass;
  requested_ = true;
  cv_.NotifyAll();
  return progress_.pass + 1;
}

bool Scrubber::WaitPass(uint64_t pass, std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  return cv_.WaitFor(&mu_, timeout, [&] {
    mu_.AssertHeld();
    return stopping_ || progress_.pass > pass || (progress_.pass == pass && !progress_.running);
  }) && !stopping_;
}

Scrubber::Progress Scrubber::progress() const {
  MutexLock lock(&mu_);
  return progress_;
}

// State file: "key value" lines, written whole (tmp + rename).
void Scrubber::LoadState() {
  MutexLock lock(&mu_);  // uncontended: no thread runs yet
  Result<std::string> text = ReadFile(options_.state_path);
  if (!text.ok()) {
    if (text.status().code() != Code::kNotFound) {
      options_.logger->warn("scrubber: cannot read {} ({}); starting a fresh schedule", options_.state_path,
                            text.status().ToString());
    }
    return;
  }
  std::istringstream in(*text);
  std::string key, value;
  bool running = false;
  while (in >> key) {
    std::getline(in >> std::ws, value);
    const long long n = std::atoll(value.c_str());
    if (key == "pass") progress_.pass = uint64_t(n);
    else if (key == "running") running = n != 0;
    else if (key == "started") progress_.pass_started_unix = n;
    else if (key == "last_end") progress_.last_pass_end_unix = n;
    else if (key == "passes_done") progress_.passes_done = uint64_t(n);
    else if (key == "corrupt") progress_.corrupt_found = uint64_t(n);
    else if (key == "cursor") cursor_ = value;
  }
  // A pass that was running resumes after its cursor (Loop starts it); it
  // counts as running from now on, so WaitPass waits for its end.
  resume_ = running;
  progress_.running = running;
  if (!running) cursor_.clear();
}

void Scrubber::SaveStateLocked() {
  std::ostringstream out;
  out << "pass " << progress_.pass << "\nrunning " << (progress_.running ? 1 : 0) << "\nstarted "
      << progress_.pass_started_unix << "\nlast_end " << progress_.last_pass_end_unix << "\npasses_done "
      << progress_.passes_done << "\ncorrupt " << progress_.corrupt_found << "\ncursor " << cursor_ << "\n";
  if (Status s = WriteFileAtomic(options_.state_path, out.str()); !s.ok()) {
    options_.logger->warn("scrubber: cannot save {}: {}", options_.state_path, s.ToString());
  }
}

std::vector<Scrubber::Item> Scrubber::List() const {
  std::vector<Item> items;
  options_.store->ForEach([&](const ChunkKey& key, uint64_t, uint64_t length) {
    items.push_back(Item{.name = "s/" + key.Name(), .kind = Kind::kStore, .key = key, .bytes = length});
  });
  if (!options_.read_tier_dir.empty()) {
    // The mount's tier: chunk files under DIR/chunks/HH/, its own index in
    // the mount's memory; only the files are ours to check.
    std::error_code ec;
    const std::string chunks = JoinPath(options_.read_tier_dir, "chunks");
    for (auto it = std::filesystem::recursive_directory_iterator(chunks, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec) || it->path().extension() == ".tmp") continue;
      const std::string rel = std::filesystem::relative(it->path(), chunks, ec).string();
      items.push_back(Item{.name = "t/" + rel, .kind = Kind::kTier, .path = it->path().string(),
                           .bytes = uint64_t(it->file_size(ec))});
    }
  }
  if (options_.replicas != nullptr) {
    for (const ReplicaStore::Held& h : options_.replicas->List().chunks) {
      items.push_back(Item{.name = "r/" + std::to_string(h.id) + "-" + std::to_string(h.gen) + "-" +
                                   std::to_string(h.index) + "-" + std::to_string(h.checksum),
                           .kind = Kind::kReplica, .replica = h, .bytes = h.length});
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.name < b.name; });
  return items;
}

Status Scrubber::ScrubTierFile(const std::string& path, bool* corrupt) {
  DirectIo direct;
  UniqueFd fd = direct.Open(path, O_RDONLY | O_CLOEXEC, 0);
  if (!fd.valid()) return errno == ENOENT ? Status::Ok() : Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  Result<ChunkMeta> meta = ReadChunkMeta(fd.get(), uint64_t(st.st_size));
  Status fault = meta.ok() ? VerifyChunkFile(fd.get(), *meta) : meta.status();
  if (fault.ok()) return Status::Ok();
  if (fault.code() != Code::kCorruption) return fault.Annotate(path);
  *corrupt = true;
  options_.logger->error("scrubber: read-tier copy {} is corrupt ({}); quarantining it in {}", path,
                         fault.message(), quarantine_.dir());
  if (Status moved = quarantine_.Move(path, "tier"); !moved.ok()) {
    options_.logger->warn("scrubber: {}; deleting it instead", moved.ToString());
    ::unlink(path.c_str());
  }
  return Status::Ok();
}

Status Scrubber::ScrubItem(const Item& item, bool* corrupt) {
  switch (item.kind) {
    case Kind::kStore: {
      Result<ChunkStore::ScrubResult> r = options_.store->Scrub(item.key);
      if (!r.ok()) return r.status();
      *corrupt = r->corrupt;
      return Status::Ok();
    }
    case Kind::kTier:
      return ScrubTierFile(item.path, corrupt);
    case Kind::kReplica: {
      Result<ReplicaStore::ScrubResult> r = options_.replicas->Scrub(item.replica, quarantine_);
      if (!r.ok()) return r.status();
      *corrupt = r->corrupt;
      if (r->corrupt && options_.on_replica_lost) options_.on_replica_lost();
      return Status::Ok();
    }
  }
  return Status::Ok();
}

void Scrubber::Loop() {
  LowerIoPriority();
  Bucket bucket;
  while (true) {
    std::string resume_after;
    {
      MutexLock lock(&mu_);
      // The next pass is due `interval` after the last one started (a pass
      // that never ran is due at once, so a new node is checked early).
      auto due = [&] {
        mu_.AssertHeld();
        if (requested_ || resume_) return true;
        if (options_.interval.count() == 0) return false;
        return progress_.pass == 0 || options_.clock->WallSeconds() >= progress_.pass_started_unix + options_.interval.count();
      };
      while (!stopping_ && !due()) {
        if (options_.interval.count() == 0) {
          cv_.Wait(&mu_);
        } else {
          const int64_t left = progress_.pass_started_unix + options_.interval.count() - options_.clock->WallSeconds();
          options_.clock->WaitFor(&cv_, &mu_, std::chrono::seconds(std::clamp<int64_t>(left, 1, 3600)));
        }
      }
      if (stopping_) return;
      const bool resuming = resume_;
      resume_ = false;
      requested_ = false;
      if (!resuming) {
        ++progress_.pass;
        progress_.pass_started_unix = options_.clock->WallSeconds();
        cursor_.clear();
      }
      resume_after = cursor_;
      progress_.running = true;
      progress_.pass_items = progress_.pass_items_done = 0;
      progress_.pass_bytes = progress_.pass_bytes_done = 0;
      SaveStateLocked();
    }
    std::vector<Item> items = List();
    {
      MutexLock lock(&mu_);
      progress_.pass_items = items.size();
      for (const Item& it : items) progress_.pass_bytes += it.bytes;
      options_.logger->info("scrubber: pass {} {} ({} files, {} bytes)", progress_.pass,
                            resume_after.empty() ? "started" : "resumed after " + resume_after, items.size(),
                            progress_.pass_bytes);
    }
    auto last_save = options_.clock->Now();
    bool stopped = false;
    for (const Item& item : items) {
      if (!resume_after.empty() && item.name <= resume_after) {
        MutexLock lock(&mu_);
        ++progress_.pass_items_done;
        progress_.pass_bytes_done += item.bytes;
        continue;
      }
      // Demand reads first: wait while they are being served, a while.
      const auto yield_until = options_.clock->Now() + options_.max_yield;
      while (options_.busy && options_.busy() && options_.clock->Now() < yield_until) {
        MutexLock lock(&mu_);
        if (stopping_) break;
        options_.clock->WaitFor(&cv_, &mu_, std::chrono::milliseconds(20));
        if (stopping_) break;
      }
      bool corrupt = false;
      if (Status s = ScrubItem(item, &corrupt); !s.ok()) {
        options_.logger->warn("scrubber: cannot check {}: {}", item.name, s.ToString());
      }
      const auto wait = Pace(&bucket, options_.rate_bytes_per_s, item.bytes, options_.clock->Now());
      MutexLock lock(&mu_);
      ++progress_.pass_items_done;
      progress_.pass_bytes_done += item.bytes;
      ++progress_.items_scrubbed;
      progress_.bytes_scrubbed += item.bytes;
      if (corrupt) ++progress_.corrupt_found;
      cursor_ = item.name;
      if (corrupt || options_.clock->Now() - last_save >= kSaveEvery) {
        SaveStateLocked();
        last_save = options_.clock->Now();
      }
      const auto paced_until = options_.clock->Now() + wait;
      while (!stopping_ && options_.clock->WaitUntil(&cv_, &mu_, paced_until)) {
      }
      if (stopping_) {
        stopped = true;
        break;
      }
    }
    MutexLock lock(&mu_);
    if (stopped) {
      SaveStateLocked();  // still running: the next start resumes after the cursor
      return;
    }
    progress_.running = false;
    progress_.last_pass_end_unix = options_.clock->WallSeconds();
    ++progress_.passes_done;
    cursor_.clear();
    SaveStateLocked();
    options_.logger->info("scrubber: pass {} done: {} files, {} bytes, {} corrupt found so far", progress_.pass,
                          progress_.pass_items, progress_.pass_bytes, progress_.corrupt_found);
    cv_.NotifyAll();
  }
}

}  // namespace hoard
