// File: fuse/inode.h
//
// Inode numbers of the mount are computed, never allocated, so the mount keeps
// no per-inode state and FORGET needs no bookkeeping:
//
//   1                      the mount root          (FUSE_ROOT_ID)
//   2                      /datasets
//   3                      /checkpoints
//   2^32 + id              the checkpoint entry with coordinator id `id`
//   slot << 40 | entry     entry `entry` of the dataset mounted in `slot`;
//                          entry 0 is /datasets/NAME itself
//
// A slot is given to one version of one dataset when the mount first sees it
// and is never reused while mounted, so an inode number never changes meaning:
// after a dataset is removed or replaced by a new version, its old inodes
// answer ESTALE instead of silently pointing at other files.
//
// HoardFs routes a request by its inode: 3 and 2^32 + id are the checkpoint
// tree's (IsCkptIno, checkpoint/ckpt_inode.h), served by CkptFs
// (checkpoint/ckpt_fs.h); every other inode (the root, /datasets, dataset
// entries) is the dataset tree's, served by DatasetFs (fuse/dataset_fs.h).
#pragma once

#include <cstdint>

#include "checkpoint/ckpt_inode.h"

namespace hoard::fuse {

inline constexpr uint64_t kRootIno = 1;
inline constexpr uint64_t kDatasetsIno = 2;
inline constexpr int kEntryBits = 40;
inline constexpr uint64_t kEntryMask = (uint64_t(1) << kEntryBits) - 1;
// Slot 0 is reserved so that dataset inodes never collide with the fixed ones.
inline constexpr uint32_t kMaxSlots = 1u << 16;

inline uint64_t MakeIno(uint32_t slot, uint64_t entry) { return (uint64_t(slot) << kEntryBits) | entry; }
inline uint32_t SlotOf(uint64_t ino) { return static_cast<uint32_t>(ino >> kEntryBits); }
inline uint64_t EntryOf(uint64_t ino) { return ino & kEntryMask; }
inline bool IsDatasetIno(uint64_t ino) { return SlotOf(ino) != 0; }

}  // namespace hoard::fuse
