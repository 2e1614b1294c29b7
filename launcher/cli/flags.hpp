// The flag table: every flag of the launcher once, with its value's form, its help line, how its
// value lands in the options, where the environment gives a default, and what a worker receives
// of it. Parsing, --help and the workers' argv are all driven by this table (cli/options.cpp), so
// a new flag is one entry here (and its field in Options or training::TrainingConfig).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"

namespace dpl::cli {

// What the table writes into: the options, and the switches that pick the command.
struct ParsedFlags {
  Options options;
  bool help = false;
  bool version = false;
  bool selftest = false;
  bool worker = false;
};

struct Flag {
  std::string name;        // without dashes: "epochs"
  std::string value_name;  // shown in --help ("N"); empty for a switch, which takes no value
  std::string help;
  bool internal = false;    // set by the launcher for its workers; not in --help
  bool repeatable = false;  // may be given several times; every value is applied in order
  // The value changes the job's math or its collectives (model, optimizer, batch, data, ...):
  // every machine must give the same, and the launchers refuse to join otherwise, naming the flag
  // and both values (SettingsThatMustMatch, rendezvous::JoinAsLauncher). A new flag of that kind
  // is wrapped in MustMatch(...) in the table.
  bool must_match = false;
  // Sets the option from `text`. `label` names the source in errors: "--epochs", or
  // "MASTER_PORT (environment)". A switch's text is "true" or "false".
  std::function<Status(const std::string& label, const std::string& text, ParsedFlags* parsed)>
      apply;
  // The default the environment gives when the flag was not given: (label, text), or nothing.
  std::function<std::optional<std::pair<std::string, std::string>>()> environment;
  // The arguments that give a worker this flag's value; empty when workers do not need it.
  std::function<std::vector<std::string>(const Options& options)> forward;
};

// Every flag, in the order values are applied (a range that depends on another flag comes after
// it: --machine-id after --num-machines, --local-rank after --num-processes).
const std::vector<Flag>& FlagTable();

// The flag named `name` (dashes or underscores alike), or nullptr.
const Flag* FindFlag(const std::string& name);

// The canonical spelling of a flag name: '_' becomes '-', as in "num_processes".
std::string CanonicalFlagName(const std::string& name);

}  // namespace dpl::cli
