// File: cli/wait.h
//
// The wait shared by `hoard warm --wait` and `hoard hook prewarm`: poll the
// coordinator's status of one dataset, feeding a ProgressBar, until it is
// complete (every chunk on all its owners, as the coordinator computes it)
// or something ends the wait. The caller turns the outcome into text and an
// exit status.
#pragma once

#include <chrono>
#include <string>

#include "cli/context.h"
#include "cli/progress.h"
#include "proto/messages.h"

namespace hoard::cli {

struct WaitOptions {
  std::chrono::milliseconds poll{250};  // between two status calls (jittered by up to +25%)
  // End at once when a file failed in a way no retry can fix: NotFound or
  // Stale at the origin (the file is gone or changed; the dataset version is
  // immutable, so it can never be complete).
  bool stop_on_permanent_failure = false;
  // Keep polling through a coordinator that does not answer (a restart), for
  // up to this long without an answer; 0 = the first unanswered call ends
  // the wait.
  std::chrono::seconds unreachable_grace{0};
};

struct WaitOutcome {
  enum class End {
    kComplete,
    kTimedOut,     // the --timeout passed
    kStalled,      // no progress for the --stall-timeout
    kFailed,       // a permanent file failure (stop_on_permanent_failure)
    kUnreachable,  // no answer from the coordinator for the grace period
    kError,        // a status call failed: `error`
  };
  End end = End::kError;
  std::string why;               // what ended the wait, for all but kComplete
  Status error;                  // kError only
  proto::DatasetStatus dataset;  // the last status received (empty if none)
  size_t nodes_down = 0;         // in the last status received
  double seconds = 0;            // since `limits` started
  double rate_bytes_per_s = 0;
};

WaitOutcome WaitComplete(Context& ctx, const std::string& name, WaitLimits& limits, ProgressBar& bar,
                         const WaitOptions& options);

// True for a warm-up failure no retry can fix (see stop_on_permanent_failure).
bool IsPermanentFailure(const proto::FileFailure& f);

}  // namespace hoard::cli
