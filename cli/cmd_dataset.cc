// hoard dataset add|ls|rm
#include <climits>
#include <cstdlib>
#include <sstream>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

struct AddArgs {
  std::string name, source, chunk_size = "4M";
  uint32_t replicas = 1;
  int timeout_s = 1800;
};

int RunAdd(Context& ctx, const AddArgs& a) {
  Result<uint64_t> chunk = ParseBytes(a.chunk_size);
  if (!chunk.ok()) return ctx.Fail(chunk.status().Annotate("--chunk-size"));
  std::string source = a.source;
  if (source.find("://") != std::string::npos && source.rfind("nfs://", 0) != 0) {
    return ctx.Fail(Status::InvalidArgument("unsupported source '" + source +
                                            "': use nfs://host[:port]/export/path or a local directory"));
  }
  if (source.rfind("nfs://", 0) != 0) {
    // The coordinator runs elsewhere (another cwd): send an absolute path.
    char resolved[PATH_MAX];
    if (::realpath(source.c_str(), resolved) == nullptr) {
      return ctx.Fail(Status::FromErrno(errno, "source " + source));
    }
    source = resolved;
  }
  // Walking a large NFS tree takes a while: this call gets its own timeout.
  Result<proto::DatasetAddReply> r = ctx.Call(
      proto::DatasetAdd{.name = a.name, .source = source, .chunk_size = *chunk, .replicas = a.replicas},
      std::chrono::seconds(a.timeout_s));
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc = ToJson(r->meta);
  doc["walk_ms"] = r->walk_ms;
  std::ostringstream text;
  text << "added dataset " << r->meta.name << ": " << Thousands(r->meta.file_count) << " files, "
       << FormatBytes(double(r->meta.total_bytes)) << " in " << Thousands(r->meta.total_chunks) << " chunks of "
       << FormatBytes(double(r->meta.chunk_size)) << ", " << r->meta.replicas << " replica(s); walked "
       << r->meta.source << " in " << Duration(double(r->walk_ms) / 1000) << "\n"
       << "warm it with: hoard warm " << r->meta.name << " --wait";
  return ctx.Done(doc, text.str());
}

int RunList(Context& ctx) {
  Result<proto::DatasetListReply> r = ctx.Call(proto::DatasetList{});
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc = nlohmann::json::array();
  std::ostringstream text;
  if (r->datasets.empty()) text << "no datasets\n";
  for (const auto& d : r->datasets) {
    doc.push_back(ToJson(d));
    text << d.name << "  v" << d.version << "  " << Thousands(d.file_count) << " files  "
         << FormatBytes(double(d.total_bytes)) << "  replicas " << d.replicas << (d.warm ? "  warm" : "") << "  "
         << d.source << "\n";
  }
  return ctx.Done(doc, text.str());
}

int RunRemove(Context& ctx, const std::string& name) {
  Result<proto::DatasetRemoveReply> r = ctx.Call(proto::DatasetRemove{.name = name});
  if (!r.ok()) return ctx.Fail(r.status());
  return ctx.Done({{"removed", name}}, "removed dataset " + name + " (nodes drop its chunks)");
}

}  // namespace

void AddDatasetCommands(CLI::App& app, Action* action) {
  auto* ds = app.add_subcommand("dataset", "Register, list and remove datasets");
  ds->require_subcommand(1);

  auto add_args = std::make_shared<AddArgs>();
  auto* add = ds->add_subcommand("add", "Register a dataset: walk SOURCE once and record its manifest");
  add->add_option("name", add_args->name, "Dataset name: letters, digits, '.', '_', '-'")->required();
  add->add_option("source", add_args->source, "nfs://host[:port]/export/path or a local directory")->required();
  add->add_option("--chunk-size", add_args->chunk_size, "Stripe size, a power of two from 64K to 64M")
      ->capture_default_str();
  add->add_option("--replicas", add_args->replicas, "Copies of each chunk across nodes")->capture_default_str();
  add->add_option("--walk-timeout", add_args->timeout_s, "Seconds to wait for the walk of SOURCE")
      ->capture_default_str();
  add->callback([action, add_args] { *action = [add_args](Context& ctx) { return RunAdd(ctx, *add_args); }; });

  auto* ls = ds->add_subcommand("ls", "List datasets");
  ls->callback([action] { *action = [](Context& ctx) { return RunList(ctx); }; });

  auto rm_name = std::make_shared<std::string>();
  auto* rm = ds->add_subcommand("rm", "Remove a dataset; nodes delete its cached chunks");
  rm->add_option("name", *rm_name, "Dataset name")->required();
  rm->callback([action, rm_name] { *action = [rm_name](Context& ctx) { return RunRemove(ctx, *rm_name); }; });
}

}  // namespace hoard::cli
