// hoard hook prewarm NAME [--job ID [--lease-ttl DUR]] [--timeout S] [--source URL] [--replicas N]
//                        [--stall-timeout S] [--unreachable-timeout S]
// hoard hook release --job ID [NAME]
//
// With --job, prewarm first takes the job's lease on the dataset
// (coordinator/leases.h: never evicted while held), and release, at the
// job's end, drops it (or every lease of the job); a lease nobody releases
// ends after its ttl.
//
// For job schedulers (a Slurm prolog or pre-job, a Kubernetes init
// container, a wrapper script: hooks/README.md): make sure a dataset is
// cached before a job starts, and say how it went with an exit status a
// scheduler can act on (kHookExitStatus below).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "cli/wait.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

// What a scheduler acts on: 0 start the job; 2 and 4 may go away by
// themselves (retry later); 1, 3 and 64 will not.
enum HookExit : int {
  kCached = 0,
  kFailed = 1,
  kTimedOut = 2,
  kNoDataset = 3,
  kUnreachable = 4,
  kUsage = 64,  // EX_USAGE (sysexits.h), apart from everything a run can end with
};

constexpr const char* kHookExitStatus =
    "Exit status (for job schedulers; hooks/README.md):\n"
    "  0   cached: every chunk of the dataset is on all its owners; start the job\n"
    "  1   the warm-up failed: files gone or changed at the origin (listed; hoard dataset refresh\n"
    "      NAME adopts them), no progress for --stall-timeout, the dataset exists with another\n"
    "      source, or the coordinator refused\n"
    "  2   --timeout passed before the dataset was complete (the warm-up goes on: retry later)\n"
    "  3   no such dataset (and no --source to add it from)\n"
    "  4   the coordinator could not be reached (at start within ~2 s; during the wait after\n"
    "      --unreachable-timeout without an answer, default 30 s: the hook exits 30-33 s after\n"
    "      the coordinator stopped answering)\n"
    "  64  bad usage";

// A job's dataset is polled by every node's hook at once: poll gently.
constexpr auto kPoll = std::chrono::seconds(2);
// Progress lines in a job log (not a terminal).
constexpr auto kLogEvery = std::chrono::seconds(10);
// Failures listed in the text output (JSON lists them all).
constexpr size_t kFailuresShown = 10;

struct PrewarmArgs {
  std::string name;
  std::string source;  // empty: the dataset must exist
  uint32_t replicas = 1;
  double timeout_s = 0;         // 0 = no limit
  double stall_timeout_s = 60;  // 0 = no limit
  // A coordinator restart takes a few seconds; a hook rides it out for this
  // long without an answer (WaitOptions::unreachable_grace).
  double unreachable_timeout_s = 30;
  std::string job;        // empty: take no lease
  std::string lease_ttl;  // a duration; empty: the coordinator's default (24h)
};

// The source as `hoard dataset add` sends it: an nfs:// URL as it is, a local
// directory as its absolute path (the coordinator runs in another cwd).
Result<std::string> CanonicalSource(const std::string& source) {
  if (source.rfind("nfs://", 0) == 0) return source;
  if (source.find("://") != std::string::npos) {
    return Status::InvalidArgument("--source " + source +
                                   ": use nfs://host[:port]/export/path or a local directory");
  }
  char resolved[PATH_MAX];
  if (::realpath(source.c_str(), resolved) == nullptr) return Status::FromErrno(errno, "--source " + source);
  return std::string(resolved);
}

class Prewarm {
 public:
  Prewarm(Context& ctx, const PrewarmArgs& args)
      : ctx_(ctx), a_(args), limits_(args.timeout_s, args.stall_timeout_s) {}

