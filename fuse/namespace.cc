#include "fuse/namespace.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace hoard::fuse {

Namespace::Namespace()
    : slots_(new std::atomic<const MountedDataset*>[kSlotCount]), listing_(std::make_shared<Listing>()) {
  for (uint32_t i = 0; i < kSlotCount; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}

Namespace::~Namespace() = default;

const MountedDataset* Namespace::Find(std::string_view name) const {
  std::shared_ptr<const Listing> l = List();
  auto it = std::lower_bound(l->datasets.begin(), l->datasets.end(), name,
                             [](const auto& p, std::string_view n) { return p.first < n; });
  if (it == l->datasets.end() || it->first != name) return nullptr;
  return it->second;
}

const MountedDataset* Namespace::Successor(const MountedDataset& md, uint32_t entry,
                                           uint32_t* current_entry) const {
  const MountedDataset* current = Find(md.name);
  if (current == nullptr || current == &md || current->view->meta.uid != md.view->meta.uid) return nullptr;
  const EntryRecord& old = md.manifest().entry(entry);
  std::optional<uint32_t> e = current->manifest().Resolve(md.manifest().Path(entry));
  if (!e || !current->manifest().entry(*e).is_file() || current->manifest().entry(*e).file_key() != old.file_key()) {
    return nullptr;
  }
  *current_entry = *e;
  return current;
}

std::shared_ptr<const Namespace::Listing> Namespace::List() const {
  MutexLock lock(&mu_);
  return listing_;
}

std::vector<std::string> Namespace::Update(const ClusterView& view) {
  MutexLock lock(&mu_);
  std::map<std::string, const MountedDataset*> current;
  for (const auto& [name, md] : listing_->datasets) current[name] = md;

  std::vector<std::string> changed;
  auto listing = std::make_shared<Listing>();
  for (const auto& [name, ds] : view.datasets()) {
    auto it = current.find(name);
    if (it != current.end() && it->second->view->meta.uid == ds->meta.uid &&
        it->second->view->meta.version == ds->meta.version) {
      listing->datasets.emplace_back(name, it->second);
      current.erase(it);
      continue;
    }
    if (next_slot_ >= kSlotCount) {
      // Slots are never reused (an inode number keeps its meaning while
      // mounted); after 65,535 dataset versions the mount must be restarted.
      if (!out_of_slots_logged_) {
        out_of_slots_logged_ = true;
        fprintf(stderr, "hoard-fuse: out of dataset slots; restart the mount to see new datasets\n");
      }
      continue;
    }
    auto md = std::make_unique<MountedDataset>(name, next_slot_++, ds);
    slots_[md->slot].store(md.get(), std::memory_order_release);
    listing->datasets.emplace_back(name, md.get());
    all_.push_back(std::move(md));
    changed.push_back(name);
  }
  // Whatever is left vanished or was replaced: retire its slot.
  for (const auto& [name, md] : current) {
    md->retired.store(true, std::memory_order_release);
    if (std::find(changed.begin(), changed.end(), name) == changed.end()) changed.push_back(name);
  }
  listing_ = std::move(listing);
  return changed;
}

}  // namespace hoard::fuse
