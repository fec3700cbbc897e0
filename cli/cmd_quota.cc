// hoard quota set TENANT BYTES | hoard quota ls
#include <sstream>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

int RunSet(Context& ctx, const std::string& tenant, const std::string& bytes_text) {
  Result<uint64_t> bytes = ParseBytes(bytes_text);
  if (!bytes.ok()) return ctx.Fail(bytes.status().Annotate("BYTES"));
  Result<proto::QuotaSetReply> r = ctx.Call(proto::QuotaSet{.tenant = tenant, .bytes = *bytes});
  if (!r.ok()) return ctx.Fail(r.status());
  const proto::TenantQuota& q = r->quota;
  return ctx.Done(ToJson(q), "tenant " + tenant + ": " +
                                 (q.quota_bytes == 0 ? std::string("no quota")
                                                     : "quota " + FormatBytes(double(q.quota_bytes))) +
                                 ", its resident datasets hold " + FormatBytes(double(q.used_bytes)) +
                                 " (applies at the next warm-up: a lower quota evicts nothing by itself)");
}

int RunList(Context& ctx) {
  Result<proto::QuotaListReply> r = ctx.Call(proto::QuotaList{});
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc = {{"policy", r->policy}, {"quotas", nlohmann::json::array()}};
  std::vector<std::vector<std::string>> rows = {{"TENANT", "QUOTA", "USED", "DATASETS"}};
  for (const proto::TenantQuota& q : r->quotas) {
    doc["quotas"].push_back(ToJson(q));
    rows.push_back({q.tenant, q.quota_bytes == 0 ? "-" : FormatBytes(double(q.quota_bytes)),
                    FormatBytes(double(q.used_bytes)), std::to_string(q.datasets)});
  }
  std::ostringstream text;
  text << "at a quota, a warm-up " << (r->policy == "reject" ? "fails" : "evicts the tenant's own datasets")
       << " (--quota-policy " << r->policy << ")\n"
       << Table(rows);
  return ctx.Done(doc, text.str());
}

}  // namespace

void AddQuotaCommands(CLI::App& app, Action* action) {
  auto* quota = app.add_subcommand("quota", "Bound the cache a tenant's datasets may hold");
  quota->require_subcommand(1);
  auto tenant = std::make_shared<std::string>();
  auto bytes = std::make_shared<std::string>();
  auto* set = quota->add_subcommand("set", "Set TENANT's quota: its resident datasets' bytes times replicas (0: none)");
  set->add_option("tenant", *tenant, "Tenant name (`hoard dataset add|set --tenant`)")->required();
  set->add_option("bytes", *bytes, "Bytes, e.g. 500G, 2T; 0 removes the quota")->required();
  set->callback([action, tenant, bytes] {
    *action = [tenant, bytes](Context& ctx) { return RunSet(ctx, *tenant, *bytes); };
  });
  auto* ls = quota->add_subcommand("ls", "List tenants: quota, what their resident datasets hold");
  ls->alias("list");
  ls->callback([action] { *action = [](Context& ctx) { return RunList(ctx); }; });
}

}  // namespace hoard::cli
