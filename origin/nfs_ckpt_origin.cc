#include "origin/nfs_ckpt_origin.h"

#include <fcntl.h>
#include <nfsc/libnfs.h>

#include <algorithm>
#include <cerrno>

#include "origin/nfs_origin.h"
#include "origin/nfs_pool.h"

namespace hoard {
namespace {

// libnfs reports 0 before FSINFO; a WRITE size every server accepts.
constexpr uint64_t kDefaultWriteMax = 64 * 1024;

class NfsCkptWriter : public CkptWriter {
 public:
  NfsCkptWriter(std::shared_ptr<NfsConnectionPool> pool, std::string path)
      : pool_(std::move(pool)), path_(std::move(path)), full_(pool_->Full(path_)) {}

  Status WriteAt(uint64_t offset, const char* data, size_t len) override {
    if (closed_) return Status::Internal(pool_->source() + ": write '" + path_ + "' after Close");
    // `done` survives a retry on a fresh connection: pwrite is idempotent,
    // so the retry simply goes on from there.
    size_t done = 0;
    return pool_->RunCall("write", path_, [&](nfs_context* ctx) {
      nfsfh* fh = nullptr;
      // O_SYNC: FILE_SYNC writes, on stable storage when answered (see the
      // header for why not UNSTABLE + COMMIT alone).
      int rc = nfs_open(ctx, full_.c_str(), O_WRONLY | O_NOFOLLOW | O_SYNC, &fh);
      if (rc < 0) return rc;
      uint64_t max = nfs_get_writemax(ctx);
      if (max == 0) max = kDefaultWriteMax;
      while (done < len) {
        const uint64_t want = std::min<uint64_t>(len - done, max);
        rc = nfs_pwrite(ctx, fh, offset + done, want, data + done);
        if (rc < 0) break;
        if (rc == 0) {  // a server that accepts nothing would loop forever
          rc = -EIO;
          break;
        }
        done += static_cast<size_t>(rc);
      }
      // Closing a handle opened for writing sends nothing (libnfs flushes
      // only on fsync), so a failure here cannot lose data.
      nfs_close(ctx, fh);
      return rc < 0 ? rc : 0;
    });
  }

  Status Close() override {
    if (closed_) return Status::Internal(pool_->source() + ": close '" + path_ + "' twice");
    // Redundant after FILE_SYNC writes, but cheap, and what a server that
    // downgraded a write to UNSTABLE needs. Retrying after a failure is fine.
    HOARD_RETURN_IF_ERROR(pool_->RunCall("fsync", path_, [&](nfs_context* ctx) {
      nfsfh* fh = nullptr;
      int rc = nfs_open(ctx, full_.c_str(), O_WRONLY | O_NOFOLLOW, &fh);
      if (rc < 0) return rc;
      rc = nfs_fsync(ctx, fh);  // COMMIT
      nfs_close(ctx, fh);
      return rc;
    }));
    closed_ = true;
    return Status::Ok();
  }

 private:
  const std::shared_ptr<NfsConnectionPool> pool_;
  const std::string path_;
  const std::string full_;
  bool closed_ = false;
};

class NfsCkptOrigin : public CkptOrigin {
 public:
  NfsCkptOrigin(std::shared_ptr<NfsConnectionPool> pool, std::unique_ptr<NfsOrigin> reader)
      : pool_(std::move(pool)), reader_(std::move(reader)) {}

  const std::string& source() const override { return pool_->source(); }

  Result<std::unique_ptr<CkptWriter>> Create(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/false));
    const std::string full = pool_->Full(path);
    HOARD_RETURN_IF_ERROR(pool_->RunCall("create", path, [&](nfs_context* ctx) {
      nfsfh* fh = nullptr;
      int rc = nfs_open2(ctx, full.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644, &fh);
      if (rc < 0) return rc;
      nfs_close(ctx, fh);
      return 0;
    }));
    return std::unique_ptr<CkptWriter>(new NfsCkptWriter(pool_, std::string(path)));
  }

