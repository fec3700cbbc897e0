#include "common/hedger.h"

namespace hoard {

Hedger::Hedger(Options options)
    : clock_(options.clock),
      window_(options.latency, options.clock),
      own_health_(options.health, options.clock),
      health_(options.shared_health != nullptr ? *options.shared_health : own_health_),
      on_slow_suspect_(std::move(options.on_slow_suspect)),
      pool_(options.pool) {}

}  // namespace hoard