  int Run() {
    if (!a_.source.empty()) {
      Result<std::string> s = CanonicalSource(a_.source);
      if (!s.ok()) return End(kUsage, "usage", s.status().message());
      source_ = *s;
    }
    if (const int code = FindOrAdd(); code >= 0) return code;
    if (!a_.job.empty()) {
      // Before the warm-up: what it fetches must not be evicted meanwhile.
      uint32_t ttl = 0;
      if (!a_.lease_ttl.empty()) {
        Result<uint64_t> s = ParseDurationSeconds(a_.lease_ttl);
        if (!s.ok() || *s == 0 || *s > UINT32_MAX) return End(kUsage, "usage", "--lease-ttl " + a_.lease_ttl + ": use e.g. 90m, 24h, 7d");
        ttl = static_cast<uint32_t>(*s);
      }
      Result<proto::LeaseTakeReply> lease = ctx_.Call(
          proto::LeaseTake{.dataset = a_.name, .job = a_.job, .ttl_s = ttl, .caller = SelfCaller(a_.job)});
      if (!lease.ok()) return EndWith(lease.status().Annotate("lease for job " + a_.job));
      lease_expires_unix_ = lease->lease.expires_unix;
    }
    Result<proto::WarmReply> warm = ctx_.Call(proto::Warm{.name = a_.name, .caller = SelfCaller(a_.job)});
    if (!warm.ok()) return EndWith(warm.status());
    ProgressBar bar("prewarm " + a_.name, kLogEvery);
    limits_.RestartStall();  // the add's walk is not a stalled warm-up
    const WaitOptions options{.poll = kPoll,
                              .unreachable_grace = std::chrono::milliseconds(
                                  std::llround(std::min(a_.unreachable_timeout_s, 1e9) * 1000))};
    wait_ = WaitDataset(ctx_, a_.name, limits_, bar, options, /*stop_on_permanent_failure=*/true, &seen_);
    const proto::DatasetStatus& d = seen_.last;
    // "at 87.5%; 1 node(s) down; 1,273 of 2,000 file(s) not cached" (End
    // lists the first failures).
    char at[32];
    std::snprintf(at, sizeof at, " at %.1f%%", PercentCached(d));
    std::string detail = at;
    if (seen_.nodes_down > 0) detail += "; " + std::to_string(seen_.nodes_down) + " node(s) down";
    detail += NotCachedDetail(d, /*first=*/false);
    switch (wait_.end) {
      case WaitOutcome::End::kComplete:
        return End(kCached, "cached",
                   "cached: " + FormatBytes(double(d.meta.total_bytes)) + " in " + Thousands(d.meta.file_count) +
                       " files on " + std::to_string(d.nodes_reporting) + " node(s), " +
                       std::to_string(d.meta.replicas) + " replica(s), after " + Duration(wait_.seconds));
      case WaitOutcome::End::kTimedOut:
        return End(kTimedOut, "timeout", wait_.why + detail + "; the warm-up goes on");
      case WaitOutcome::End::kStalled:
      case WaitOutcome::End::kFailed:
        return End(kFailed, "failed", wait_.why + detail);
      case WaitOutcome::End::kUnreachable:
        return End(kUnreachable, "unreachable", wait_.why + " (coordinator: " + ctx_.CoordinatorEndpoint() + ")");
      case WaitOutcome::End::kError:
        break;
    }
    return EndWith(wait_.error);
  }

