#include "cli/wait.h"

#include <random>
#include <thread>

namespace hoard::cli {

bool IsPermanentFailure(const proto::FileFailure& f) {
  // The warmer records Status::ToString(): "CodeName: message".
  return f.error.rfind(std::string(CodeName(Code::kNotFound)) + ":", 0) == 0 ||
         f.error.rfind(std::string(CodeName(Code::kStale)) + ":", 0) == 0;
}

WaitOutcome WaitComplete(Context& ctx, const std::string& name, WaitLimits& limits, ProgressBar& bar,
                         const WaitOptions& options) {
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
  while (true) {
    Result<proto::ClusterStatusReply> st = ctx.Call(proto::ClusterStatus{.dataset = name});
    if (st.ok() && !st->datasets.empty()) {
      unanswered = false;
      out.dataset = st->datasets[0];
      out.nodes_down = 0;
      for (const auto& n : st->nodes) out.nodes_down += n.up ? 0 : 1;
      const proto::DatasetStatus& d = out.dataset;
      bar.Update(std::min(d.cached_bytes, d.expected_bytes), d.expected_bytes, d.files_cached, d.meta.file_count);
      shown = true;
      if (d.complete) return end(WaitOutcome::End::kComplete, "");
      if (options.stop_on_permanent_failure) {
        size_t permanent = 0;
        for (const auto& f : d.failures) permanent += IsPermanentFailure(f) ? 1 : 0;
        if (permanent > 0) {
          return end(WaitOutcome::End::kFailed,
                     std::to_string(permanent) + " file(s) are gone or changed at the origin since the dataset "
                     "was added: this version can never be complete (remove the dataset and add it again)");
        }
      }
    } else if (!st.ok() && ctx.unreachable() && options.unreachable_grace.count() > 0) {
      if (!unanswered) unanswered_since = Clock::now();
      unanswered = true;
      if (Clock::now() - unanswered_since >= options.unreachable_grace) {
        return end(WaitOutcome::End::kUnreachable, "no answer from the coordinator for " +
                                                       Duration(double(options.unreachable_grace.count())) +
                                                       ": " + st.status().message());
      }
    } else {
      out.error = st.ok() ? Status::Internal("the coordinator sent no status for " + name) : st.status();
      return end(WaitOutcome::End::kError, out.error.message());
    }
    if (std::string why = limits.Check(out.dataset.cached_bytes); !why.empty()) {
      if (limits.timed_out()) return end(WaitOutcome::End::kTimedOut, why);
      if (unanswered) return end(WaitOutcome::End::kUnreachable, "no answer from the coordinator; " + why);
      return end(WaitOutcome::End::kStalled, why);
    }
    // Jittered, so that the hooks of a many-node job spread out; never much
    // past the --timeout.
    const auto step = options.poll + options.poll * int(rng() % 26) / 100;
    const auto left = std::chrono::duration<double>(limits.remaining_or(3600) + 0.05);
    std::this_thread::sleep_for(std::min<std::chrono::duration<double>>(step, left));
  }
}

}  // namespace hoard::cli
