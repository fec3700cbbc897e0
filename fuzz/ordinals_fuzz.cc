// Fuzz target: the chunk ordinal lists in node reports (proto/ordinals.h),
// which the coordinator decodes from every heartbeat.
//
// Input: the dataset's chunk count (u32), the count the report claims (u32),
// then the encoded list. DecodeOrdinals must accept exactly the strictly
// ascending lists below the limit of the claimed length, or say why not
// (kInvalidArgument); what it accepts must encode to bytes that decode to the
// same list. (Overlong varints, e.g. 0x80 0x00 for 0, are accepted: they alias
// but mean one list.)
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "proto/ordinals.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hoard::fuzz::InputReader in(data, size);
  const uint64_t limit = in.U32();
  const uint64_t expected = in.U32();
  const std::string_view rest = in.Rest();
  const std::vector<char> bytes(rest.begin(), rest.end());
  std::vector<uint64_t> seen;
  hoard::Status s = hoard::proto::DecodeOrdinals(bytes, limit, expected, [&](uint64_t o) {
    if (o >= limit || (!seen.empty() && o <= seen.back())) std::abort();
    seen.push_back(o);
  });
  if (!s.ok()) {
    if (s.code() != hoard::Code::kInvalidArgument) std::abort();
    return 0;
  }
  if (seen.size() != expected) std::abort();
  hoard::proto::OrdinalEncoder enc;
  for (uint64_t o : seen) enc.Add(o);
  std::vector<uint64_t> again;
  if (!hoard::proto::DecodeOrdinals(enc.Finish(), limit, expected, [&](uint64_t o) { again.push_back(o); }).ok() ||
      again != seen) {
    std::abort();
  }
  return 0;
}
