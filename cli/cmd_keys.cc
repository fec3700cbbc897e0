// hoard keys gen DIR [--client-group GROUP]: the cluster's CURVE keys (proto/curve.h).
// hoard keys client DIR [--client-group GROUP]: add the client keypair to keys made before it.
#include <grp.h>

#include <cstdlib>

#include "cli/commands.h"
#include "common/file_util.h"
#include "proto/curve.h"

namespace hoard::cli {
namespace {

struct KeysArgs {
  std::string dir;
  std::string client_group;  // empty: client.key 0600 like the others
};

// The group's id; -1 for none. A number is taken as a gid.
Result<int64_t> GroupId(const std::string& group) {
  if (group.empty()) return int64_t{-1};
  if (struct group* g = ::getgrnam(group.c_str())) return static_cast<int64_t>(g->gr_gid);
  char* end = nullptr;
  const long gid = std::strtol(group.c_str(), &end, 10);
  if (end != group.c_str() && *end == '\0' && gid >= 0) return static_cast<int64_t>(gid);
  return Status::InvalidArgument("--client-group " + group + ": no such group");
}

nlohmann::json ClientFields(const KeysArgs& a) {
  return {{"client_key", JoinPath(a.dir, proto::kClientKeyFile)},
          {"client_pub", JoinPath(a.dir, proto::kClientPubFile)},
          {"client_group", a.client_group}};
}

std::string ClientNote(const KeysArgs& a) {
  return a.client_group.empty()
             ? "  client.key is 0600: give it to job hooks by hand, or make it group-readable with "
               "--client-group GROUP\n"
             : "  client.key is 0640 of group " + a.client_group + " (the directory 0750 of it): its users' hooks "
               "may warm, lease and read\n";
}

int RunGen(Context& ctx, const KeysArgs& a) {
  Result<int64_t> gid = GroupId(a.client_group);
  if (!gid.ok()) return ctx.Fail(gid.status());
  if (Status s = proto::GenerateKeys(a.dir, *gid); !s.ok()) return ctx.Fail(s.Annotate("keys gen"));
  Result<proto::CurveKeys> keys = proto::LoadDaemonKeys(a.dir);
  if (!keys.ok()) return ctx.Fail(keys.status().Annotate("keys gen"));
  nlohmann::json doc = {{"dir", a.dir},
                        {"cluster_key", JoinPath(a.dir, proto::kClusterKeyFile)},
                        {"cluster_pub", JoinPath(a.dir, proto::kClusterPubFile)},
                        {"admin_key", JoinPath(a.dir, proto::kAdminKeyFile)},
                        {"admin_pub", JoinPath(a.dir, proto::kAdminPubFile)},
                        {"cluster_public_key", keys->server_public},
                        {"admin_public_key", keys->admin_public},
                        {"client_public_key", keys->client_class_public}};
  doc.update(ClientFields(a));
  return ctx.Done(doc, "keys written to " + a.dir +
                           ":\n"
                           "  cluster.key, cluster.pub  every daemon and member (--keys DIR on coordinator, nodes, "
                           "mounts)\n"
                           "  admin.key, admin.pub      daemons need admin.pub; admin.key only where the cluster is "
                           "administered\n"
                           "  client.key, client.pub    daemons need client.pub; client.key for job hooks and users "
                           "(warm, leases, status)\n" +
                           ClientNote(a) +
                           "Keep cluster.key and admin.key secret (mode 0600). A CLI with client.key or cluster.key "
                           "reads status; with admin.key it may change the cluster.");
}

int RunClient(Context& ctx, const KeysArgs& a) {
  Result<int64_t> gid = GroupId(a.client_group);
  if (!gid.ok()) return ctx.Fail(gid.status());
  if (Status s = proto::GenerateClientKey(a.dir, *gid); !s.ok()) return ctx.Fail(s.Annotate("keys client"));
  nlohmann::json doc = {{"dir", a.dir}};
  doc.update(ClientFields(a));
  return ctx.Done(doc, "client keys written to " + a.dir + "\n" + ClientNote(a) +
                           "Restart the daemons (or copy client.pub to their keys directory first): they admit the "
                           "client key from their next start.");
}

}  // namespace

void AddKeysCommands(CLI::App& app, Action* action) {
  auto* keys = app.add_subcommand("keys", "The cluster's CURVE keys (authentication and encryption)");
  keys->require_subcommand(1);
  auto args = std::make_shared<KeysArgs>();
  auto* gen = keys->add_subcommand(
      "gen", "Write new cluster, admin and client keypairs into DIR (refuses to overwrite existing keys)");
  gen->add_option("dir", args->dir, "Directory for cluster.key/.pub, admin.key/.pub, client.key/.pub")->required();
  gen->add_option("--client-group", args->client_group,
                  "Make client.key readable by this group (0640) and DIR enterable by it (0750): the users\n"
                  "whose job hooks may warm and take leases");
  gen->callback([action, args] { *action = [args](Context& ctx) { return RunGen(ctx, *args); }; });
  auto* client = keys->add_subcommand(
      "client", "Add client.key and client.pub to DIR, made before the client key class (refuses to overwrite)");
  client->add_option("dir", args->dir, "The keys directory")->required();
  client->add_option("--client-group", args->client_group, "As for gen");
  client->callback([action, args] { *action = [args](Context& ctx) { return RunClient(ctx, *args); }; });
}

}  // namespace hoard::cli
