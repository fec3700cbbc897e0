// hoard keys gen DIR: the cluster's CURVE keys (proto/curve.h).
#include "cli/commands.h"
#include "common/file_util.h"
#include "proto/curve.h"

namespace hoard::cli {
namespace {

int RunGen(Context& ctx, const std::string& dir) {
  if (Status s = proto::GenerateKeys(dir); !s.ok()) return ctx.Fail(s.Annotate("keys gen"));
  Result<proto::CurveKeys> keys = proto::LoadDaemonKeys(dir);
  if (!keys.ok()) return ctx.Fail(keys.status().Annotate("keys gen"));
  nlohmann::json doc = {{"dir", dir},
                        {"cluster_key", JoinPath(dir, proto::kClusterKeyFile)},
                        {"cluster_pub", JoinPath(dir, proto::kClusterPubFile)},
                        {"admin_key", JoinPath(dir, proto::kAdminKeyFile)},
                        {"admin_pub", JoinPath(dir, proto::kAdminPubFile)},
                        {"cluster_public_key", keys->server_public},
                        {"admin_public_key", keys->admin_public}};
  return ctx.Done(doc, "keys written to " + dir +
                           ":\n"
                           "  cluster.key, cluster.pub  every daemon and member (--keys DIR on coordinator, nodes, "
                           "mounts)\n"
                           "  admin.key, admin.pub      daemons need admin.pub; admin.key only where the cluster is "
                           "administered\n"
                           "Keep the .key files secret (mode 0600). A CLI with cluster.key reads status; with "
                           "admin.key too it may change the cluster.");
}

}  // namespace

void AddKeysCommands(CLI::App& app, Action* action) {
  auto* keys = app.add_subcommand("keys", "The cluster's CURVE keys (authentication and encryption)");
  keys->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto* gen = keys->add_subcommand(
      "gen", "Write a new cluster keypair and admin keypair into DIR (refuses to overwrite existing keys)");
  gen->add_option("dir", *dir, "Directory for cluster.key, cluster.pub, admin.key, admin.pub")->required();
  gen->callback([action, dir] { *action = [dir](Context& ctx) { return RunGen(ctx, *dir); }; });
}

}  // namespace hoard::cli
