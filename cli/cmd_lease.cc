// hoard lease take NAME --job ID [--ttl DUR]
// hoard lease release [NAME] --job ID
// hoard lease list
//
// Job leases (coordinator/leases.h): a dataset a job holds a lease on is
// never evicted. Hooks take and release them (`hoard hook prewarm --job`,
// `hoard hook release`); these commands are for scripts and operators.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct LeaseArgs {
  std::string name;
  std::string job;
  std::string ttl;  // a duration ("24h", "90m", "3600"); empty: the coordinator's default
};

// "24h" -> seconds; InvalidArgument naming the option.
Result<uint32_t> TtlSeconds(const std::string& text) {
  if (text.empty()) return uint32_t{0};
  Result<uint64_t> s = ParseDurationSeconds(text);
  if (!s.ok()) return s.status().Annotate("--ttl");
  if (*s == 0 || *s > UINT32_MAX) return Status::InvalidArgument("--ttl " + text + ": use 1 s to 136 years");
  return static_cast<uint32_t>(*s);
}

int RunTake(Context& ctx, const LeaseArgs& a) {
  Result<uint32_t> ttl = TtlSeconds(a.ttl);
  if (!ttl.ok()) return ctx.Fail(ttl.status());
  Result<proto::LeaseTakeReply> r = ctx.Call(
      proto::LeaseTake{.dataset = a.name, .job = a.job, .ttl_s = *ttl, .caller = SelfCaller(a.job)});
  if (!r.ok()) return ctx.Fail(r.status());
  const proto::Lease& l = r->lease;
  return ctx.Done(ToJson(l, l.renewed_unix), "lease of job " + l.job + " on " + l.dataset + " until " +
                                                 Duration(double(l.expires_unix - l.renewed_unix)) +
                                                 " from now (renew by taking it again)");
}

int RunRelease(Context& ctx, const LeaseArgs& a) {
  Result<proto::LeaseReleaseReply> r =
      ctx.Call(proto::LeaseRelease{.dataset = a.name, .job = a.job, .caller = SelfCaller(a.job)});
  if (!r.ok()) return ctx.Fail(r.status());
  const std::string what = a.name.empty() ? "every lease of job " + a.job : "job " + a.job + "'s lease on " + a.name;
  return ctx.Done({{"job", a.job}, {"dataset", a.name}, {"released", r->released}},
                  r->released == 0 ? what + ": none held (done)"
                                   : "released " + what + " (" + std::to_string(r->released) + ")");
}

int RunList(Context& ctx) {
  Result<proto::LeaseListReply> r = ctx.Call(proto::LeaseList{});
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc = {{"leases", nlohmann::json::array()}, {"now_unix", r->now_unix}};
  for (const auto& l : r->leases) doc["leases"].push_back(ToJson(l, r->now_unix));
  return ctx.Done(doc, r->leases.empty() ? "no job leases" : LeaseLines(r->leases, r->now_unix));
}

}  // namespace

std::string LeaseLines(const std::vector<proto::Lease>& leases, int64_t now_unix) {
  std::string out;
  for (const auto& l : leases) {
    out += l.dataset + "  job " + l.job + "  (" + l.key_class + " key";
    if (l.holder.uid >= 0) out += ", uid " + std::to_string(l.holder.uid);
    if (!l.holder.host.empty()) out += " on " + l.holder.host;
    out += ")  expires in " + Duration(double(std::max<int64_t>(0, l.expires_unix - now_unix))) + "\n";
  }
  return out;
}

void AddLeaseCommands(CLI::App& app, Action* action) {
  auto* lease = app.add_subcommand("lease", "Job leases: a dataset a job holds a lease on is never evicted");
  lease->require_subcommand(1);
  auto args = std::make_shared<LeaseArgs>();

  auto* take = lease->add_subcommand("take", "Take (or renew) a job's lease on a dataset until now + --ttl");
  take->add_option("name", args->name, "Dataset name")->required();
  take->add_option("--job", args->job, "The job's id (a Slurm job id, a pod name)")->required();
  take->add_option("--ttl", args->ttl, "How long it holds unless renewed: 90m, 24h, 7d (default: 24h)");
  take->callback([action, args] { *action = [args](Context& ctx) { return RunTake(ctx, *args); }; });

  auto* release = lease->add_subcommand("release", "Release a job's lease on a dataset, or all its leases");
  release->add_option("name", args->name, "Dataset name (none: every lease of the job)");
  release->add_option("--job", args->job, "The job's id")->required();
  release->callback([action, args] { *action = [args](Context& ctx) { return RunRelease(ctx, *args); }; });

  auto* list = lease->add_subcommand("list", "The leases that hold now");
  list->callback([action] { *action = [](Context& ctx) { return RunList(ctx); }; });
}

}  // namespace hoard::cli
