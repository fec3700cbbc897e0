// Fuzz target: what the coordinator reads back at start
// (coordinator/state_store.h): its snapshot COORD/state.msgpack and its
// write-ahead log COORD/state.log (common/state_log.h).
//
// Input: a flags byte, then the snapshot as a part (fuzz_util.h, WriteSnapshotAndLog), then the
// log. Flags: 1 = write the snapshot, 2 = write the log, 4 = fix the log's
// checksums, 8 = fix the snapshot's checksum (both so the fuzzer reaches the
// decoders behind them; without, it fuzzes the checks). StateStore::Open must
// then load a state or refuse with kCorruption (or kInvalidArgument), never
// crash, hang or allocate without bound; a state it loads must be savable and
// must load again as the same state.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "common/hash.h"
#include "common/msgpack_codec.h"
#include "coordinator/state_store.h"
#include "fuzz/fuzz_util.h"

namespace {

// The snapshot's layout (format 2), as state_store.cc writes it.
struct SnapshotFile {
  uint32_t format = 0;
  uint64_t seq = 0;
  uint64_t checksum = 0;
  std::vector<char> state;
  MSGPACK_DEFINE_MAP(format, seq, checksum, state);
};

std::string FixSnapshotChecksum(std::string_view bytes) {
  SnapshotFile f;
  try {
    hoard::UnpackState(bytes.data(), bytes.size(), &f);
  } catch (const std::exception&) {
    return std::string(bytes);
  }
  if (f.format != 2) return std::string(bytes);
  f.checksum = hoard::Checksum64(f.state.data(), f.state.size());
  return hoard::PackState(f);
}

hoard::StateStore::Options QuietOptions() {
  return {.logger = std::make_shared<spdlog::logger>("fuzz")};  // no sinks: discards
}

bool Expected(const hoard::Status& s) {
  return s.code() == hoard::Code::kCorruption || s.code() == hoard::Code::kInvalidArgument;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = hoard::fuzz::WriteSnapshotAndLog(data, size, "state.msgpack", "state.log", FixSnapshotChecksum);
  hoard::Result<hoard::CoordinatorState> state = hoard::Status::Internal("not opened");
  {
    hoard::StateStore store(dir, QuietOptions());  // holds DATA/LOCK until the end of this block
    state = store.Open();
    if (!state.ok()) {
      if (!Expected(state.status())) std::abort();
      return 0;
    }
    // What loaded saves (a no-op: it is what is on disk), and a change to it
    // goes to the log and comes back after a restart.
    if (!store.Save(*state).ok()) std::abort();
    state->epoch++;
    if (!store.Save(*state).ok()) std::abort();
  }
  hoard::StateStore again(dir, QuietOptions());
  hoard::Result<hoard::CoordinatorState> reloaded = again.Open();
  if (!reloaded.ok() || hoard::PackState(*reloaded) != hoard::PackState(*state)) std::abort();
  return 0;
}