 private:
  // Makes sure the dataset exists: finds it, or adds it from --source.
  // Returns -1 to go on, else the exit status to end with.
  int FindOrAdd() {
    while (true) {
      Result<proto::ClusterStatusReply> st = ctx_.Call(proto::ClusterStatus{.dataset = a_.name});
      if (st.ok() && !st->datasets.empty()) {
        const proto::DatasetMeta& meta = st->datasets[0].meta;
        if (!source_.empty() && !added_ && meta.source != source_) {
          return End(kFailed, "failed",
                     "dataset " + a_.name + " exists with source " + meta.source + ", not " + source_ +
                         " (remove it, or pick another name)");
        }
        return -1;
      }
      if (!st.ok() && st.status().code() != Code::kNotFound) return EndWith(st.status());
      if (source_.empty()) {
        return End(kNoDataset, "no_dataset",
                   "no dataset named " + a_.name + " (add it with: hoard dataset add " + a_.name +
                       " SOURCE, or pass --source)");
      }
      // A long walk outlasts one call: bound each by 60 s (and --timeout),
      // and ask again. Another hook adding the same dataset is answered
      // AlreadyExists until its walk ends.
      const double wait_s = std::min(60.0, limits_.remaining_or(60.0));
      Result<proto::DatasetAddReply> add = ctx_.Call(
          proto::DatasetAdd{.name = a_.name, .source = source_, .replicas = a_.replicas},
          std::chrono::milliseconds(std::max<int64_t>(1, int64_t(wait_s * 1000))));
      if (add.ok()) {
        added_ = true;
        std::fprintf(stderr, "prewarm %s: added from %s: %s files, %s\n", a_.name.c_str(), source_.c_str(),
                     Thousands(add->meta.file_count).c_str(), FormatBytes(double(add->meta.total_bytes)).c_str());
        continue;  // its status, then the warm-up
      }
      if (!ctx_.unreachable() && add.status().code() != Code::kAlreadyExists) {
        return EndWith(add.status().Annotate("dataset add " + a_.name));
      }
      if (limits_.timed_out()) {
        return End(kTimedOut, "timeout",
                   "timed out after " + Duration(limits_.elapsed()) + " while dataset " + a_.name +
                       " was being added");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  // Ends on a failed call.
  int EndWith(const Status& s) {
    if (ctx_.unreachable()) {
      return End(kUnreachable, "unreachable",
                 "cannot reach the coordinator at " + ctx_.CoordinatorEndpoint() + ": " + s.message());
    }
    if (s.code() == Code::kNotFound) return End(kNoDataset, "no_dataset", s.message());
    if (s.code() == Code::kInvalidArgument) return End(kUsage, "usage", s.message());
    return End(kFailed, "failed", s.ToString());
  }

  // Prints the outcome (text, or one JSON object with --json) and returns `code`.
  int End(int code, const std::string& outcome, const std::string& reason) {
    const proto::DatasetStatus& d = seen_.last;
    const bool have_status = !d.meta.name.empty();
    if (ctx_.json()) {
      nlohmann::json failures = nlohmann::json::array();
      for (const auto& f : d.failures) {
        failures.push_back({{"path", f.path}, {"error", f.error}, {"permanent", IsPermanentFailure(f)}});
      }
      ctx_.Done({{"name", a_.name},
                 {"exit_code", code},
                 {"outcome", outcome},
                 {"reason", reason},
                 {"added", added_},
                 {"seconds", limits_.elapsed()},
                 {"percent_cached", have_status ? PercentCached(d) : 0.0},
                 {"cached_bytes", d.cached_bytes},
                 {"expected_bytes", d.expected_bytes},
                 {"cached_files", d.files_cached},
                 {"uncached_files", UncachedFiles(d)},
                 {"files", d.meta.file_count},
                 {"bytes", d.meta.total_bytes},
                 {"nodes_down", seen_.nodes_down},
                 {"job", a_.job},
                 {"lease_expires_unix", lease_expires_unix_},
                 {"failures", failures}},
                "");
    }
    if (code == kCached) {
      if (!ctx_.json()) std::cout << "prewarm " << a_.name << ": " << reason << std::endl;
      return code;
    }
    std::cerr << "hoard: prewarm " << a_.name << ": " << reason << (d.failures.empty() ? "" : ":") << std::endl;
    const size_t shown = std::min(d.failures.size(), kFailuresShown);
    for (size_t i = 0; i < shown; ++i) {
      std::cerr << "  " << d.failures[i].path << ": " << d.failures[i].error << "\n";
    }
    // All the files not cached, not the length of the capped list.
    if (shown > 0 && UncachedFiles(d) > shown) {
      std::cerr << "  ... and " << Thousands(UncachedFiles(d) - shown) << " more file(s) not cached (hoard status "
                << a_.name << ")\n";
    }
    return code;
  }

  Context& ctx_;
  const PrewarmArgs& a_;
  WaitLimits limits_;
  std::string source_;  // canonical --source, or empty
  bool added_ = false;  // this hook added the dataset
  int64_t lease_expires_unix_ = 0;  // the job's lease, once taken
  WaitOutcome wait_;    // how the wait ended
  DatasetWait seen_;    // what the wait saw (empty before it)
};

// A dataset name as the coordinator accepts it, checked here so that a typo
// is a usage error (64), not "no such dataset" (3).
std::string CheckDatasetName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-' &&
                  name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                      std::string::npos;
  return ok ? "" : "invalid dataset name '" + name + "': use 1-64 letters, digits, '.', '_' or '-'";
}

std::string CheckSeconds(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0) {
    return "'" + text + "' is not a number of seconds >= 0";
  }
  return "";
}

// hoard hook release --job ID [NAME]: the job ended. Exit 0 also when nothing
// was held (the lease expired, or a resend): the epilog's work is done.
int RunRelease(Context& ctx, const std::string& job, const std::string& name) {
  Result<proto::LeaseReleaseReply> r =
      ctx.Call(proto::LeaseRelease{.dataset = name, .job = job, .caller = SelfCaller(job)});
  const std::string what = name.empty() ? "job " + job + "'s leases" : "job " + job + "'s lease on " + name;
  int code = kCached;
  std::string outcome = "released", reason;
  if (r.ok()) {
    reason = r->released == 0 ? what + ": none held" : what + ": released " + std::to_string(r->released);
  } else if (ctx.unreachable()) {
    code = kUnreachable;
    outcome = "unreachable";
    reason = "cannot reach the coordinator at " + ctx.CoordinatorEndpoint() + ": " + r.status().message() +
             " (the lease ends at its ttl)";
  } else {
    code = r.status().code() == Code::kInvalidArgument ? kUsage : kFailed;
    outcome = code == kUsage ? "usage" : "failed";
    reason = what + ": " + r.status().ToString();
  }
  if (ctx.json()) {
    ctx.Done({{"job", job},
              {"dataset", name},
              {"exit_code", code},
              {"outcome", outcome},
              {"reason", reason},
              {"released", r.ok() ? r->released : 0}},
             "");
  } else {
    (code == kCached ? std::cout : std::cerr) << (code == kCached ? "" : "hoard: ") << "release " << reason
                                               << std::endl;
  }
  return code;
}

}  // namespace

