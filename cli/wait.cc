#include "cli/wait.h"

#include <algorithm>
#include <random>
#include <thread>

#include "cli/json.h"

namespace hoard::cli {

bool IsPermanentFailure(const proto::FileFailure& f) {
  // The warmer records Status::ToString(): "CodeName: message".
  return f.error.rfind(std::string(CodeName(Code::kNotFound)) + ":", 0) == 0 ||
         f.error.rfind(std::string(CodeName(Code::kStale)) + ":", 0) == 0;
}

std::string NotCachedDetail(const proto::DatasetStatus& d, bool first) {
  const uint64_t missing = UncachedFiles(d);
  if (missing == 0 && d.failures.empty()) return "";
  std::string s = "; " + Thousands(missing) + " of " + Thousands(d.meta.file_count) + " file(s) not cached";
  if (first && !d.failures.empty()) s += ", first: " + d.failures[0].path + ": " + d.failures[0].error;
  return s;
}

WaitOutcome WaitUntil(Context& ctx, WaitLimits& limits, ProgressBar& bar, const WaitOptions& options,
                      const WaitPoll& poll) {
  using Clock = std::chrono::steady_clock;
  WaitOutcome out;
  bool shown = false;  // the bar printed at least once: finish its line
  auto end = [&](WaitOutcome::End e, std::string why) {
    if (shown) bar.Finish();
    out.end = e;
    out.why = std::move(why);
    out.seconds = limits.elapsed();
    out.rate_bytes_per_s = bar.rate_bytes_per_s();
    return out;
  };
  std::minstd_rand rng(std::random_device{}());
  bool unanswered = false;  // the coordinator has not answered since `unanswered_since`
  Clock::time_point unanswered_since;
  uint64_t done = 0;  // the last amount seen, for the --stall-timeout
  const bool ride_out = options.unreachable_grace.count() > 0;
  while (true) {
    const Clock::time_point sent = Clock::now();
    // No call may outlast the grace: with a hung coordinator (connected, not
    // answering) each would otherwise take a whole request timeout (10 s),
    // and the wait would end up to a timeout plus a poll past its bound.
    if (ride_out) ctx.SetCallDeadline((unanswered ? unanswered_since : sent) + options.unreachable_grace);
    Result<WaitProgress> p = poll();
    ctx.ClearCallDeadline();
    if (p.ok()) {
      unanswered = false;
      done = p->done_bytes;
      bar.Update(std::min(p->done_bytes, p->total_bytes), p->total_bytes, p->done_files, p->total_files);
      shown = true;
      if (p->complete) return end(WaitOutcome::End::kComplete, "");
      if (!p->failed.empty()) return end(WaitOutcome::End::kFailed, p->failed);
    } else if (ctx.unreachable() && ride_out) {
      // The grace counts from when the first unanswered call was sent.
      if (!unanswered) unanswered_since = sent;
      unanswered = true;
      // (A call capped to the grace's end may return a moment before it.)
      if (Clock::now() - unanswered_since >= options.unreachable_grace - std::chrono::milliseconds(50)) {
        return end(WaitOutcome::End::kUnreachable,
                   "no answer from the coordinator for " +
                       Duration(std::chrono::duration<double>(options.unreachable_grace).count()) + ": " +
                       p.status().message());
      }
    } else {
      out.error = p.status();
      return end(WaitOutcome::End::kError, out.error.message());
    }
    if (std::string why = limits.Check(done); !why.empty()) {
      if (limits.timed_out()) return end(WaitOutcome::End::kTimedOut, why);
      if (unanswered) return end(WaitOutcome::End::kUnreachable, "no answer from the coordinator; " + why);
      return end(WaitOutcome::End::kStalled, why);
    }
    // Jittered, so that the hooks of a many-node job spread out; never much
    // past the --timeout.
    const auto step = options.poll + options.poll * int(rng() % 26) / 100;
    auto left = std::chrono::duration<double>(limits.remaining_or(3600) + 0.05);
    // Nor past the end of the grace, when riding out a silent coordinator.
    using Seconds = std::chrono::duration<double>;
    if (unanswered) left = std::min<Seconds>(left, unanswered_since + options.unreachable_grace - Clock::now());
    std::this_thread::sleep_for(std::max(Seconds(0), std::min<Seconds>(step, left)));
  }
}

int FailWait(Context& ctx, const WaitOutcome& w, const std::string& what, const std::string& detail,
             nlohmann::json doc) {
  using End = WaitOutcome::End;
  if (w.end == End::kError) return ctx.FailWith(w.error.Annotate(what), std::move(doc));
  const std::string message = what + ": " + w.why + detail;
  if (w.end == End::kFailed) return ctx.FailWith(Status::Stale(message), std::move(doc), /*reached=*/true);
  // A coordinator that stayed away is exit 3, like any call it did not
  // answer; a limit that passed while it answered is a failed wait (1).
  return ctx.FailWith(Status::Unavailable(message), std::move(doc), /*reached=*/w.end != End::kUnreachable);
}

WaitOutcome WaitDataset(Context& ctx, const std::string& name, WaitLimits& limits, ProgressBar& bar,
                        const WaitOptions& options, bool stop_on_permanent_failure, DatasetWait* seen) {
  return WaitUntil(ctx, limits, bar, options, [&]() -> Result<WaitProgress> {
    Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{.dataset = name});
    if (!st.ok()) return st.status();
    if (st->datasets.empty()) return Status::Internal("the coordinator sent no status for " + name);
    seen->last = st->datasets[0];
    seen->nodes_down = 0;
    for (const auto& n : st->nodes) seen->nodes_down += n.up ? 0 : 1;
    const proto::DatasetStatus& d = seen->last;
    WaitProgress p{.done_bytes = d.cached_bytes,
                   .total_bytes = d.expected_bytes,
                   .done_files = d.files_cached,
                   .total_files = d.meta.file_count,
                   .complete = d.complete};
    if (stop_on_permanent_failure) {
      size_t permanent = 0;
      for (const auto& f : d.failures) permanent += IsPermanentFailure(f) ? 1 : 0;
      if (permanent > 0) {
        // Refresh, not remove and add: a new version keeps every cached
        // chunk of the files that did not change.
        p.failed = std::to_string(permanent) + " file(s) are gone or changed at the origin since the dataset "
                   "was added: this version can never be complete (hoard dataset refresh " + name +
                   " adopts the origin as it is now, keeping the unchanged files' cached chunks)";
      }
    }
    return p;
  });
}

}  // namespace hoard::cli
