// File: common/proc_files.h
//
// What another process has open, read from /proc (Linux): the mount asks it
// of the process behind a FUSE request, because FUSE does not say how many
// descriptors share an open file (a FLUSH comes for every close of every
// one), nor when a process that took a lock has closed the file.
//
// A file is named by its device ("major:minor", as /proc/*/mountinfo and
// MountDevice write it; "" matches any device) and inode number. A process
// in another PID namespace than the mount's, or one that is gone, has
// nothing open as far as these functions can tell.
//
// Thread-safety: pure functions (they read /proc at each call).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace hoard {

struct ProcOpenQuery {
  std::string dev;  // "major:minor" of the file's mount; "" = any
  uint64_t ino = 0;
  bool writable_only = false;  // only descriptors open for writing count
  // Shared writable mappings count too (a mapping holds the open file after
  // its descriptor was closed: Python's mmap, numpy.memmap).
  bool shared_writable_maps = false;
};

// Whether process (or thread) `pid` has the file open (see ProcOpenQuery).
bool ProcessHasOpen(pid_t pid, const ProcOpenQuery& q);

// The thread group (process) of thread `tid`; `tid` itself if unknown.
pid_t ThreadGroupOf(pid_t tid);

}  // namespace hoard
