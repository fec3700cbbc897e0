// CkptFs across a restart of the mount's process: the mount id and the open
// handles kept in Options::state_dir, and their takeover (see "Takeover" in
// checkpoint/ckpt_fs.h).
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <random>
#include <vector>

#include <msgpack.hpp>

#include "checkpoint/ckpt_fs.h"
#include "common/file_util.h"

namespace hoard::fuse {
namespace {

// One open handle as a successor needs it.
struct SavedHandle {
  uint64_t id = 0;
  bool writable = false;
  int32_t opener = 0;
  std::string path;
  bool has_entry = false;
  proto::CkptEntry entry;  // a reader's generation
  MSGPACK_DEFINE_MAP(id, writable, opener, path, has_entry, entry);
};

std::string HandlesDir(const std::string& state_dir) { return state_dir + "/handles"; }
std::string HandleFile(const std::string& state_dir, uint64_t fh) {
  return HandlesDir(state_dir) + "/" + std::to_string(fh);
}

}  // namespace

uint64_t CkptFs::LoadOrMakeMountId(const Options& options) {
  const std::string path = options.state_dir + "/mount-id";
  if (!options.state_dir.empty() && options.takeover) {
    Result<std::string> kept = ReadFile(path);
    uint64_t id = 0;
    if (kept.ok() && std::from_chars(kept->data(), kept->data() + kept->size(), id).ec == std::errc() && id != 0) {
      return id;
    }
    if (options.logger) options.logger->warn("takeover: no mount id kept in {}: a new checkpoint session starts", path);
  }
  std::random_device rd;
  const uint64_t id = (uint64_t(rd()) << 32 | rd()) | 1;  // never 0
  if (!options.state_dir.empty()) {
    Status s = MakeDirs(options.state_dir);
    if (s.ok()) s = WriteFileAtomic(path, std::to_string(id));
    if (!s.ok() && options.logger) options.logger->warn("cannot keep the mount id: {}", s.ToString());
  }
  return id;
}

void CkptFs::SaveHandle(uint64_t fh, const Handle& h) {
  if (options_.state_dir.empty()) return;
  SavedHandle saved{.id = h.id, .writable = h.writable, .opener = h.opener};
  if (auto it = paths_.find(h.id); it != paths_.end()) saved.path = it->second;
  if (h.entry != nullptr) {
    saved.has_entry = true;
    saved.entry = *h.entry;
    if (saved.path.empty()) saved.path = h.entry->path;
  }
  msgpack::sbuffer buf;
  msgpack::pack(buf, saved);
  // No fsync: the file must outlive this process, not the machine (a crash
  // of the machine ends the FUSE connection too). A process killed while
  // writing leaves a file that does not decode: that handle is dropped.
  const std::string path = HandleFile(options_.state_dir, fh);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() && errno == ENOENT && MakeDirs(HandlesDir(options_.state_dir)).ok()) {
    fd = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  }
  Status s = fd.valid() ? PwriteAll(fd.get(), buf.data(), buf.size(), 0) : Status::FromErrno(errno, "open " + path);
  if (!s.ok()) options_.logger->warn("checkpoint handle {} will not survive a restart of the mount: {}", fh, s.ToString());
}

void CkptFs::DropHandle(uint64_t fh) {
  if (options_.state_dir.empty()) return;
  (void)::unlink(HandleFile(options_.state_dir, fh).c_str());
}

Status CkptFs::TakeOver() {
  if (options_.state_dir.empty()) return Status::Ok();
  const std::string dir = HandlesDir(options_.state_dir);
  HOARD_RETURN_IF_ERROR(MakeDirs(dir));
  std::vector<std::pair<uint64_t, SavedHandle>> saved;
  {
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
    if (d == nullptr) return Status::FromErrno(errno, "open " + dir);
    while (dirent* e = ::readdir(d.get())) {
      const std::string_view name = e->d_name;
      uint64_t fh = 0;
      if (std::from_chars(name.data(), name.data() + name.size(), fh).ec != std::errc() || fh == 0) continue;
      const std::string path = dir + "/" + std::string(name);
      if (!options_.takeover) {
        (void)::unlink(path.c_str());  // an earlier mount's: the kernel forgot them with it
        continue;
      }
      Result<std::string> bytes = ReadFile(path);
      SavedHandle h;
      try {
        if (!bytes.ok()) throw std::runtime_error(bytes.status().ToString());
        msgpack::object_handle oh = msgpack::unpack(bytes->data(), bytes->size());
        oh.get().convert(h);
      } catch (const std::exception& ex) {
        options_.logger->warn("takeover: checkpoint handle {} dropped: {}", fh, ex.what());
        (void)::unlink(path.c_str());
        continue;
      }
      saved.emplace_back(fh, std::move(h));
    }
  }
  if (saved.empty()) return Status::Ok();
  // Writers first: a reader on the writer's node shares the writer's file.
  std::stable_partition(saved.begin(), saved.end(), [](const auto& p) { return p.second.writable; });
  size_t writers = 0, taken = 0;
  for (auto& [fh, s] : saved) {
    Handle h{.id = s.id, .writable = s.writable, .opener = s.opener};
    MutexLock lock(&mu_);
    if (!s.path.empty()) paths_[s.id] = s.path;
    if (s.writable) {
      std::shared_ptr<LocalFile> f = OpenLocalLocked(s.id);
      if (f == nullptr) {
        Result<std::shared_ptr<LocalFile>> opened =
            files_dir_.empty() ? Result<std::shared_ptr<LocalFile>>(Status::InvalidArgument("no node store"))
                               : OpenLocalFile(files_dir_, s.id, /*truncate=*/false);
        if (!opened.ok()) {
          options_.logger->error("takeover: checkpoint file {} ({}) open for writing is lost: {}", s.id, s.path,
                                 opened.status().ToString());
          DropHandle(fh);
          continue;
        }
        f = *opened;
        MutexLock file_lock(&f->mu);
        // What was written before the restart is not known to be committed:
        // the next fsync or last close commits it (sending every chunk: the
        // copies a commit could reuse are not known either). A commit made
        // meanwhile by this mount shows up as a newer generation, which the
        // commit then replaces (CommitIfDirty).
        f->gen = s.entry.gen;
        f->level = static_cast<proto::CkptLevel>(s.entry.level);
        f->mode = s.entry.mode;
        f->WillChange();
        f->base.store(nullptr);
        f->sent.Reset(f->gen + 1);
        local_[s.id] = f;
      }
      h.file = f;
      ++writers;
    } else {
      h.file = OpenLocalLocked(s.id);
      if (s.has_entry) {
        if (h.file == nullptr) h.copy = OpenWholeCopy(s.entry);
        h.entry = std::make_shared<const proto::CkptEntry>(std::move(s.entry));
      }
    }
    handles_[fh] = std::move(h);
    next_fh_ = std::max(next_fh_, fh + 1);
    ++taken;
  }
  options_.logger->info("takeover: {} checkpoint handle(s), {} open for writing", taken, writers);
  return Status::Ok();
}

}  // namespace hoard::fuse
