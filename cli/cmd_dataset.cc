// hoard dataset add|refresh|ls|rm
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/progress.h"
#include "common/units.h"

namespace hoard::cli {
namespace {

// Eviction settings as `dataset add` and `dataset set` take them
// (coordinator/eviction.h); empty strings and unset flags: not given.
struct EvictionArgs {
  std::string priority, ttl, tenant;
  bool pin = false, unpin = false;
};

void AddEvictionOptions(CLI::App* cmd, EvictionArgs* e, bool set) {
  cmd->add_option("--priority", e->priority, "Eviction priority: high, normal (the default) or low; lower goes first")
      ->check(CLI::IsMember({"high", "normal", "low"}));
  cmd->add_flag("--pin", e->pin, "Never evict it");
  if (set) cmd->add_flag("--unpin", e->unpin, "May be evicted again");
  cmd->add_option("--ttl", e->ttl, "Evict it when not read for this long (e.g. 7d, 12h, 90m; 0: never)");
  cmd->add_option("--tenant", e->tenant, "Whose quota it counts against (`hoard quota set`; default \"default\")");
}

// Fills `req`'s settings from `e`; an error for a bad duration.
Status ApplyEvictionArgs(const EvictionArgs& e, proto::DatasetSet* req) {
  if (e.pin && e.unpin) return Status::InvalidArgument("--pin and --unpin together");
  if (!e.priority.empty()) {
    req->has_priority = proto::ParsePriority(e.priority, &req->priority);
  }
  if (e.pin || e.unpin) {
    req->has_pinned = true;
    req->pinned = e.pin;
  }
  if (!e.ttl.empty()) {
    Result<uint64_t> ttl = ParseDurationSeconds(e.ttl);
    if (!ttl.ok()) return ttl.status().Annotate("--ttl");
    req->has_ttl = true;
    req->ttl_s = static_cast<int64_t>(*ttl);
  }
  if (!e.tenant.empty()) {
    req->has_tenant = true;
    req->tenant = e.tenant;
  }
  return Status::Ok();
}

// "priority normal, pinned, TTL 7d, tenant vision"
std::string EvictionText(const proto::DatasetMeta& m) {
  std::string s = std::string("priority ") + proto::PriorityName(m.priority);
  if (m.pinned) s += ", pinned";
  if (m.ttl_s > 0) s += ", TTL " + Duration(double(m.ttl_s));
  s += ", tenant " + m.tenant;
  if (!m.resident) s += ", evicted";
  return s;
}

struct AddArgs {
  std::string name, source, chunk_size = "4M";
  uint32_t replicas = 1;
  int timeout_s = 1800;
  EvictionArgs eviction;
};

// The coordinator got the request and is still walking: not a cluster that
// is down (exit 3), and asking again now would find the name taken.
int FailWalkTimeout(Context& ctx, const std::string& name, int timeout_s) {
  return ctx.Fail(Status::Unavailable("no reply within " + std::to_string(timeout_s) + " s (--walk-timeout); the walk of " +
                                      name + "'s source may still be running: `hoard dataset ls` shows its "
                                      "result once it is done"),
                  /*reached=*/true);
}

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
      // Bad input (exit 2), whatever errno says: a missing or unreadable directory.
      return ctx.Fail(Status::InvalidArgument("source " + source + ": " + std::strerror(errno)));
    }
    source = resolved;
  }
  proto::DatasetSet settings;
  if (Status s = ApplyEvictionArgs(a.eviction, &settings); !s.ok()) return ctx.Fail(s);
  proto::DatasetAdd req{.name = a.name, .source = source, .chunk_size = *chunk, .replicas = a.replicas};
  if (settings.has_priority) req.priority = settings.priority;
  req.pinned = settings.pinned;
  if (settings.has_ttl) req.ttl_s = settings.ttl_s;
  if (settings.has_tenant) req.tenant = settings.tenant;
  // Walking a large NFS tree takes a while: this call gets its own timeout.
  Result<proto::DatasetAddReply> r = ctx.Call(req, std::chrono::seconds(a.timeout_s));
  if (!r.ok() && ctx.timed_out()) return FailWalkTimeout(ctx, a.name, a.timeout_s);
  if (!r.ok()) return ctx.Fail(r.status());
  nlohmann::json doc = ToJson(r->meta);
  doc["walk_seconds"] = double(r->walk_ms) / 1000;
  std::ostringstream text;
  text << "added dataset " << r->meta.name << ": " << Thousands(r->meta.file_count) << " files, "
       << FormatBytes(double(r->meta.total_bytes)) << " in " << Thousands(r->meta.total_chunks) << " chunks of "
       << FormatBytes(double(r->meta.chunk_size)) << ", " << r->meta.replicas << " replica(s); walked "
       << r->meta.source << " in " << Duration(double(r->walk_ms) / 1000) << "; " << EvictionText(r->meta) << "\n"
       << "warm it with: hoard warm " << r->meta.name << " --wait";
  return ctx.Done(doc, text.str());
}

