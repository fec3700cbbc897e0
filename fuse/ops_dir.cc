// The dataset tree's directory operations (fuse/dataset_fs.h): opendir, readdir(plus).
//
// Offsets: 1 is ".", 2 is "..", and 3 + k is the k-th child. Inside a dataset
// the children are a fixed, sorted range of the manifest, so an offset stays
// valid for the life of the version however large the directory is.
#include <cerrno>
#include <cstring>
#include <vector>

#include "fuse/dataset_fs.h"
#include "fuse/inode.h"

namespace hoard::fuse {
namespace {

// Adds one entry to `buf`; false when it does not fit.
bool AddEntry(fuse_req_t req, std::vector<char>* buf, size_t* used, bool plus, const char* name,
              const fuse_entry_param& e, off_t next_off) {
  const size_t room = buf->size() - *used;
  size_t need;
  if (plus) {
    need = fuse_add_direntry_plus(req, buf->data() + *used, room, name, &e, next_off);
  } else {
    need = fuse_add_direntry(req, buf->data() + *used, room, name, &e.attr, next_off);
  }
  if (need > room) return false;
  *used += need;
  return true;
}

}  // namespace

void DatasetFs::OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  if (!Stat(ino, &st).ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  // Listings of a dataset never change: let the kernel cache them, and keep
  // that cache across opendir calls (without keep_cache the kernel drops a
  // directory's cached listing at every opendir).
  if (IsDatasetIno(ino)) {
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
  }
  if (ino == kDatasetsIno) RefreshNow();
  fuse_reply_open(req, fi);
}

void DatasetFs::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  std::vector<char> buf(size);
  size_t used = 0;
  fuse_entry_param e;
  struct stat st;

  // Emits the child at position k (0-based) with inode `child`; false when full.
  auto emit = [&](const char* name, fuse_ino_t child, off_t next) {
    if (!Stat(child, &st).ok()) return true;  // vanished meanwhile: skip
    FillEntry(child, st, &e);
    return AddEntry(req, &buf, &used, plus, name, e, next);
  };
  auto dot = [&](const char* name, fuse_ino_t self, off_t next) {
    // "." and ".." carry no lookup reference (the kernel skips them).
    std::memset(&e, 0, sizeof e);
    e.attr.st_ino = self;
    e.attr.st_mode = S_IFDIR;
    return AddEntry(req, &buf, &used, plus, name, e, next);
  };

  if (!Stat(ino, &st).ok()) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  fuse_ino_t parent = kRootIno;
  const MountedDataset* ds = nullptr;
  uint32_t entry = 0;
  if (ino == kDatasetsIno) {
    parent = kRootIno;
  } else if (IsDatasetIno(ino)) {
    ds = ns_.Slot(SlotOf(ino));
    if (ds == nullptr) {
      fuse_reply_err(req, ESTALE);
      return;
    }
    entry = static_cast<uint32_t>(EntryOf(ino));
    const uint32_t p = ds->manifest().entry(entry).parent;
    parent = entry == 0 ? kDatasetsIno : MakeIno(ds->slot, p);
  }
  if (off < 1 && !dot(".", ino, 1)) goto reply;
  if (off < 2 && !dot("..", parent, 2)) goto reply;
  if (ino == kRootIno) {
    if (off < 3 && !emit("datasets", kDatasetsIno, 3)) goto reply;
    if (off < 4) emit("checkpoints", kCheckpointsIno, 4);
  } else if (ino == kDatasetsIno) {
    std::shared_ptr<const Namespace::Listing> list = ns_.List();
    for (size_t k = off < 3 ? 0 : size_t(off - 2); k < list->datasets.size(); ++k) {
      const auto& [name, md] = list->datasets[k];
      if (!emit(name.c_str(), MakeIno(md->slot, 0), off_t(k + 3))) break;
    }
  } else {
    const Manifest& m = ds->manifest();
    const EntryRecord& d = m.entry(entry);
    std::string name;
    for (uint64_t k = off < 3 ? 0 : uint64_t(off - 2); k < d.child_count(); ++k) {
      const uint32_t c = d.first_child() + static_cast<uint32_t>(k);
      name.assign(m.name(c));
      if (!emit(name.c_str(), MakeIno(ds->slot, c), off_t(k + 3))) break;
    }
  }
reply:
  fuse_reply_buf(req, buf.data(), used);
}

}  // namespace hoard::fuse
