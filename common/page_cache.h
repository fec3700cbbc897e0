// File: common/page_cache.h
//
// Whether a file's bytes are all in the page cache: the cheap test that says
// when bytes verified earlier may be served again without reading them from
// the disk.
//
// Why: a chunk file is checked against its checksum when it is read from
// the disk. While every page stays cached, what a reader gets is what was
// checked; once the kernel has dropped a page, the next read takes it from
// the disk, which may have rotted since. So the mount and the node agent
// verify a chunk again whenever a read finds it not wholly cached
// (fuse/chunk_reader.h, store/chunk_store.h).
//
// How: cachestat(2) (Linux 6.5) for one system call per question; on an
// older kernel, mincore(2) over a mapping of the file. Either counts pages,
// so a page that was dropped and loaded again by someone else in between
// (another process reading the file, a passthrough open) counts as cached:
// that window is the limit of the scheme, closed by the scrubber
// (node/scrubber.h), which reads every chunk from the disk on a schedule.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/result.h"

namespace hoard {

// Whether bytes [offset, offset + length) of the open file `fd` are all in
// the page cache. An error only if neither way of asking works (the caller
// should then read the disk, as for "not cached").
Result<bool> FullyCached(int fd, uint64_t offset, uint64_t length);

namespace internal {
// The older kernels' way, on its own (tests).
Result<bool> FullyCachedByMincore(int fd, uint64_t offset, uint64_t length);
}  // namespace internal

}  // namespace hoard