  Status MakeDirs(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/true));
    for (size_t end = 0; end < path.size();) {
      end = path.find('/', end + 1);
      if (end == std::string_view::npos) end = path.size();
      const std::string_view prefix = path.substr(0, end);
      const std::string full = pool_->Full(prefix);
      Status s = pool_->RunCall("mkdir", prefix, [&](nfs_context* ctx) { return nfs_mkdir(ctx, full.c_str()); });
      if (s.code() == Code::kAlreadyExists) {
        // Fine if it is a directory (ours from a retried call, or older).
        HOARD_ASSIGN_OR_RETURN(OriginEntry e, reader_->Stat(prefix));
        if (e.type != EntryType::kDir) {
          return Status::NotDirectory(source() + ": mkdir '" + std::string(path) + "': '" + std::string(prefix) +
                                      "' is not a directory");
        }
      } else if (!s.ok()) {
        return s;
      }
    }
    return Status::Ok();
  }

  Status Rename(std::string_view from, std::string_view to) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), from, /*root_ok=*/false));
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), to, /*root_ok=*/false));
    const std::string full_from = pool_->Full(from);
    const std::string full_to = pool_->Full(to);
    int calls = 0;
    Status s = pool_->RunCall("rename to '" + std::string(to) + "' of", from, [&](nfs_context* ctx) {
      ++calls;
      return nfs_rename(ctx, full_from.c_str(), full_to.c_str());
    });
    if (s.code() == Code::kNotFound && calls > 1 && reader_->Stat(from).status().code() == Code::kNotFound &&
        reader_->Stat(to).ok()) {
      return Status::Ok();  // the first attempt got through; its answer did not
    }
    return s;
  }

  Status Unlink(std::string_view path) override { return Remove("unlink", path, &nfs_unlink); }

  Status Rmdir(std::string_view path) override { return Remove("rmdir", path, &nfs_rmdir); }

  // A retried call that finds the link there made it itself the first time.
  Status Symlink(std::string_view target, std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/false));
    const std::string full = pool_->Full(path);
    const std::string to(target);
    int calls = 0;
    Status s = pool_->RunCall("symlink", path, [&](nfs_context* ctx) {
      ++calls;
      return nfs_symlink(ctx, to.c_str(), full.c_str());
    });
    if (s.code() == Code::kAlreadyExists && calls > 1) return Status::Ok();
    return s;
  }

  Result<OriginEntry> Stat(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/true));
    return reader_->Stat(path);
  }

  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/false));
    return reader_->Open(path);
  }

  Result<uint64_t> FreeBytes() override {
    const std::string root = pool_->Full("");
    nfs_statvfs_64 st{};
    HOARD_RETURN_IF_ERROR(
        pool_->RunCall("statvfs", "", [&](nfs_context* ctx) { return nfs_statvfs64(ctx, root.c_str(), &st); }));
    return st.f_bavail * st.f_frsize;
  }

 private:
  // Unlink or rmdir. A retried call that finds the path gone removed it
  // itself the first time (its answer was lost with the connection).
  Status Remove(std::string_view what, std::string_view path, int (*remove)(nfs_context*, const char*)) {
    HOARD_RETURN_IF_ERROR(CheckCkptPath(source(), path, /*root_ok=*/false));
    const std::string full = pool_->Full(path);
    int calls = 0;
    Status s = pool_->RunCall(what, path, [&](nfs_context* ctx) {
      ++calls;
      return remove(ctx, full.c_str());
    });
    if (s.code() == Code::kNotFound && calls > 1) return Status::Ok();
    return s;
  }

  // Writers share it, and stay usable if the origin goes first.
  const std::shared_ptr<NfsConnectionPool> pool_;
  // Stat and Open, on the same pool.
  const std::unique_ptr<NfsOrigin> reader_;
};

}  // namespace

Result<std::unique_ptr<CkptOrigin>> OpenNfsCkptOrigin(const std::string& source, const OriginOptions& options) {
  HOARD_ASSIGN_OR_RETURN(std::shared_ptr<NfsConnectionPool> pool, NfsConnectionPool::Open(source, options));
  // Also checks that the root exists and is a directory.
  HOARD_ASSIGN_OR_RETURN(std::unique_ptr<NfsOrigin> reader, NfsOrigin::Create(pool));
  return std::unique_ptr<CkptOrigin>(new NfsCkptOrigin(std::move(pool), std::move(reader)));
}

}  // namespace hoard
