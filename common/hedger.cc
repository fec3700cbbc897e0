#include "common/hedger.h"

namespace hoard {

Hedger::Hedger(Options options)
    : clock_(options.clock),
      window_(options.latency, options.clock),
      health_(options.health, options.clock),
      on_slow_suspect_(std::move(options.on_slow_suspect)),
      pool_(options.pool) {}

}  // namespace hoard
