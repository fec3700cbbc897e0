#include "origin/nfs_origin.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw-nfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "origin/origin_path.h"

namespace hoard {
namespace {

int64_t MtimeNs(uint64_t sec, uint64_t nsec) {
  return static_cast<int64_t>(sec) * 1'000'000'000 + static_cast<int64_t>(nsec);
}

std::optional<EntryType> TypeOfMode(uint64_t mode) {
  if (S_ISREG(mode)) return EntryType::kFile;
  if (S_ISDIR(mode)) return EntryType::kDir;
  if (S_ISLNK(mode)) return EntryType::kSymlink;
  return std::nullopt;
}

// Reads a symlink's target into `e` (whose path is `rel`).
NfsOutcome ReadLink(NfsConnectionPool& pool, NfsConnection& conn, std::string_view rel, OriginEntry* e) {
  char* target = nullptr;
  int rc = nfs_readlink2(conn.ctx(), pool.Full(rel).c_str(), &target);
  if (rc < 0) return pool.Fail(rc, conn, "readlink", rel);
  e->symlink_target = target != nullptr ? target : "";
  std::free(target);
  e->size = e->symlink_target.size();
  return NfsOutcome::Done();
}

// Opens `rel` on `conn` and returns its handle and attributes.
NfsOutcome OpenFile(NfsConnectionPool& pool, NfsConnection& conn, std::string_view rel, nfsfh** fh, nfs_stat_64* st) {
  std::string full = pool.Full(rel);
  int rc = nfs_open(conn.ctx(), full.c_str(), O_RDONLY | O_NOFOLLOW, fh);
  // O_NOFOLLOW on the last component: ELOOP says it is a symlink, which the
  // table's kNotDirectory (a symlink where a directory was needed) would not.
  if (rc == -ELOOP) {
    return NfsOutcome::Answer(
        Status::InvalidArgument(pool.source() + ": '" + std::string(rel) + "' is a symlink, not a file"));
  }
  if (rc < 0) return pool.Fail(rc, conn, "open", rel);
  rc = nfs_fstat64(conn.ctx(), *fh, st);
  if (rc < 0) {
    NfsOutcome out = pool.Fail(rc, conn, "stat", rel);
    nfs_close(conn.ctx(), *fh);
    return out;
  }
  if (!S_ISREG(st->nfs_mode)) {
    nfs_close(conn.ctx(), *fh);
    return NfsOutcome::Answer(
        Status::InvalidArgument(pool.source() + ": '" + std::string(rel) + "' is not a regular file"));
  }
  return NfsOutcome::Done();
}

class NfsFile : public OriginFile {
 public:
  NfsFile(std::shared_ptr<NfsConnectionPool> pool, OriginEntry attrs, uint64_t fileid)
      : pool_(std::move(pool)), full_(pool_->Full(attrs.path)), attrs_(std::move(attrs)), fileid_(fileid) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) override {
    size_t done = 0;
    Status s = pool_->Run(attrs_.path, [&](NfsConnection& conn) -> NfsOutcome {
      nfsfh* fh = conn.FindHandle(full_, fileid_);
      if (fh == nullptr) {
        nfs_stat_64 st;
        NfsOutcome out = OpenFile(*pool_, conn, attrs_.path, &fh, &st);
        if (!out.status.ok()) return out;
        if (st.nfs_ino != fileid_) {
          nfs_close(conn.ctx(), fh);
          return NfsOutcome::Answer(
              Status::Stale(pool_->source() + ": '" + attrs_.path + "' was replaced since it was opened"));
        }
        conn.PutHandle(full_, fileid_, fh);
      }
      const uint64_t max = conn.read_max();
      while (done < len) {
        uint64_t want = std::min<uint64_t>(len - done, max);
        int n = nfs_pread(conn.ctx(), fh, offset + done, want, buf + done);
        if (n < 0) {
          NfsOutcome out = pool_->Fail(n, conn, "read", attrs_.path);
          conn.DropHandle(full_);
          return out;
        }
        if (n == 0) break;  // end of file
        done += static_cast<size_t>(n);
      }
      return NfsOutcome::Done();
    });
    if (!s.ok()) return s;
    return done;
  }

  const OriginEntry& attributes() const override { return attrs_; }

