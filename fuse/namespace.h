// File: fuse/namespace.h
//
// Namespace is the set of datasets the mount shows under /datasets, each in
// its inode slot (fuse/inode.h), updated from ClusterView snapshots.
//
// Reads are lock-free: slots are an array of atomic pointers to immutable
// MountedDataset objects, which stay alive until the Namespace is destroyed
// (a removed dataset's object is retired, not freed, because the kernel may
// still hold its inode numbers). The name list for /datasets is an immutable
// snapshot swapped under a mutex that readers hold only to copy a shared_ptr.
//
// Slots outlive the process (KeepSlots): the kernel's inode numbers name
// slots, and a process that takes over the mount's FUSE connection
// (fuse/supervisor.h) must give each dataset version the slot it had. Each
// slot given is one line appended to a file (no fsync: it must outlive the
// process, not the machine, whose crash ends the connection too).
//
// Thread-safety: Update from one thread (the map watcher); everything else
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/cluster_view.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace hoard::fuse {

struct MountedDataset {
  MountedDataset(std::string n, uint32_t s, std::shared_ptr<const DatasetView> v)
      : name(std::move(n)), slot(s), view(std::move(v)) {}

  const std::string name;
  const uint32_t slot;
  const std::shared_ptr<const DatasetView> view;  // meta + manifest
  // Set when the dataset (or this version of it) is gone from the cluster:
  // names and attributes then answer ESTALE, but a file that was already open
  // keeps reading its version (POSIX: an open file outlives its name).
  mutable std::atomic<bool> retired{false};
  // Set by an open or read of one of its files, taken by the map poll, which
  // tells the coordinator (last-read times, which eviction goes by). A load
  // before the store: the hot path writes the shared line once per poll.
  mutable std::atomic<bool> read{false};
  void NoteRead() const {
    if (!read.load(std::memory_order_relaxed)) read.store(true, std::memory_order_relaxed);
  }
  const Manifest& manifest() const { return view->manifest; }
};

class Namespace {
 public:
  struct Listing {
    // Sorted by name.
    std::vector<std::pair<std::string, const MountedDataset*>> datasets;
  };

  Namespace();
  ~Namespace();

  // The dataset in `slot`, or null if the slot is empty or retired.
  const MountedDataset* Slot(uint32_t slot) const {
    const MountedDataset* md = AnySlot(slot);
    return md != nullptr && !md->retired.load(std::memory_order_acquire) ? md : nullptr;
  }
  // The dataset in `slot`, retired or not (for reads of files already open:
  // the kernel only sends those for inodes it looked up while they existed).
  const MountedDataset* AnySlot(uint32_t slot) const {
    return slot < kSlotCount ? slots_[slot].load(std::memory_order_acquire) : nullptr;
  }
  // The current dataset called `name`, or null.
  const MountedDataset* Find(std::string_view name) const;
  // For file `entry` of a retired version `md`: the current version of the
  // same dataset (same uid) if it has the same file (same path and FileKey),
  // with the file's entry there in *current_entry; else null (the dataset was
  // removed, or the file changed or is gone at the origin).
  const MountedDataset* Successor(const MountedDataset& md, uint32_t entry, uint32_t* current_entry) const;
  std::shared_ptr<const Listing> List() const;

  // Brings the slots in line with `view`: new datasets (or new versions) get
  // new slots; datasets that vanished or changed version are retired. Returns
  // the names whose entries in /datasets changed (for kernel invalidation).
  std::vector<std::string> Update(const ClusterView& view);

  // Keeps the slots given in `path` (see the top). `takeover`: give the
  // versions listed there their slots again, and new ones past them; else
  // the file starts empty. Call before the first Update.
  Status KeepSlots(const std::string& path, bool takeover);

 private:
  static constexpr uint32_t kSlotCount = 1u << 16;

  std::unique_ptr<std::atomic<const MountedDataset*>[]> slots_;
  mutable Mutex mu_;
  std::shared_ptr<const Listing> listing_ GUARDED_BY(mu_);
  uint32_t next_slot_ GUARDED_BY(mu_) = 1;
  bool out_of_slots_logged_ GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<MountedDataset>> all_ GUARDED_BY(mu_);  // owns every object ever made
  // KeepSlots: the slot of each (uid, version) an earlier process gave, and
  // the file new slots are appended to (-1: none).
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> kept_ GUARDED_BY(mu_);
  int journal_fd_ GUARDED_BY(mu_) = -1;
};

}  // namespace hoard::fuse
