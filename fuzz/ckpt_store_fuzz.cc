// Fuzz target: what the coordinator reads back of the checkpoint namespace
// at start (checkpoint/ckpt_store.h): COORD/ckpt/snapshot.msgpack and the
// journal COORD/ckpt/journal.log, loaded by CkptTable::Open.
//
// Input: a flags byte, the snapshot as a part (fuzz_util.h, WriteSnapshotAndLog), then the
// journal. Flags: 1 = write the snapshot, 2 = write the journal, 4 = fix the
// journal's checksums (so the fuzzer reaches the record decoder). Open must
// load a namespace or refuse with kCorruption, never crash or hang; a
// namespace it loads must then answer every read the mounts, the CLI and the
// nodes make (each path listed and looked up, status, drain work with
// rebuild, the origin queue) and take a new job directory.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "checkpoint/ckpt_table.h"
#include "fuzz/fuzz_util.h"

namespace {

// Lists `path` and looks up everything in it, depth first; at most `budget`
// entries in all, so a wide namespace costs bounded time per input.
void Walk(const hoard::CkptTable& t, const std::string& path, int* budget) {
  hoard::Result<hoard::proto::CkptListReply> list = t.List(path);
  if (!list.ok()) return;
  for (const hoard::proto::CkptEntry& child : list->children) {
    if (--*budget < 0) return;
    hoard::Result<hoard::proto::CkptEntry> e = t.Lookup(child.path);
    if (!e.ok() || e->id != child.id) std::abort();  // what List shows, Lookup finds
    if (child.is_dir) Walk(t, child.path, budget);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = hoard::fuzz::WriteSnapshotAndLog(data, size, "snapshot.msgpack", "journal.log");
  hoard::CkptTable::Options options{.dir = dir, .logger = std::make_shared<spdlog::logger>("fuzz")};
  options.now_unix_ms = [] { return int64_t{1'800'000'000'000}; };
  hoard::Result<std::unique_ptr<hoard::CkptTable>> table = hoard::CkptTable::Open(std::move(options));
  if (!table.ok()) {
    if (table.status().code() != hoard::Code::kCorruption) std::abort();
    return 0;
  }
  hoard::CkptTable& t = **table;
  int budget = 200;
  Walk(t, "", &budget);
  (void)t.GetStatus({});
  (void)t.Work("n1", {"n1", "n2"}, /*rebuild=*/true);
  (void)t.Work("n2", {"n2"}, /*rebuild=*/false);
  (void)t.NextOriginOp();
  hoard::Result<hoard::proto::CkptEntry> job = t.Create({.path = "fuzz-job", .is_dir = true, .mode = 0755});
  if (!job.ok() && job.status().code() != hoard::Code::kAlreadyExists) std::abort();
  return 0;
}