  Result<OriginEntry> Restat() override {
    OriginEntry e = attrs_;
    Status s = pool_->Run(attrs_.path, [&](NfsConnection& conn) -> NfsOutcome {
      nfs_stat_64 st;
      nfsfh* fh = conn.FindHandle(full_, fileid_);
      if (fh == nullptr) {
        NfsOutcome out = OpenFile(*pool_, conn, attrs_.path, &fh, &st);
        if (!out.status.ok()) return out;
        conn.PutHandle(full_, st.nfs_ino, fh);
      } else if (int rc = nfs_fstat64(conn.ctx(), fh, &st); rc < 0) {
        NfsOutcome out = pool_->Fail(rc, conn, "stat", attrs_.path);
        conn.DropHandle(full_);
        return out;
      }
      if (st.nfs_ino != fileid_) {
        return NfsOutcome::Answer(
            Status::Stale(pool_->source() + ": '" + attrs_.path + "' was replaced since it was opened"));
      }
      e.size = st.nfs_size;
      e.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
      return NfsOutcome::Done();
    });
    if (!s.ok()) return s;
    return e;
  }

 private:
  const std::shared_ptr<NfsConnectionPool> pool_;
  const std::string full_;
  const OriginEntry attrs_;
  const uint64_t fileid_;
};

}  // namespace

// ---------------------------------------------------------------------------
// NfsOrigin

Result<std::unique_ptr<NfsOrigin>> NfsOrigin::Create(const std::string& source, const OriginOptions& options) {
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<NfsConnectionPool> pool, NfsConnectionPool::Open(source, options));
  return Create(std::move(pool));
}

Result<std::unique_ptr<NfsOrigin>> NfsOrigin::Create(std::shared_ptr<NfsConnectionPool> pool) {
  std::unique_ptr<NfsOrigin> origin(new NfsOrigin(std::move(pool)));
  const NfsConnectionPool& p = *origin->pool_;
  Result<OriginEntry> top = origin->Stat("");
  if (!top.ok()) {
    if (top.status().code() != Code::kNotFound) return top.status();
    return Status::NotFound(p.source() + ": " + p.url().path + " does not exist on " + p.url().host +
                            " (mounted export " + p.export_path() + ")");
  }
  if (top->type != EntryType::kDir) {
    return Status::InvalidArgument(p.source() + ": " + p.url().path + " is not a directory");
  }
  spdlog::debug("{}: mounted export {} (root '{}', read max {} bytes)", p.source(), p.export_path(), p.root_in_export(),
                p.read_max());
  return origin;
}

NfsOrigin::NfsOrigin(std::shared_ptr<NfsConnectionPool> pool) : pool_(std::move(pool)) {}

NfsOrigin::~NfsOrigin() = default;

