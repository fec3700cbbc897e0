// File: cli/commands.h
//
// Each AddXxx registers a `hoard` subcommand. When the user picks it, its
// parse callback stores what to run in *action; main() builds the Context
// from the global options and runs it.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "cli/context.h"

namespace hoard::cli {

using Action = std::function<int(Context&)>;

void AddStatusCommand(CLI::App& app, Action* action);
void AddDatasetCommands(CLI::App& app, Action* action);
void AddWarmCommand(CLI::App& app, Action* action);
void AddNodeCommands(CLI::App& app, Action* action);
void AddLocalCommands(CLI::App& app, Action* action);
void AddHookCommands(CLI::App& app, Action* action);
void AddCheckpointCommands(CLI::App& app, Action* action);
void AddKeysCommands(CLI::App& app, Action* action);
void AddConfigCommands(CLI::App& app, Action* action);
void AddTopCommand(CLI::App& app, Action* action);
void AddScrubCommand(CLI::App& app, Action* action);
void AddQuotaCommands(CLI::App& app, Action* action);
void AddLeaseCommands(CLI::App& app, Action* action);

// Job leases as `hoard lease list` and `hoard status` print them: one line
// each, "DATASET  job JOB  (KEY uid U on HOST)  expires in D".
std::string LeaseLines(const std::vector<proto::Lease>& leases, int64_t now_unix);

// Reports a command-line error in one line and returns the exit status: 2,
// or 64 under `hoard hook` (whose 2 means a timeout to a job scheduler).
int ParseErrorExit(CLI::App& app, const GlobalOptions& global, const CLI::ParseError& e);

}  // namespace hoard::cli
