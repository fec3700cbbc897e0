// File: cli/process.h
//
// Process control for `hoard local up|down`: starting a daemon so that it is
// never left running unrecorded, recognising it again later by PID *and*
// start time (PIDs are reused), and stopping groups of them with a bounded
// wait (SIGTERM, grace, SIGKILL, a last bounded wait: a process stuck in the
// kernel is reported, never waited for forever).
//
// Thread-safety: single-threaded CLI code. Spawn and RunQuiet build argv
// before fork, since the CLI has libzmq threads and a forked child of a
// threaded process must not allocate.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace hoard::cli {

// Holds SIGINT, SIGTERM and SIGHUP blocked while it lives, so that ^C or a
// kill during `up` becomes a question the wait loops ask (Received) instead of
// killing the CLI between a spawn and its cleanup. libzmq's threads block every
// signal themselves, so this thread is the only one they can reach. Children
// get an empty mask back before exec (Spawn, RunQuiet).
class SignalBlock {
 public:
  SignalBlock();
  // Discards what is still pending before unblocking: the `up` has either
  // acted on the signal (stopped everything) or finished before noticing it,
  // and dying now would only lose its report.
  ~SignalBlock();
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

  // The first of those signals received so far, or 0. Never blocks.
  int Received();

 private:
  int Take();

  sigset_t set_, old_;
  int got_ = 0;
};

// "interrupted by SIGTERM" as a Status.
Status Interrupted(int sig);

// One process of the cluster, as cluster.json records it.
struct Proc {
  std::string name;    // "coordinator", "node2", "mount"
  std::string binary;  // "hoard-node": identifies records without a start time
  std::string log;
  pid_t pid = -1;
  uint64_t start_time = 0;  // field 22 of /proc/PID/stat; 0 = not recorded (an older hoard)
};

// When `pid` started, in clock ticks after boot (field 22); 0 if unknown.
uint64_t StartTime(pid_t pid);
// The state letter (field 3): R, S, D, Z, T...; '?' if unknown.
char ProcState(pid_t pid);
// True while `pid` exists and is not a zombie. Reaps it if it is our child.
bool Alive(pid_t pid);
// True if the recorded process still runs: its PID is alive and names the
// same process (same start time).
bool Running(const Proc& p);

// What stopping a set of processes did.
struct StopReport {
  nlohmann::json stopped = nlohmann::json::array();      // names now gone (stopped, or gone before)
  nlohmann::json not_stopped = nlohmann::json::array();  // {"name", "pid", "reason"}

  bool clean() const { return not_stopped.empty(); }
  std::string Summary() const;
};

// Stops a group together (they exit in parallel): SIGTERM to each, a grace
// period, SIGKILL to the rest, a bounded wait. Identity is checked again
// before each signal.
void StopGroup(const std::vector<Proc>& group, StopReport* report);

// Starts argv[0] in a new session with stdout and stderr appended to `output`
// (a daemon given --log-file writes and rotates its log itself; `output`
// then gets only what bypasses the logger: StderrPath).
// The child waits before exec until record(pid, start_time) has succeeded, so
// no daemon ever runs unrecorded: if the CLI dies first, the child sees the
// pipe close and exits. An exec failure (a missing binary) is an error, not a
// PID.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& output,
                    const std::function<Status(pid_t, uint64_t)>& record);

// Where a daemon logging to `log` ("logs/node1.log") has its stdout and
// stderr: "logs/node1.stderr".
std::string StderrPath(const std::string& log);

// Runs a command to completion with its output discarded; OK if it exits 0.
Status RunQuiet(const std::vector<std::string>& argv);

// What a command that ran to completion wrote on stdout, and its exit status
// (128 + N if signal N killed it). Its stderr goes to ours.
struct Output {
  int exit_code = 0;
  std::string out;
};
// Runs a command to completion. An error only if it could not run at all
// (a missing binary: exit status 127 from the child is reported as NotFound).
Result<Output> RunOutput(const std::vector<std::string>& argv);

// The directory of the running `hoard` binary: the daemons are installed
// next to it.
std::string BinDir();

// "; last log lines (PATH):\n..." for error messages, from `log` and its
// StderrPath, or "" when both are empty.
std::string LogTail(const std::string& path);

}  // namespace hoard::cli