Status NfsOrigin::Walk(const std::function<Status(const OriginEntry&)>& visit) {
  // A directory is listed on a leased connection and visited after the lease
  // is returned: `visit` may call back into this origin.
  std::vector<std::string> pending = {""};
  while (!pending.empty()) {
    std::string dir_path = std::move(pending.back());
    pending.pop_back();
    std::vector<OriginEntry> entries;
    Status s = pool_->Run("", [&](NfsConnection& conn) -> NfsOutcome {
      entries.clear();
      nfsdir* dir = nullptr;
      int rc = nfs_opendir(conn.ctx(), pool_->Full(dir_path).c_str(), &dir);
      if (rc < 0) return pool_->Fail(rc, conn, "opendir", dir_path);
      std::unique_ptr<nfsdir, std::function<void(nfsdir*)>> closer(dir,
                                                                   [&](nfsdir* d) { nfs_closedir(conn.ctx(), d); });
      // nfs_opendir has fetched the whole listing (READDIRPLUS: names with
      // attributes); nfs_readdir only iterates it.
      while (nfsdirent* de = nfs_readdir(conn.ctx(), dir)) {
        std::string_view name(de->name);
        if (name == "." || name == "..") continue;
        std::string path = JoinOriginPath(dir_path, name);
        if (!IsSafeName(name)) {
          spdlog::warn("origin {}: skipping unsafe name in '{}'", source(), dir_path);
          continue;
        }
        OriginEntry e;
        switch (de->type) {
          case NF3REG:
            e.type = EntryType::kFile;
            e.size = de->size;
            e.mode = S_IFREG;
            break;
          case NF3DIR:
            e.type = EntryType::kDir;
            e.mode = S_IFDIR;
            break;
          case NF3LNK:
            e.type = EntryType::kSymlink;
            e.mode = S_IFLNK;
            break;
          default:
            spdlog::debug("origin {}: skipping special file '{}'", source(), path);
            continue;
        }
        e.mode |= de->mode & 07777;
        e.uid = de->uid;
        e.gid = de->gid;
        e.mtime_ns = MtimeNs(static_cast<uint64_t>(de->mtime.tv_sec), de->mtime_nsec);
        e.path = std::move(path);
        if (e.type == EntryType::kSymlink) {
          NfsOutcome out = ReadLink(*pool_, conn, e.path, &e);
          if (!out.status.ok()) {
            if (out.status.code() == Code::kNotFound) continue;  // removed since the listing
            return out;
          }
        }
        entries.push_back(std::move(e));
      }
      return NfsOutcome::Done();
    });
    if (!s.ok()) {
      if (s.code() == Code::kNotFound && !dir_path.empty()) continue;  // removed since its parent was listed
      return s;
    }
    for (const OriginEntry& e : entries) {
      HOARD_RETURN_IF_ERROR(visit(e));
      if (e.type == EntryType::kDir) pending.push_back(e.path);
    }
  }
  return Status::Ok();
}

Result<OriginEntry> NfsOrigin::Stat(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  OriginEntry e;
  Status s = pool_->Run(path, [&](NfsConnection& conn) -> NfsOutcome {
    nfs_stat_64 st;
    int rc = nfs_lstat64(conn.ctx(), pool_->Full(path).c_str(), &st);
    if (rc < 0) return pool_->Fail(rc, conn, "stat", path);
    std::optional<EntryType> type = TypeOfMode(st.nfs_mode);
    if (!type) {
      return NfsOutcome::Answer(Status::InvalidArgument(source() + ": '" + std::string(path) +
                                                        "' is a special file (fifo, socket or device)"));
    }
    e = OriginEntry{};
    e.path = std::string(path);
    e.type = *type;
    e.mode = static_cast<uint32_t>(st.nfs_mode);
    e.uid = static_cast<uint32_t>(st.nfs_uid);
    e.gid = static_cast<uint32_t>(st.nfs_gid);
    e.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
    if (*type == EntryType::kFile) e.size = st.nfs_size;
    if (*type == EntryType::kSymlink) return ReadLink(*pool_, conn, path, &e);
    return NfsOutcome::Done();
  });
  if (!s.ok()) return s;
  return e;
}

Result<std::unique_ptr<OriginFile>> NfsOrigin::Open(std::string_view path) {
  HOARD_ASSIGN_OR_RETURN(std::vector<std::string_view> parts, SplitOriginPath(path));
  if (parts.empty()) return Status::InvalidArgument(source() + ": cannot open the root directory");
  OriginEntry attrs;
  uint64_t fileid = 0;
  Status s = pool_->Run(path, [&](NfsConnection& conn) -> NfsOutcome {
    nfsfh* fh = nullptr;
    nfs_stat_64 st;
    NfsOutcome out = OpenFile(*pool_, conn, path, &fh, &st);
    if (!out.status.ok()) return out;
    // Kept open on this connection for the ReadAt calls that usually follow.
    conn.PutHandle(pool_->Full(path), st.nfs_ino, fh);
    fileid = st.nfs_ino;
    attrs.path = std::string(path);
    attrs.type = EntryType::kFile;
    attrs.mode = static_cast<uint32_t>(st.nfs_mode);
    attrs.uid = static_cast<uint32_t>(st.nfs_uid);
    attrs.gid = static_cast<uint32_t>(st.nfs_gid);
    attrs.size = st.nfs_size;
    attrs.mtime_ns = MtimeNs(st.nfs_mtime, st.nfs_mtime_nsec);
    return NfsOutcome::Done();
  });
  if (!s.ok()) return s;
  return std::unique_ptr<OriginFile>(new NfsFile(pool_, std::move(attrs), fileid));
}

}  // namespace hoard