std::string Files(uint64_t n) { return Thousands(n) + (n == 1 ? " file" : " files"); }

int RunRefresh(Context& ctx, const std::string& name, int timeout_s) {
  Result<proto::DatasetRefreshReply> r =
      ctx.Call(proto::DatasetRefresh{.name = name}, std::chrono::seconds(timeout_s));
  if (!r.ok() && ctx.timed_out()) return FailWalkTimeout(ctx, name, timeout_s);
  if (!r.ok()) return ctx.Fail(r.status());
  // The dataset as now recorded (as `dataset add` prints it), then what changed.
  nlohmann::json doc = ToJson(r->meta);
  doc["changed"] = r->changed;
  doc["previous_version"] = r->previous_version;
  doc["files_added"] = r->files_added;
  doc["files_changed"] = r->files_changed;
  doc["files_removed"] = r->files_removed;
  doc["other_changes"] = r->other_changes;
  doc["fetch_bytes"] = r->fetch_bytes;
  doc["fetch_chunks"] = r->fetch_chunks;
  doc["refetch_whole_bytes"] = r->changed_bytes;
  doc["walk_seconds"] = double(r->walk_ms) / 1000;
  nlohmann::json changes = nlohmann::json::array();  // the first 100 files
  for (const auto& f : r->files) changes.push_back({{"path", f.path}, {"change", f.change}, {"bytes", f.size}});
  doc["changes"] = std::move(changes);
  nlohmann::json others = nlohmann::json::array();  // the first 1,000 other entries
  for (const auto& o : r->others) others.push_back({{"path", o.path}, {"change", o.change}});
  doc["other_entries"] = std::move(others);
  std::ostringstream text;
  if (!r->changed) {
    text << "dataset " << name << " is unchanged at its origin: still version " << r->meta.version
         << ", nothing to fetch (walked in " << Duration(double(r->walk_ms) / 1000) << ")";
    return ctx.Done(doc, text.str());
  }
  text << "refreshed dataset " << name << ": version " << r->previous_version << " -> " << r->meta.version << ": "
       << Files(r->files_added) << " added, " << Thousands(r->files_changed) << " changed, "
       << Thousands(r->files_removed) << " removed";
  if (r->other_changes > 0) text << ", " << Thousands(r->other_changes) << " other entries changed";
  text << "\n"
       << FormatBytes(double(r->fetch_bytes)) << " in " << Thousands(r->fetch_chunks) << " chunks to fetch again"
       << (r->meta.replicas > 1 ? " (per replica)" : "") << "; unchanged files keep their cached chunks\n";
  if (r->files_changed > 0) {
    // A new size or mtime says nothing of which bytes changed.
    text << "changed files are fetched again whole (" << FormatBytes(double(r->changed_bytes)) << " of "
         << Files(r->files_changed) << "), however little of them changed\n";
  }
  // Bounded, so that a big refresh stays readable; --json has more.
  constexpr size_t kListed = 20;
  auto more = [&](uint64_t total, size_t shown, size_t in_json) {
    if (total <= shown) return;
    text << "  ... and " << Thousands(total - shown) << " more";
    if (in_json > shown) text << " (--json lists " << Thousands(in_json) << ")";
    text << "\n";
  };
  for (size_t i = 0; i < r->files.size() && i < kListed; ++i) {
    const auto& f = r->files[i];
    text << "  " << f.change << "  " << f.path << "  " << FormatBytes(double(f.size)) << "\n";
  }
  more(r->files_added + r->files_changed + r->files_removed, std::min(r->files.size(), kListed), r->files.size());
  if (r->other_changes > 0) text << "other entries changed (nothing to fetch):\n";
  for (size_t i = 0; i < r->others.size() && i < kListed; ++i) {
    text << "  " << r->others[i].change << "  " << r->others[i].path << "\n";
  }
  more(r->other_changes, std::min(r->others.size(), kListed), r->others.size());
  text << (r->meta.warm ? "warm: owners fetch what changed; follow with: hoard status " + name
                        : "warm it with: hoard warm " + name + " --wait");
  return ctx.Done(doc, text.str());
}

