// File: fuzz/fuzz_util.h
//
// What the fuzz targets share: slicing one fuzz input into the parts a
// decoder reads (several files, a length, flags), a scratch directory for the
// readers that read files, and the checksum fix-ups that let the fuzzer get
// past a checksum to the parser behind it.
//
// Thread-safety: libFuzzer runs a target on one thread; so does the replay
// test. Nothing here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <functional>

namespace hoard::fuzz {

// Reads an input front to back; reading past the end yields zeros and empty
// strings, so every input, however short, decodes to something.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  uint8_t Byte();
  uint32_t U32();  // little-endian
  // The next `n` bytes (fewer at the end of the input).
  std::string_view Bytes(size_t n);
  // A part whose length is a little-endian u32 before it.
  std::string_view Part() { return Bytes(U32()); }
  std::string_view Rest() { return Bytes(rest_.size()); }

 private:
  std::string_view rest_;
};

// Encodes the parts the way InputReader::Part reads them (for seeds).
std::string EncodePart(std::string_view bytes);

// A directory of this process's own, empty each time Fresh() returns it,
// removed at exit. Under /dev/shm when there is one: the readers fsync.
class Scratch {
 public:
  static const std::string& Fresh();
  static std::string File(const std::string& name);  // Fresh()'s path joined with name
};

// Writes `bytes` to `path`; aborts if it cannot (the fuzzer's own fault).
void WriteOrDie(const std::string& path, std::string_view bytes);

// Rewrites the checksums of a StateLog file (common/state_log.h) so that
// its header and every record whose length fits pass: the fuzzer then reaches
// the records' decoder. Stops at the first impossible length.
void FixStateLogChecksums(std::string* log);

// The input of the targets that read a snapshot and a StateLog back (the
// coordinator's state, the checkpoint journal): a flags byte, the snapshot as
// a part, then the log. Writes them into a fresh scratch directory, whose
// path it returns, under the names given: flag 1 writes the snapshot (through
// `fix_snapshot` when flag 8 is set and it is given), 2 the log, 4 fixes the
// log's checksums first.
std::string WriteSnapshotAndLog(const uint8_t* data, size_t size, const std::string& snapshot_name,
                                const std::string& log_name,
                                const std::function<std::string(std::string_view)>& fix_snapshot = {});

}  // namespace hoard::fuzz