void AddHookCommands(CLI::App& app, Action* action) {
  auto* hook = app.add_subcommand("hook", "For job schedulers: hold a job until its dataset is cached");
  hook->require_subcommand(1);
  hook->footer(kHookExitStatus);

  auto args = std::make_shared<PrewarmArgs>();
  auto* pre = hook->add_subcommand(
      "prewarm",
      "Warm a dataset and wait until every chunk is cached on all its owners, for a Slurm prolog or pre-job, a\n"
      "Kubernetes init container or a wrapper script (hooks/). Progress goes to stderr: a bar on a terminal,\n"
      "a line every 10 s in a job log.");
  pre->footer(kHookExitStatus);
  pre->add_option("name", args->name, "Dataset name")->required()->check(CLI::Validator(CheckDatasetName, "NAME"));
  pre->add_option("--timeout", args->timeout_s, "Give up after this many seconds (0 = never): exit 2")
      ->check(CLI::Validator(CheckSeconds, "SECONDS"))
      ->capture_default_str();
  pre->add_option("--stall-timeout", args->stall_timeout_s,
                  "Give up after this many seconds without progress (0 = never): exit 1")
      ->check(CLI::Validator(CheckSeconds, "SECONDS"))
      ->capture_default_str();
  pre->add_option("--unreachable-timeout", args->unreachable_timeout_s,
                  "During the wait, give up after this many seconds without an answer from the coordinator\n"
                  "(0 = at the first call it does not answer): exit 4")
      ->check(CLI::Validator(CheckSeconds, "SECONDS"))
      ->capture_default_str();
  pre->add_option("--source", args->source,
                  "Add the dataset from this source (nfs://host[:port]/export/path or a local directory) if it\n"
                  "does not exist; if it does, its source must be this one");
  pre->add_option("--replicas", args->replicas, "With --source: copies of each chunk, if the dataset is added")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  pre->add_option("--job", args->job,
                  "Take this job's lease on the dataset first (never evicted while held; hoard hook release\n"
                  "--job ID at the job's end, or it ends after --lease-ttl)");
  pre->add_option("--lease-ttl", args->lease_ttl,
                  "With --job: how long the lease holds unless renewed or released: 90m, 24h, 7d\n"
                  "(default: the coordinator's, 24h); take the job's time limit");
  pre->callback([action, args] { *action = [args](Context& ctx) { return Prewarm(ctx, *args).Run(); }; });

  auto release_job = std::make_shared<std::string>();
  auto release_name = std::make_shared<std::string>();
  auto* rel = hook->add_subcommand(
      "release", "The job ended: release its lease on a dataset, or all its leases (a Slurm epilog, a wrapper's exit)");
  rel->footer("Exit status: 0 released, or nothing was held; 1 the coordinator refused; 4 the coordinator could\n"
              "not be reached (the lease then ends at its ttl); 64 bad usage");
  rel->add_option("name", *release_name, "Dataset name (none: every lease of the job)");
  rel->add_option("--job", *release_job, "The job's id, as given to prewarm --job")->required();
  rel->callback([action, release_job, release_name] {
    *action = [release_job, release_name](Context& ctx) { return RunRelease(ctx, *release_job, *release_name); };
  });
}

int ParseErrorExit(CLI::App& app, const GlobalOptions& global, const CLI::ParseError& e) {
  // Every other command reports it as any failure of bad input (one line,
  // and with --json the same document as the rest: exit 2).
  if (!app.got_subcommand("hook")) {
    Context ctx(global);
    return ctx.Fail(Status::InvalidArgument(std::string(e.what()) + " (see hoard --help)"));
  }
  std::cerr << "hoard: " << e.what() << " (see hoard hook --help)" << std::endl;
  if (global.json) {
    nlohmann::json doc = {{"exit_code", int(kUsage)}, {"outcome", "usage"}, {"reason", e.what()}};
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  return kUsage;
}

}  // namespace hoard::cli