int RunSet(Context& ctx, const std::string& name, const EvictionArgs& e) {
  proto::DatasetSet req{.name = name};
  if (Status s = ApplyEvictionArgs(e, &req); !s.ok()) return ctx.Fail(s);
  if (!req.has_priority && !req.has_pinned && !req.has_ttl && !req.has_tenant) {
    return ctx.Fail(Status::InvalidArgument("nothing to set: give --priority, --pin, --unpin, --ttl or --tenant"));
  }
  Result<proto::DatasetSetReply> r = ctx.Call(req);
  if (!r.ok()) return ctx.Fail(r.status());
  return ctx.Done(ToJson(r->meta), "dataset " + name + ": " + EvictionText(r->meta));
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
         << EvictionText(d) << "  " << d.source << "\n";
  }
  return ctx.Done(doc, text.str());
}

int RunRemove(Context& ctx, const std::string& name) {
  Result<proto::DatasetRemoveReply> r = ctx.Call(proto::DatasetRemove{.name = name});
  if (!r.ok()) return ctx.Fail(r.status());
  return ctx.Done({{"name", name}, {"removed", true}}, "removed dataset " + name + " (nodes drop its chunks)");
}

}  // namespace

void AddDatasetCommands(CLI::App& app, Action* action) {
  auto* ds = app.add_subcommand("dataset", "Register, refresh, list and remove datasets");
  ds->require_subcommand(1);

  auto add_args = std::make_shared<AddArgs>();
  auto* add = ds->add_subcommand("add", "Register a dataset: walk SOURCE once and record its manifest");
  add->add_option("name", add_args->name, "Dataset name: letters, digits, '.', '_', '-'")->required();
  add->add_option("source", add_args->source, "nfs://host[:port]/export/path or a local directory")->required();
  add->add_option("--chunk-size", add_args->chunk_size, "Stripe size, a power of two from 64K to 64M")
      ->capture_default_str();
  add->add_option("--replicas", add_args->replicas, "Copies of each chunk across nodes")->capture_default_str();
  add->add_option("--walk-timeout", add_args->timeout_s, "Seconds to wait for the walk of SOURCE")
      ->capture_default_str()
      ->check(CLI::Range(1, INT_MAX));
  AddEvictionOptions(add, &add_args->eviction, /*set=*/false);
  add->callback([action, add_args] { *action = [add_args](Context& ctx) { return RunAdd(ctx, *add_args); }; });

  auto refresh_name = std::make_shared<std::string>();
  auto refresh_timeout = std::make_shared<int>(1800);
  auto* refresh = ds->add_subcommand(
      "refresh",
      "Walk the dataset's source again and adopt what changed there as a new version; a changed file (new size or "
      "mtime) is fetched again whole, unchanged files keep their cached chunks");
  refresh->add_option("name", *refresh_name, "Dataset name")->required();
  refresh->add_option("--walk-timeout", *refresh_timeout, "Seconds to wait for the walk of the source")
      ->capture_default_str()
      ->check(CLI::Range(1, INT_MAX));
  refresh->callback([action, refresh_name, refresh_timeout] {
    *action = [refresh_name, refresh_timeout](Context& ctx) { return RunRefresh(ctx, *refresh_name, *refresh_timeout); };
  });

  auto set_name = std::make_shared<std::string>();
  auto set_args = std::make_shared<EvictionArgs>();
  auto* set = ds->add_subcommand("set", "Change a dataset's eviction settings: priority, pin, TTL, tenant");
  set->add_option("name", *set_name, "Dataset name")->required();
  AddEvictionOptions(set, set_args.get(), /*set=*/true);
  set->callback([action, set_name, set_args] {
    *action = [set_name, set_args](Context& ctx) { return RunSet(ctx, *set_name, *set_args); };
  });

  auto* ls = ds->add_subcommand("ls", "List datasets");
  ls->callback([action] { *action = [](Context& ctx) { return RunList(ctx); }; });

  auto rm_name = std::make_shared<std::string>();
  auto* rm = ds->add_subcommand("rm", "Remove a dataset; nodes delete its cached chunks");
  rm->add_option("name", *rm_name, "Dataset name")->required();
  rm->callback([action, rm_name] { *action = [rm_name](Context& ctx) { return RunRemove(ctx, *rm_name); }; });
}

}  // namespace hoard::cli
