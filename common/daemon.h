// File: common/daemon.h
//
// What every hoard daemon's main() shares: a logger that writes to stderr
// (the launcher redirects it to a file) and waiting for SIGINT/SIGTERM.
//
// Thread-safety: call BlockTerminationSignals() first thing in main(), before
// any thread starts, so the signals reach only WaitForTermination().
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace hoard {

// A logger named `name` at `level` ("debug", "info", "warn", "error").
std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const std::string& level);

void BlockTerminationSignals();

// Raises the soft limit on open files to the hard limit (a daemon serving many
// readers holds many chunk files and sockets) and returns the new limit.
uint64_t RaiseFileLimit();
// Has malloc keep freed chunk-sized buffers for reuse instead of returning
// them to the kernel. Daemons move chunks in buffers of a few MiB (ZeroMQ
// messages, seals, reads); glibc maps each one afresh beyond its adaptive
// threshold and unmaps it at free, so every message paid page faults and
// the zeroing of its pages (measured: `bench/RESULTS.md`, issue 6). The cost:
// each malloc arena (one per allocating thread, up to 8 per core) keeps what
// it held at its busiest, as thread arenas are trimmed only past the
// threshold and the main arena keeps up to 256 MiB free.
void KeepFreedBuffers();

// Returns the signal number once SIGINT or SIGTERM arrives.
int WaitForTermination();

}  // namespace hoard
