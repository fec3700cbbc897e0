#include "consensus/kv.h"

namespace hoard {

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    // "ab\xff" has no successor of its length: every key above "ab\xff..."
    // starts with a larger "ab" or is longer, so the end is "ac".
    end.pop_back();
  }
  // No key is above every key with this prefix (it is empty or all 0xff):
  // etcd's "\0" means "to the end of the key space".
  return std::string(1, '\0');
}

}  // namespace hoard
