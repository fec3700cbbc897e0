// hoard checkpoint ls [JOB] | status [JOB] | flush JOB [--wait]
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/progress.h"
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

nlohmann::json ToJson(const proto::CkptEntry& e, int64_t now_ms) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const auto& r : e.replicas) replicas.push_back(r);
  return {{"path", e.path},
          {"id", e.id},
          {"dir", e.is_dir},
          {"size", e.size},
          {"gen", e.gen},
          {"level", Level(e.level)},
          {"writer", e.writer},
          {"replicas", replicas},
          {"replicas_wanted", e.replicas_wanted},
          {"committed_unix_ms", e.committed_unix_ms},
          {"drained_unix_ms", e.drained_unix_ms},
          {"undrained_age_s", e.level < uint8_t(proto::CkptLevel::kP) && e.committed_unix_ms > 0
                                  ? double(now_ms - e.committed_unix_ms) / 1000
                                  : 0.0}};
}

nlohmann::json ToJson(const proto::CkptJobStatus& j, int64_t now_ms) {
  nlohmann::json levels;
  for (size_t l = 0; l < j.files_by_level.size() && l < 4; ++l) {
    levels[Level(uint8_t(l))] = j.files_by_level[l];
  }
  return {{"job", j.job},
          {"files", j.files},
          {"bytes", j.bytes},
          {"files_by_level", levels},
          {"undrained_bytes", j.undrained_bytes},
          {"oldest_undrained_age_s",
           j.oldest_undrained_unix_ms > 0 ? double(now_ms - j.oldest_undrained_unix_ms) / 1000 : 0.0},
          {"overdue_files", j.overdue_files}};
}

std::string JobLine(const proto::CkptJobStatus& j, int64_t now_ms) {
  auto n = [&](proto::CkptLevel l) { return j.files_by_level.size() > size_t(l) ? j.files_by_level[size_t(l)] : 0; };
  char line[512];
  std::snprintf(line, sizeof line, "%-24s %8llu %10s %6llu %6llu %6llu %10s %10s %s", j.job.c_str(),
                (unsigned long long)j.files, FormatBytes(double(j.bytes)).c_str(),
                (unsigned long long)n(proto::CkptLevel::kL), (unsigned long long)n(proto::CkptLevel::kR),
                (unsigned long long)n(proto::CkptLevel::kP), FormatBytes(double(j.undrained_bytes)).c_str(),
                j.oldest_undrained_unix_ms > 0 ? Duration(double(now_ms - j.oldest_undrained_unix_ms) / 1000).c_str()
                                               : "-",
                j.overdue_files > 0 ? ("(" + std::to_string(j.overdue_files) + " past the drain deadline)").c_str()
                                    : "");
  return line;
}

int RunStatus(Context& ctx, const CkptArgs& a, bool files) {
  Result<proto::CkptStatusReply> r = ctx.Call(proto::CkptStatus{.job = a.job, .files = files});
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc;
  doc["jobs"] = nlohmann::json::array();
  for (const auto& j : r->jobs) doc["jobs"].push_back(ToJson(j, r->now_unix_ms));
  std::string text;
  if (files) {
    doc["files"] = nlohmann::json::array();
    char line[1024];
    std::snprintf(line, sizeof line, "%-5s %10s %5s %-40s %s\n", "LEVEL", "SIZE", "GEN", "PATH", "HOLDERS");
    text += line;
    for (const auto& e : r->files) {
      doc["files"].push_back(ToJson(e, r->now_unix_ms));
      if (e.is_dir) continue;
      std::string holders = e.writer;
      size_t replicated = 0;
      for (const auto& c : e.replicas) replicated += c.empty() ? 0 : 1;
      if (!e.replicas.empty()) holders += " + " + std::to_string(replicated) + "/" + std::to_string(e.replicas.size()) +
                                          " chunks on peers";
      std::snprintf(line, sizeof line, "%-5s %10s %5llu %-40s %s\n", Level(e.level),
                    FormatBytes(double(e.size)).c_str(), (unsigned long long)e.gen, e.path.c_str(),
                    holders.empty() ? "(origin only)" : holders.c_str());
      text += line;
    }
  } else {
    char head[256];
    std::snprintf(head, sizeof head, "%-24s %8s %10s %6s %6s %6s %10s %10s\n", "JOB", "FILES", "BYTES", "L", "R", "P",
                  "UNDRAINED", "OLDEST");
    text += head;
    for (const auto& j : r->jobs) text += JobLine(j, r->now_unix_ms) + "\n";
    if (r->jobs.empty()) text += "(no checkpoints)\n";
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return ctx.Done(doc, text);
}

int RunFlush(Context& ctx, const CkptArgs& a) {
  Result<proto::CkptFlushReply> r = ctx.Call(proto::CkptFlush{.job = a.job});
  if (!r.ok()) return ctx.Fail(r.status());
  const uint64_t start_undrained = r->status.undrained_bytes;
  if (!a.wait) {
    return ctx.Done(ToJson(r->status, 0), "job " + a.job + ": " + FormatBytes(double(start_undrained)) +
                                              " to drain, ahead of other jobs; follow it with: hoard checkpoint "
                                              "flush " + a.job + " --wait");
  }
  // Done when nothing committed in the job is below P.
  ProgressBar bar("flush " + a.job);
  WaitLimits limits(a.timeout_s, a.stall_timeout_s);
  uint64_t total = start_undrained;
  while (true) {
    Result<proto::CkptStatusReply> st = ctx.Call(proto::CkptStatus{.job = a.job});
    if (!st.ok()) return ctx.Fail(st.status().Annotate("flush " + a.job));
    proto::CkptJobStatus j;
    for (const auto& s : st->jobs) {
      if (s.job == a.job) j = s;
    }
    j.job = a.job;
    total = std::max(total, j.undrained_bytes);  // new commits meanwhile
    const uint64_t done = total - j.undrained_bytes;
    bar.Update(done, total, 0, 0);
    if (j.undrained_bytes == 0) {
      bar.Finish();
      nlohmann::json doc = ToJson(j, st->now_unix_ms);
      doc["flushed"] = true;
      doc["seconds"] = limits.elapsed();
      return ctx.Done(doc, "job " + a.job + ": every checkpoint file is on the checkpoint origin (P), " +
                               FormatBytes(double(total)) + " drained in " + Duration(limits.elapsed()));
    }
    if (const std::string why = limits.Check(done); !why.empty()) {
      bar.Finish();
      const std::string error = "flush " + a.job + ": " + why + " with " + FormatBytes(double(j.undrained_bytes)) +
                                " still to drain (the drain goes on; `hoard checkpoint ls " + a.job +
                                "` shows which files)";
      if (ctx.json()) {
        nlohmann::json doc = ToJson(j, st->now_unix_ms);
        doc["flushed"] = false;
        doc["error"] = error;
        ctx.Done(doc, "");
      }
      std::fprintf(stderr, "hoard: %s\n", error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
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
