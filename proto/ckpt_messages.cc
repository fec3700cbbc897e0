#include "proto/messages.h"

#include "common/hash.h"

namespace hoard::proto {

const char* CkptLevelName(CkptLevel level) {
  switch (level) {
    case CkptLevel::kNone: return "-";
    case CkptLevel::kL: return "L";
    case CkptLevel::kR: return "R";
    case CkptLevel::kP: return "P";
  }
  return "?";
}

std::optional<uint64_t> CkptChunkCount(uint64_t size, uint64_t chunk_size) {
  if (size == 0) return 0;
  if (chunk_size == 0 || chunk_size > kMaxCkptChunkSize || size > uint64_t(INT64_MAX)) return std::nullopt;
  return size / chunk_size + (size % chunk_size != 0);
}

uint64_t CkptHolderScore(uint64_t id, uint32_t index, std::string_view node) {
  return Mix64(Mix64(Hash64(std::to_string(id), 0x636b7074), index), Hash64(node));
}

std::vector<std::string> CkptChunkHolders(const CkptEntry& e, uint32_t index) {
  std::vector<std::string> holders;
  if (!e.writer.empty()) holders.push_back(e.writer);
  if (index < e.replicas.size()) holders.insert(holders.end(), e.replicas[index].begin(), e.replicas[index].end());
  return holders;
}

uint64_t CkptChunkGen(const CkptEntry& e, uint32_t index) {
  return index < e.chunk_gens.size() ? e.chunk_gens[index] : e.gen;
}

CkptLevel CkptShownLevel(const CkptEntry& e,
                         const std::function<bool(uint32_t index, const std::string& node)>& counts) {
  const auto level = static_cast<CkptLevel>(e.level);
  if (level != CkptLevel::kR) return level;
  for (uint32_t i = 0; i < e.checksums.size(); ++i) {
    uint32_t n = 0;
    for (const std::string& h : CkptChunkHolders(e, i)) n += counts(i, h) ? 1 : 0;
    if (n < e.replicas_wanted) return CkptLevel::kL;
  }
  return level;
}

bool IsSafeCkptPath(std::string_view path) {
  if (path.empty()) return true;
  if (path.size() > kMaxCkptPathBytes) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string_view name = path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    // Not empty (no leading, trailing or double '/'), not "." or "..", no NUL.
    if (name.empty() || name.size() > kMaxCkptNameBytes || name == "." || name == ".." ||
        name.find('\0') != std::string_view::npos) {
      return false;
    }
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

}  // namespace hoard::proto
