#include "fuzz/fuzz_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/file_util.h"
#include "common/hash.h"

namespace hoard::fuzz {

uint8_t InputReader::Byte() {
  const std::string_view b = Bytes(1);
  return b.empty() ? 0 : static_cast<uint8_t>(b[0]);
}

uint32_t InputReader::U32() {
  const std::string_view b = Bytes(4);
  uint32_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  return v;
}

std::string_view InputReader::Bytes(size_t n) {
  const std::string_view out = rest_.substr(0, n);
  rest_.remove_prefix(out.size());
  return out;
}

std::string EncodePart(std::string_view bytes) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(n >> (8 * i));
  out.append(bytes);
  return out;
}

namespace {

// Never freed: the atexit handler that removes it runs after static
// destructors would have.
const std::string& ScratchRoot() {
  static const std::string* root = [] {
    struct stat st;
    std::string tmpl = (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp");
    tmpl += "/hoard-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] { (void)RemoveTree(ScratchRoot()); });
    return new std::string(tmpl);
  }();
  return *root;
}

}  // namespace

const std::string& Scratch::Fresh() {
  static const std::string dir = JoinPath(ScratchRoot(), "d");
  if (!RemoveTree(dir).ok() || !MakeDirs(dir).ok()) {
    std::fprintf(stderr, "cannot empty the scratch directory %s\n", dir.c_str());
    std::abort();
  }
  return dir;
}

std::string Scratch::File(const std::string& name) { return JoinPath(Fresh(), name); }

void WriteOrDie(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

namespace {

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

void FixStateLogChecksums(std::string* log) {
  // Layout: common/state_log.h. Header: magic(8) format(4) checksum(4)
  // base_seq(8), its checksum over the other 20 bytes; records: len(4)
  // checksum(4) payload.
  if (log->size() < 24) return;
  char covered[20];
  std::memcpy(covered, log->data(), 12);
  std::memcpy(covered + 12, log->data() + 16, 8);
  PutU32(log->data() + 12, static_cast<uint32_t>(Checksum64(covered, sizeof covered)));
  size_t pos = 24;
  while (log->size() - pos >= 8) {
    const uint32_t len = GetU32(log->data() + pos);
    if (len == 0 || len > log->size() - pos - 8) return;
    PutU32(log->data() + pos + 4, static_cast<uint32_t>(Checksum64(log->data() + pos + 8, len)));
    pos += 8 + len;
  }
}

std::string WriteSnapshotAndLog(const uint8_t* data, size_t size, const std::string& snapshot_name,
                                const std::string& log_name,
                                const std::function<std::string(std::string_view)>& fix_snapshot) {
  InputReader in(data, size);
  const uint8_t flags = in.Byte();
  const std::string_view snapshot = in.Part();
  std::string log(in.Rest());
  const std::string& dir = Scratch::Fresh();
  if (flags & 1) {
    WriteOrDie(JoinPath(dir, snapshot_name),
               (flags & 8) && fix_snapshot ? fix_snapshot(snapshot) : std::string(snapshot));
  }
  if (flags & 2) {
    if (flags & 4) FixStateLogChecksums(&log);
    WriteOrDie(JoinPath(dir, log_name), log);
  }
  return dir;
}

}  // namespace hoard::fuzz
