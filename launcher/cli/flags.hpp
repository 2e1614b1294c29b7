// The flag table: every flag of the launcher once, with its value's form, its help line, how its
// value lands in the options, where the environment gives a default, what a worker receives of
// it, and what must agree on its value (Note [Flags that must agree]). Parsing, --help, the
// workers' argv, the machines' join check and the resume check are all driven by this table, so
// a new flag is one row in the file of its group (flags_job.cpp, flags_training.cpp,
// flags_output.cpp) and its field in Options or training::TrainingConfig.
//
// Note [Flags that must agree]
// Every row says, explicitly, whether its value must be the same on every machine of the job
// and whether a resumed run must give the value the checkpoint recorded, and, where it may
// differ, why. A flag that changes the trained values (the model, the optimizer and its numbers,
// the batch, the seed, the precision, ...) must match on both: the replicas would diverge
// silently, and a resumed run would no longer continue the run it resumes. A flag of the job's
// collectives, its shape or its data must match across machines but may change on resume (a
// resumed run may train longer, on other machines, on another device). A flag of one machine
// (its files, its console, its timeouts) may differ everywhere. The launchers compare the first
// two kinds at the join (SettingsThatMustMatch, rendezvous::JoinAsLauncher); checkpoints record
// the first (ResumeSettings, training::CheckpointPolicy). tests/cli refuses a row without this.
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
  std::string help_section;  // --help SECTION: that section's name; "" for every section
  bool version = false;
  bool selftest = false;
  bool worker = false;
};

// Where --help lists a flag: every row of the table names its section (tests/cli refuses a row
// without one). In the order --help prints them.
enum class HelpSection {
  kJob,          // job and machines: the job's shape, plugins, the commands
  kRendezvous,   // rendezvous and store: how the machines meet, and the timeouts
  kTraining,     // what is trained, on which device, for how long
  kOptimizer,    // optimizer and schedule
  kData,         // the data set and its cache
  kPrecision,    // arithmetic, loss scaling, the gradients' format on the wire
  kCheckpoints,  // checkpoints, resuming, initial and exported state
  kOutputs,      // outputs and observability: logs, metrics, traces, progress
  kClusters,     // --hostfile and ssh; Slurm, torchrun and Kubernetes environments
};

// A section as --help shows it: `name` picks it (--help NAME), `heading` titles it, `intro`
// (may be empty) says what applies to the section as a whole.
struct HelpSectionText {
  HelpSection section;
  const char* name;
  const char* heading;
  const char* intro;
};

// Every section, in --help's order.
const std::vector<HelpSectionText>& HelpSections();

// Note [Flags that must agree]: where a flag's value must be the same, and why it may differ
// where it may.
struct Agreement {
  bool across_machines = false;   // the launchers refuse to join otherwise, naming both values
  bool on_resume = false;         // a resumed run must give what the checkpoint recorded
  std::string why_it_may_differ;  // on resume or everywhere; "" only when it may differ nowhere
};

struct Flag {
  std::string name;        // without dashes: "epochs"
  std::string value_name;  // shown in --help ("N"); empty for a switch, which takes no value
  std::string help;
  bool internal = false;    // set by the launcher for its workers; not in --help
  bool repeatable = false;  // may be given several times; every value is applied in order
  // The value may be left out (--help, --help SECTION): then `apply` gets "". Only a value that
  // does not start with '-' is taken from the next argument.
  bool optional_value = false;
  std::optional<HelpSection> section;  // where --help lists it; set for every row
  // Note [Flags that must agree]; every row of the table has one.
  std::optional<Agreement> agreement;
  // Sets the option from `text`. `label` names the source in errors: "--epochs", or
  // "MASTER_PORT (environment)". A switch's text is "true" or "false".
  std::function<Status(const std::string& label, const std::string& text, ParsedFlags* parsed)>
      apply;
  // The default the environment gives when the flag was not given: (label, text), or nothing.
  std::function<std::optional<std::pair<std::string, std::string>>()> environment;
  // The arguments that give a worker this flag's value; empty when workers do not need it.
  std::function<std::vector<std::string>(const Options& options)> forward;
  // The value as a checkpoint records it (Note [Values in checkpoints] in flag_kinds.cpp); set
  // for every flag that must match on resume.
  std::function<std::string(const Options& options)> recorded_value;
  // The value the join compares, when the forwarded words would not tell values apart (the
  // program's words, which may hold spaces); else the words after the flag's name.
  std::function<std::string(const Options& options)> compared_value;

  bool MustMatchAcrossMachines() const { return agreement && agreement->across_machines; }
  bool MustMatchOnResume() const { return agreement && agreement->on_resume; }
};

// The row of the program after `--` (`launcher [flags] -- PROGRAM [ARGS...]`): the command line
// gives its words only after `--`, never as --program.
inline constexpr const char* kProgramFlag = "program";

// Every flag, in the order values are applied (a range that depends on another flag comes after
// it: --machine-id after --num-machines, --local-rank after --num-processes).
const std::vector<Flag>& FlagTable();

// The flag named `name` (dashes or underscores alike), or nullptr.
const Flag* FindFlag(const std::string& name);

// The canonical spelling of a flag name: '_' becomes '-', as in "num_processes".
std::string CanonicalFlagName(const std::string& name);

}  // namespace dpl::cli
