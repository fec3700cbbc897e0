// hoard checkpoint ls [JOB] | status [JOB] | flush JOB [--wait]
#include <cstdio>

#include "cli/ckpt_health.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "cli/wait.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct CkptArgs {
  std::string job;
  bool wait = false;
  double timeout_s = 0;         // 0 = no limit
  double stall_timeout_s = 120;  // no progress for this long ends the wait
};

const char* Level(uint8_t level) { return proto::CkptLevelName(static_cast<proto::CkptLevel>(level)); }

// The drain error of file `id` among `errors` (since_unix_ms 0: none).
proto::CkptDrainError ErrorOf(const std::vector<proto::CkptDrainError>& errors, uint64_t id) {
  for (const auto& e : errors) {
    if (e.id == id) return e;
  }
  return {};
}

nlohmann::json ToJson(const proto::CkptEntry& e, int64_t now_ms, const proto::CkptDrainError& error) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const auto& r : e.replicas) replicas.push_back(r);
  return {{"path", e.path},
          {"id", Id(e.id)},
          {"dir", e.is_dir},
          {"bytes", e.size},
          {"gen", e.gen},
          {"level", Level(e.level)},
          {"writer", e.writer},
          {"replicas", replicas},
          {"replicas_wanted", e.replicas_wanted},
          {"committed_unix_ms", e.committed_unix_ms},
          {"drained_unix_ms", e.drained_unix_ms},
          {"undrained_age_seconds", e.level < uint8_t(proto::CkptLevel::kP) && e.committed_unix_ms > 0
                                        ? double(now_ms - e.committed_unix_ms) / 1000
                                        : 0.0},
          {"drain_error", cli::ToJson(error, now_ms)}};
}

std::string JobLine(const proto::CkptJobStatus& j, int64_t now_ms) {
  auto n = [&](proto::CkptLevel l) { return j.files_by_level.size() > size_t(l) ? j.files_by_level[size_t(l)] : 0; };
  std::string error = ShortDrainError(j.drain_error, now_ms);
  if (j.failing_files > 1) error += " (" + std::to_string(j.failing_files) + " files)";
  const std::string overdue =
      j.overdue_files > 0 ? "(" + std::to_string(j.overdue_files) + " past the drain deadline)" : "";
  char line[1024];
  std::snprintf(line, sizeof line, "%-24s %8llu %10s %6llu %6llu %6llu %10s %10s %-28s %s", j.job.c_str(),
                (unsigned long long)j.files, FormatBytes(double(j.bytes)).c_str(),
                (unsigned long long)n(proto::CkptLevel::kL), (unsigned long long)n(proto::CkptLevel::kR),
                (unsigned long long)n(proto::CkptLevel::kP), FormatBytes(double(j.undrained_bytes)).c_str(),
                j.oldest_undrained_unix_ms > 0 ? Duration(double(now_ms - j.oldest_undrained_unix_ms) / 1000).c_str()
                                               : "-",
                error.c_str(), overdue.c_str());
  return line;
}

