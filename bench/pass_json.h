// File: bench/pass_json.h
//
// The JSON object a read pass prints (hoard-readtree, hoard-nfsread): what
// was read, how fast, and an order-independent checksum of the bytes (see
// hoard-readtree), so that passes over different paths can be compared.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace hoard::bench {

inline nlohmann::json PassJson(const std::string& dir, uint64_t files, uint64_t bytes, double seconds,
                               uint64_t checksum, uint64_t errors) {
  return {{"dir", dir},
          {"files", files},
          {"bytes", bytes},
          {"seconds", seconds},
          {"bytes_per_s", seconds > 0 ? double(bytes) / seconds : 0.0},
          {"files_per_s", seconds > 0 ? double(files) / seconds : 0.0},
          {"checksum", checksum},
          {"errors", errors}};
}

}  // namespace hoard::bench
