// hoard-nfsread: reads files straight from an NFSv3 server with libnfs, the
// baseline that reads through a hoard mount are compared with.
//
//   hoard-nfsread nfs://HOST:PORT/PATH?mountport=M [--list FILE] [--threads T] [--block R] [--shuffle] [--json]
//   hoard-nfsread nfs://HOST:PORT/PATH?mountport=M --ranges FILE [--json]
//
// The URL is the one hoard's NFS origin takes (origin/nfs_origin.h): PATH is
// a directory; the export is the longest prefix of it the server lets us
// mount. Without --list, every regular file under PATH is read (the tree is
// listed first, with READDIRPLUS, and not timed); with it, the paths in FILE
// (one per line, relative to PATH).
//
// It deliberately uses raw libnfs and none of hoard's origin code (no
// connection pool, no handle cache, no attribute checks): one nfs_context per
// thread, mounted once, and per file nfs_open, nfs_pread of --block bytes
// until the end, nfs_close, as a training job reading NFS directly would.
// Threads take the next file from a shared list. libnfs's directory cache is
// on, as by default: the listing (READDIRPLUS) fills it, and an open then
// needs no LOOKUP (--no-dircache: one per path component).
//
// --ranges FILE reads ranges instead of whole files: one "PATH OFFSET LENGTH"
// a line (PATH relative to PATH), in the file's order, one nfs_pread each, on
// one connection, each file opened once (before the clock starts): a reader
// of random slices of large files (a numpy memmap, safetensors) straight from
// NFS. Its checksum sums each range's digest mixed with its offset.
//
// Prints files, bytes, seconds, MB/s (and files/s); --json prints one object
// instead, with a checksum computed as hoard-readtree computes it (a sum over
// files of their content digest mixed with their path relative to PATH,
// starting with '/'), so a pass through a mount and a pass here can be
// checked for equal bytes.
#include <fcntl.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>  // NF3DIR, NF3REG

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/pass_json.h"
#include "common/hash.h"
#include "origin/nfs_url.h"

namespace {

struct ContextDeleter {
  void operator()(nfs_context* c) const { nfs_destroy_context(c); }
};
using Context = std::unique_ptr<nfs_context, ContextDeleter>;

// A context connected to `url`'s server with `export_path` mounted, or null
// (the reason in *error).
Context Mount(const hoard::NfsUrl& url, const std::string& export_path, bool dircache, std::string* error) {
  Context ctx(nfs_init_context());
  if (!ctx) {
    *error = "nfs_init_context failed";
    return nullptr;
  }
  nfs_set_dircache(ctx.get(), dircache ? 1 : 0);
  // libnfs 4.0 takes the ports only as URL arguments.
  std::string args = "nfs://server/?";
  if (url.port != 0) args += "nfsport=" + std::to_string(url.port);
  if (url.mount_port != 0) {
    args += std::string(url.port != 0 ? "&" : "") + "mountport=" + std::to_string(url.mount_port);
  }
  if (url.port != 0 || url.mount_port != 0) {
    nfs_url* parsed = nfs_parse_url_incomplete(ctx.get(), args.c_str());
    if (parsed == nullptr) {
      *error = nfs_get_error(ctx.get());
      return nullptr;
    }
    nfs_destroy_url(parsed);
  }
  if (nfs_mount(ctx.get(), url.host.c_str(), export_path.c_str()) != 0) {
    *error = nfs_get_error(ctx.get());
    return nullptr;
  }
  return ctx;
}

// Finds the export (the longest mountable prefix of url.path); sets *root to
// the rest, with a leading '/' ("" for the export itself).
Context MountLongestPrefix(const hoard::NfsUrl& url, bool dircache, std::string* export_path, std::string* root,
                           std::string* error) {
  for (const std::string& candidate : url.ExportCandidates()) {
    if (Context ctx = Mount(url, candidate, dircache, error)) {
      *export_path = candidate;
      const std::string below = url.BelowExport(candidate);
      *root = below.empty() ? "" : "/" + below;
      return ctx;
    }
  }
  return nullptr;
}

// Appends every regular file under `dir` (a path in the export) to `out`, as
// `rel` + "/" + its path below `dir`.
bool Walk(nfs_context* ctx, const std::string& dir, const std::string& rel, std::vector<std::string>* out) {
  nfsdir* d = nullptr;
  if (int rc = nfs_opendir(ctx, dir.empty() ? "/" : dir.c_str(), &d); rc != 0) {
    std::fprintf(stderr, "hoard-nfsread: opendir %s: %s\n", dir.c_str(), nfs_get_error(ctx));
    return false;
  }
  std::vector<std::string> subdirs;
  while (nfsdirent* e = nfs_readdir(ctx, d)) {
    if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) continue;
    const std::string child = rel + "/" + e->name;
    if (e->type == NF3DIR) {
      subdirs.push_back(e->name);
    } else if (e->type == NF3REG) {
      out->push_back(child);
    }
  }
  nfs_closedir(ctx, d);
  for (const std::string& s : subdirs) {
    if (!Walk(ctx, dir + "/" + s, rel + "/" + s, out)) return false;
  }
  return true;
}

