#include "consensus/timed_kv.h"

#include <cstring>

namespace hoard {

void TimedKv::RegisterMetrics(metrics::Registry* registry) const {
  for (int op = 0; op < kOps; ++op) {
    registry->AddHistogram("hoard_etcd_request_seconds",
                           "Calls to etcd by the coordinator, by kind (a watch lasts until a change or its timeout)",
                           {{"op", kNames[op]}}, &seconds_[op]);
    registry->AddCounter("hoard_etcd_request_errors_total", "Calls to etcd that failed, by kind", {{"op", kNames[op]}},
                         &errors_[op]);
  }
}

uint64_t TimedKv::calls(const char* op) const {
  for (int i = 0; i < kOps; ++i) {
    if (std::strcmp(kNames[i], op) == 0) return seconds_[i].snapshot().count;
  }
  return 0;
}

}  // namespace hoard