int RunStatus(Context& ctx, const CkptArgs& a, bool files) {
  Result<proto::CkptStatusReply> r = ctx.Call(proto::CkptStatus{.job = a.job, .files = files});
  if (!r.ok()) return ctx.Fail(r.status());
  const int64_t now_ms = r->now_unix_ms;
  nlohmann::json doc;
  doc["jobs"] = nlohmann::json::array();
  for (const auto& j : r->jobs) doc["jobs"].push_back(cli::ToJson(j, now_ms));
  doc["origin"] = cli::ToJson(r->origin, now_ms);
  doc["drain_errors"] = nlohmann::json::array();
  for (const auto& e : r->drain_errors) doc["drain_errors"].push_back(cli::ToJson(e, now_ms));
  std::string text;
  if (files) {
    doc["files"] = nlohmann::json::array();
    char line[2048];
    std::snprintf(line, sizeof line, "%-5s %10s %5s %-28s %-40s %s\n", "LEVEL", "SIZE", "GEN", "DRAIN ERROR", "PATH",
                  "HOLDERS");
    text += line;
    for (const auto& e : r->files) {
      const proto::CkptDrainError error = ErrorOf(r->drain_errors, e.id);
      doc["files"].push_back(ToJson(e, now_ms, error));
      if (e.is_dir) continue;
      std::string holders = e.writer;
      size_t replicated = 0;
      for (const auto& c : e.replicas) replicated += c.empty() ? 0 : 1;
      if (!e.replicas.empty()) holders += " + " + std::to_string(replicated) + "/" + std::to_string(e.replicas.size()) +
                                          " chunks on peers";
      std::snprintf(line, sizeof line, "%-5s %10s %5llu %-28s %-40s %s\n", Level(e.level),
                    FormatBytes(double(e.size)).c_str(), (unsigned long long)e.gen,
                    ShortDrainError(error, now_ms).c_str(), e.path.c_str(),
                    holders.empty() ? "(origin only)" : holders.c_str());
      text += line;
    }
  } else {
    char head[256];
    std::snprintf(head, sizeof head, "%-24s %8s %10s %6s %6s %6s %10s %10s %s\n", "JOB", "FILES", "BYTES", "L", "R",
                  "P", "UNDRAINED", "OLDEST", "DRAIN ERROR");
    text += head;
    for (const auto& j : r->jobs) text += JobLine(j, now_ms) + "\n";
    if (r->jobs.empty()) text += "(no checkpoints)\n";
  }
  // Why files are not getting there, where an operator looks first.
  if (r->origin.failing || !r->drain_errors.empty()) {
    text += "\n" + OriginLine(r->origin, now_ms) + "\n";
    if (!r->drain_errors.empty()) text += "drain errors:\n" + DrainErrorLines(r->drain_errors, now_ms);
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return ctx.Done(doc, text);
}

int RunFlush(Context& ctx, const CkptArgs& a) {
  Result<proto::CkptFlushReply> r = ctx.Call(proto::CkptFlush{.job = a.job});
  if (!r.ok()) return ctx.Fail(r.status());
  const uint64_t start_undrained = r->status.undrained_bytes;
  if (!a.wait) {
    return ctx.Done(cli::ToJson(r->status, WallClockMs()),
                    "job " + a.job + ": " + FormatBytes(double(start_undrained)) + " in " +
                        Thousands(r->status.undrained_files) +
                        " file(s) to drain, ahead of other jobs; follow it with: hoard checkpoint flush " + a.job +
                        " --wait");
  }
  // Done when nothing committed in the job is below P. The bar shows what
  // this wait is for: the bytes and files undrained when it began (more if
  // more is committed meanwhile), and how many of them are at P (published),
  // not merely uploaded. Files and bytes are counted alike by the
  // coordinator (undrained_files, undrained_bytes), so they end together.
  ProgressBar bar("flush " + a.job);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  uint64_t total = start_undrained;
  uint64_t files_total = r->status.undrained_files;
  proto::CkptJobStatus job = r->status;  // as last seen
  int64_t now_ms = WallClockMs();          // the coordinator's clock at the last status (ours before one)
  std::string why_shown;  // the drain error last shown under the bar
  std::string why_now;
  const WaitOutcome w = WaitUntil(ctx, limits, bar, {}, [&]() -> Result<WaitProgress> {
    Result<proto::CkptStatusReply> st = ctx.Call(proto::CkptStatus{.job = a.job});
    if (!st.ok()) return st.status();
    proto::CkptJobStatus j;
    for (const auto& s : st->jobs) {
      if (s.job == a.job) j = s;
    }
    j.job = a.job;
    job = j;
    now_ms = st->now_unix_ms;
    total = std::max(total, j.undrained_bytes);  // new commits meanwhile
    files_total = std::max(files_total, j.undrained_files);
    // Why it does not move, said once per change of reason, not only at the end.
    why_now.clear();
    if (j.drain_error.since_unix_ms != 0) {
      why_now =
          ShortDrainError(j.drain_error, st->now_unix_ms) + ": " + j.drain_error.path + ": " + j.drain_error.error;
    } else if (st->origin.failing) {
      why_now = OriginLine(st->origin, st->now_unix_ms);
    }
    const std::string reason = j.drain_error.since_unix_ms != 0 ? j.drain_error.reason
                               : st->origin.failing             ? st->origin.reason
                                                                : "";
    if (reason != why_shown) {
      if (!reason.empty()) bar.Note("flush " + a.job + ": waiting: " + why_now);
      why_shown = reason;
    }
    return WaitProgress{.done_bytes = total - j.undrained_bytes,
                        .total_bytes = total,
                        .done_files = files_total - j.undrained_files,
                        .total_files = files_total,
                        .complete = j.undrained_bytes == 0};
  });
  nlohmann::json doc = cli::ToJson(job, now_ms);
  doc["flushed"] = w.end == WaitOutcome::End::kComplete;
  doc["seconds"] = w.seconds;
  doc["drain_bytes"] = total;
  doc["drain_files"] = files_total;
  doc["drained_bytes"] = total - std::min(total, job.undrained_bytes);
  doc["drained_files"] = files_total - std::min(files_total, job.undrained_files);
  if (w.end == WaitOutcome::End::kComplete) {
    return ctx.Done(doc, "job " + a.job + ": every checkpoint file is on the checkpoint origin (P), " +
                             FormatBytes(double(total)) + " in " + Thousands(files_total) + " file(s) drained in " +
                             Duration(w.seconds));
  }
  return FailWait(ctx, w, "flush " + a.job,
                  " with " + FormatBytes(double(job.undrained_bytes)) +
                      " still to drain (the drain goes on; `hoard checkpoint ls " + a.job + "` shows which files)" +
                      (why_now.empty() ? "" : "; last drain error: " + why_now),
                  doc);
}

}  // namespace

void AddCheckpointCommands(CLI::App& app, Action* action) {
  auto* ckpt = app.add_subcommand("checkpoint", "Checkpoints written to MOUNT/checkpoints: levels, drain, flush");
  ckpt->require_subcommand(1);
  auto args = std::make_shared<CkptArgs>();
  auto* ls = ckpt->add_subcommand("ls", "Every checkpoint file: its level (L, R, P), size, generation, holders");
  ls->add_option("job", args->job, "Only this job");
  ls->callback([action, args] { *action = [args](Context& ctx) { return RunStatus(ctx, *args, true); }; });
  auto* status = ckpt->add_subcommand(
      "status", "Per job: files at each level, bytes not yet on the checkpoint origin, the oldest one's age");
  status->add_option("job", args->job, "Only this job");
  status->callback([action, args] { *action = [args](Context& ctx) { return RunStatus(ctx, *args, false); }; });
  auto* flush = ckpt->add_subcommand("flush", "Drain a job's checkpoints to the checkpoint origin first");
  flush->add_option("job", args->job, "Job (the directory under MOUNT/checkpoints)")->required();
  flush->add_flag("--wait", args->wait, "Show progress and exit 0 only when every file of the job is at P");
  flush->add_option("--timeout", args->timeout_s, "With --wait: give up after this many seconds (0 = never)")
      ->capture_default_str();
  flush->add_option("--stall-timeout", args->stall_timeout_s,
                    "With --wait: give up after this many seconds without progress")
      ->capture_default_str();
  flush->callback([action, args] { *action = [args](Context& ctx) { return RunFlush(ctx, *args); }; });
}

}  // namespace hoard::cli
