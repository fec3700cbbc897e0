// File: cli/wait.h
//
// The one wait loop of the CLI, behind every --wait (`hoard warm`, `hoard
// checkpoint flush`, `hoard node drain`, `hoard scrub`) and `hoard hook
// prewarm`: call a poll function, feed what it saw to a ProgressBar, and stop
// when it says the work is complete, when it reports a failure no retry can
// fix, when a limit (--timeout, --stall-timeout) passes, or when a poll fails.
// The caller says how to poll and what the outcome means; a command turns a
// failed wait into its exit status with FailWait, so that every failure goes
// through Context::FailWith (one line on stderr, one JSON document with
// --json). `hoard hook prewarm` alone maps the outcome to its own exit table,
// which job schedulers act on (cli/cmd_hook.cc).
//
// Usage:
//   ProgressBar bar("flush " + job);
//   WaitLimits limits(timeout_s, stall_timeout_s);
//   WaitOutcome w = WaitUntil(ctx, limits, bar, {}, [&]() -> Result<WaitProgress> { ... });
//   if (w.end != WaitOutcome::End::kComplete) return FailWait(ctx, w, "flush " + job, detail, doc);
//
// Thread-safety: none needed; one command, one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/context.h"
#include "cli/progress.h"
#include "proto/messages.h"

namespace hoard::cli {

struct WaitOptions {
  std::chrono::milliseconds poll{250};  // between two polls (jittered by up to +25%)
  // Keep polling through a coordinator that does not answer (a restart), for
  // up to this long without an answer; 0 = the first unanswered call ends
  // the wait. Only a poll whose coordinator call got no answer at all
  // (Context::unreachable()) is ridden out. The grace counts from the start
  // of the first call that got no answer, and no call (nor sleep) runs past
  // it: the wait ends at most Context::kMinCappedCall after it, so at most
  // `poll` (+25%) plus that after the coordinator stopped answering.
  std::chrono::milliseconds unreachable_grace{0};
};

// What one poll saw.
struct WaitProgress {
  uint64_t done_bytes = 0, total_bytes = 0;  // the bar, and the --stall-timeout's measure
  uint64_t done_files = 0, total_files = 0;
  bool complete = false;
  // Not empty: the work can never complete (e.g. files gone at the origin);
  // the wait ends at once with kFailed and this reason.
  std::string failed;
};

using WaitPoll = std::function<Result<WaitProgress>()>;

struct WaitOutcome {
  enum class End {
    kComplete,
    kTimedOut,     // the --timeout passed
    kStalled,      // no progress for the --stall-timeout
    kFailed,       // the poll reported a failure no retry can fix
    kUnreachable,  // no answer from the coordinator for the grace period
    kError,        // a poll failed: `error`
  };
  End end = End::kError;
  std::string why;   // what ended the wait, for all but kComplete
  Status error;      // kError only
  double seconds = 0;  // since `limits` started
  double rate_bytes_per_s = 0;
};

// Polls until one of the ends above; the bar's line is finished on return.
WaitOutcome WaitUntil(Context& ctx, WaitLimits& limits, ProgressBar& bar, const WaitOptions& options,
                      const WaitPoll& poll);

// Reports a wait that did not complete through Context::FailWith and returns the
// exit status: `what` ("warm NAME") and the outcome's reason, then `detail`
// (appended to the message); with --json, `doc` (what the wait saw last, in
// the command's vocabulary) is the error document, with "error" and "code"
// added. A poll that failed keeps its own Status (so a coordinator that did
// not answer still exits 3, as does one that stayed away past the grace); a
// limit that passed is Unavailable (the work goes on: retry the wait later)
// and a failure no retry fixes is Stale (this version can never complete):
// both exit 1.
int FailWait(Context& ctx, const WaitOutcome& w, const std::string& what, const std::string& detail,
             nlohmann::json doc);

// A dataset's warm-up: polls its status until every chunk is on all its
// owners (as the coordinator computes it). `last` receives the last status
// received and `nodes_down` the nodes down in it. With
// `stop_on_permanent_failure`, a file NotFound or Stale at the origin (gone
// or changed; the dataset version is immutable, so it can never be complete)
// ends the wait with kFailed.
struct DatasetWait {
  proto::DatasetStatus last;  // empty (no name) if no status was received
  size_t nodes_down = 0;
};
WaitOutcome WaitDataset(Context& ctx, const std::string& name, WaitLimits& limits, ProgressBar& bar,
                        const WaitOptions& options, bool stop_on_permanent_failure, DatasetWait* seen);

// True for a warm-up failure no retry can fix (see WaitDataset).
bool IsPermanentFailure(const proto::FileFailure& f);

// For the message of a warm-up that did not complete: "; 1,273 of 2,000
// file(s) not cached" and, with `first`, ", first: PATH: ERROR" (the first
// of the failures listed). The count is every file not whole on its owners,
// never the length of the capped failure list. "" when nothing is missing.
std::string NotCachedDetail(const proto::DatasetStatus& d, bool first);

}  // namespace hoard::cli