// A range of a file, for --ranges.
struct Range {
  std::string path;  // relative to PATH, starting with '/'
  uint64_t offset = 0;
  uint32_t length = 0;
};

// Reads `ranges` on `ctx` (see --ranges above) and prints the pass; returns
// the exit code.
int ReadRanges(nfs_context* ctx, const std::string& source, const std::string& root, const std::vector<Range>& ranges,
               bool json) {
  std::vector<std::pair<std::string, nfsfh*>> open;  // each path once, opened before the clock starts
  auto handle = [&](const std::string& path) -> nfsfh* {
    for (auto& [p, fh] : open) {
      if (p == path) return fh;
    }
    return nullptr;
  };
  for (const Range& r : ranges) {
    if (handle(r.path) != nullptr) continue;
    nfsfh* fh = nullptr;
    if (nfs_open(ctx, (root + r.path).c_str(), O_RDONLY, &fh) != 0) {
      std::fprintf(stderr, "hoard-nfsread: open %s: %s\n", r.path.c_str(), nfs_get_error(ctx));
      return 1;
    }
    open.emplace_back(r.path, fh);
  }
  uint64_t bytes = 0, sum = 0, errors = 0;
  std::vector<char> buf;
  const auto start = std::chrono::steady_clock::now();
  for (const Range& r : ranges) {
    buf.resize(r.length);
    const int n = nfs_pread(ctx, handle(r.path), r.offset, r.length, buf.data());
    if (n < 0) {
      std::fprintf(stderr, "hoard-nfsread: read %s at %llu: %s\n", r.path.c_str(),
                   static_cast<unsigned long long>(r.offset), nfs_get_error(ctx));
      ++errors;
      continue;
    }
    bytes += static_cast<uint64_t>(n);
    sum += hoard::Mix64(hoard::Hash64(std::string_view(buf.data(), static_cast<size_t>(n))), r.offset);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& [p, fh] : open) nfs_close(ctx, fh);
  if (json) {
    nlohmann::json out = hoard::bench::PassJson(source, open.size(), bytes, secs, sum, errors);
    out["ranges"] = ranges.size();
    out["ranges_per_s"] = secs > 0 ? double(ranges.size()) / secs : 0.0;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%zu ranges, %llu bytes in %.3f s: %.0f ranges/s%s\n", ranges.size(),
                static_cast<unsigned long long>(bytes), secs, secs > 0 ? double(ranges.size()) / secs : 0.0,
                errors ? " (with errors)" : "");
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hoard-nfsread: read files straight from an NFS server with libnfs (a baseline for hoard)"};
  std::string source, list, ranges_file;
  int threads = 4;
  size_t block = 1 << 20;
  bool shuffle = false, json = false, no_dircache = false;
  app.add_option("url", source, "nfs://HOST[:PORT]/PATH[?mountport=M], a directory")->required();
  app.add_option("--list", list, "Read these files (one path per line, relative to PATH) instead of the tree");
  app.add_option("--ranges", ranges_file,
                 "Read these ranges instead (one \"PATH OFFSET LENGTH\" a line, in order, one thread)");
  app.add_option("--threads", threads, "Parallel readers, one NFS connection each")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--block", block, "Bytes per READ call")->capture_default_str()->check(CLI::Range(4096, 64 << 20));
  app.add_flag("--shuffle", shuffle, "Read the files in a random order (like a training epoch)");
  app.add_flag("--json", json, "Print one JSON object");
  app.add_flag("--no-dircache", no_dircache,
               "Turn off libnfs's directory cache (on by default): every open then LOOKUPs each path component, "
               "as hoard's NFS origin does");
  CLI11_PARSE(app, argc, argv);

  hoard::Result<hoard::NfsUrl> url = hoard::NfsUrl::Parse(source);
  if (!url.ok()) {
    std::fprintf(stderr, "hoard-nfsread: %s\n", url.status().ToString().c_str());
    return 2;
  }
  std::string export_path, root, error;
  Context first = MountLongestPrefix(*url, !no_dircache, &export_path, &root, &error);
  if (!first) {
    std::fprintf(stderr, "hoard-nfsread: cannot mount any prefix of %s: %s\n", url->path.c_str(), error.c_str());
    return 1;
  }

  if (!ranges_file.empty()) {
    std::ifstream in(ranges_file);
    if (!in) {
      std::fprintf(stderr, "hoard-nfsread: cannot read %s\n", ranges_file.c_str());
      return 2;
    }
    std::vector<Range> ranges;
    for (Range r; in >> r.path >> r.offset >> r.length;) {
      if (r.path[0] != '/') r.path = "/" + r.path;
      ranges.push_back(r);
    }
    return ReadRanges(first.get(), source, root, ranges, json);
  }

  std::vector<std::string> files;  // relative to PATH, each starting with '/'
  if (!list.empty()) {
    std::ifstream in(list);
    if (!in) {
      std::fprintf(stderr, "hoard-nfsread: cannot read %s\n", list.c_str());
      return 2;
    }
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      files.push_back(line[0] == '/' ? line : "/" + line);
    }
  } else if (!Walk(first.get(), root, "", &files)) {
    return 1;
  }
  std::sort(files.begin(), files.end());
  if (shuffle) std::shuffle(files.begin(), files.end(), std::mt19937(42));

  // Every thread connects and mounts before the clock starts.
  std::vector<Context> contexts;
  contexts.push_back(std::move(first));
  for (int t = 1; t < threads; ++t) {
    Context c = Mount(*url, export_path, !no_dircache, &error);
    if (!c) {
      std::fprintf(stderr, "hoard-nfsread: mount %s: %s\n", export_path.c_str(), error.c_str());
      return 1;
    }
    contexts.push_back(std::move(c));
  }

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, sum{0}, errors{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, ctx = contexts[t].get()] {
      std::vector<char> buf(block);
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        const std::string path = root + files[i];
        nfsfh* fh = nullptr;
        if (nfs_open(ctx, path.c_str(), O_RDONLY, &fh) != 0) {
          std::fprintf(stderr, "hoard-nfsread: open %s: %s\n", path.c_str(), nfs_get_error(ctx));
          errors.fetch_add(1);
          continue;
        }
        hoard::StreamingChecksum c;
        uint64_t off = 0;
        for (;;) {
          int n = nfs_pread(ctx, fh, off, buf.size(), buf.data());
          if (n < 0) {
            std::fprintf(stderr, "hoard-nfsread: read %s: %s\n", path.c_str(), nfs_get_error(ctx));
            errors.fetch_add(1);
            break;
          }
          if (n == 0) break;
          c.Update(buf.data(), static_cast<size_t>(n));
          off += static_cast<uint64_t>(n);
        }
        nfs_close(ctx, fh);
        bytes.fetch_add(off);
        sum.fetch_add(hoard::Mix64(c.Digest(), hoard::Hash64(files[i])));
      }
    });
  }
  for (auto& t : pool) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mbps = secs > 0 ? double(bytes.load()) / secs / 1e6 : 0.0;
  if (json) {
    nlohmann::json out = hoard::bench::PassJson(source, files.size(), bytes.load(), secs, sum.load(), errors.load());
    out["export"] = export_path;
    out["threads"] = threads;
    out["block"] = block;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%zu files, %llu bytes in %.2f s: %.1f MB/s, %.0f files/s%s\n", files.size(),
                static_cast<unsigned long long>(bytes.load()), secs, mbps, secs > 0 ? double(files.size()) / secs : 0,
                errors.load() ? " (with errors)" : "");
  }
  return errors.load() == 0 ? 0 : 1;
}
