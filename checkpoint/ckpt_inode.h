// File: checkpoint/ckpt_inode.h
//
// The checkpoint tree's range of the mount's inode numbers (the whole map is
// fuse/inode.h): its root, MOUNT/checkpoints, is kCheckpointsIno, and an
// entry's inode is CkptIno(id), from its coordinator id, which survives
// renames. HoardFs routes every request on an inode of this range to CkptFs
// (checkpoint/ckpt_fs.h), every other to the dataset tree.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>

namespace hoard::fuse {

inline constexpr uint64_t kCheckpointsIno = 3;
// Checkpoint inodes live above every fixed inode and below dataset slot 1.
inline constexpr uint64_t kCkptInoBase = uint64_t(1) << 32;
inline bool IsCkptIno(uint64_t ino) { return ino == kCheckpointsIno || (ino >= kCkptInoBase && (ino >> 40) == 0); }
inline uint64_t CkptIno(uint64_t id) { return kCkptInoBase + id; }

}  // namespace hoard::fuse
