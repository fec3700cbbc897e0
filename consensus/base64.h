// File: consensus/base64.h
//
// Base64 (RFC 4648, standard alphabet, with padding), as etcd's JSON gateway
// writes every key and value (Go's encoding of []byte). A codec of our own
// rather than Boost.Beast's, which is a detail header with no promise.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hoard {

std::string Base64Encode(std::string_view bytes);
// kInvalidArgument for a character outside the alphabet or a length that is
// not a multiple of 4 (padding included).
Result<std::string> Base64Decode(std::string_view text);

}  // namespace hoard
