#include "fuse/namespace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "common/file_util.h"

namespace hoard::fuse {

Namespace::Namespace()
    : slots_(new std::atomic<const MountedDataset*>[kSlotCount]), listing_(std::make_shared<Listing>()) {
  for (uint32_t i = 0; i < kSlotCount; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}

Namespace::~Namespace() {
  MutexLock lock(&mu_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
}

Status Namespace::KeepSlots(const std::string& path, bool takeover) {
  MutexLock lock(&mu_);
  kept_.clear();
  if (takeover) {
    // Lines "SLOT UID VERSION"; a line cut short by a crash is ignored (its
    // slot is skipped: next_slot_ passes it).
    Result<std::string> text = ReadFile(path);
    if (!text.ok() && text.status().code() != Code::kNotFound) return text.status();
    std::istringstream in(text.ok() ? *text : "");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      uint64_t slot = 0, uid = 0;
      uint32_t version = 0;
      if (!(fields >> slot >> uid >> version) || slot == 0 || slot >= kSlotCount) continue;
      kept_[{uid, version}] = static_cast<uint32_t>(slot);
      next_slot_ = std::max(next_slot_, static_cast<uint32_t>(slot) + 1);
    }
  }
  if (journal_fd_ >= 0) ::close(journal_fd_);
  journal_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (takeover ? 0 : O_TRUNC), 0600);
  if (journal_fd_ < 0) return Status::FromErrno(errno, "open " + path);
  return Status::Ok();
}

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
    auto kept = kept_.find({ds->meta.uid, ds->meta.version});
    if (kept != kept_.end() && slots_[kept->second].load(std::memory_order_relaxed) == nullptr) {
      auto md = std::make_unique<MountedDataset>(name, kept->second, ds);
      slots_[md->slot].store(md.get(), std::memory_order_release);
      listing->datasets.emplace_back(name, md.get());
      all_.push_back(std::move(md));
      changed.push_back(name);
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
    if (journal_fd_ >= 0) {
      const std::string line =
          std::to_string(md->slot) + " " + std::to_string(ds->meta.uid) + " " + std::to_string(ds->meta.version) + "\n";
      if (::write(journal_fd_, line.data(), line.size()) != ssize_t(line.size())) {
        fprintf(stderr, "hoard-fuse: cannot keep dataset slot %u: a restart of the mount would make its open files stale\n",
                md->slot);
      }
    }
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
