// How the rows of the flag table (flags.hpp) are built: one builder per kind of value, each
// setting how the value is read (apply), what a worker receives (forward) and what a checkpoint
// records (recorded_value); what must agree on a row's value (Note [Flags that must agree]); and
// the groups of rows, one file each (flags_job.cpp, flags_training.cpp, flags_output.cpp).
// Internal to cli/.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/flags.hpp"
#include "cli/values.hpp"
#include "training/config.hpp"

namespace dpl::cli::table {

using training::TrainingConfig;

// Where a flag's value lives: a plain function, so one entry serves both the parser (writing)
// and the workers' argv (reading).
template <typename T>
using Field = T& (*)(Options&);

template <typename T>
const T& Read(Field<T> field, const Options& options) {
  return field(const_cast<Options&>(options));
}

template <typename Member>
struct MemberOf;
template <typename T, typename Owner>
struct MemberOf<T Owner::*> {
  using Type = T;
  using Class = Owner;
};

// Member `kMember` of `object`, or of its member, ... down the path `kMember, kInner...`.
template <typename Object, auto kMember, auto... kInner>
auto& MemberAt(Object& object) {
  if constexpr (sizeof...(kInner) == 0) {
    return object.*kMember;
  } else {
    return MemberAt<typename MemberOf<decltype(kMember)>::Type, kInner...>(object.*kMember);
  }
}

// The Field of a member of Options or of its training config, or of one of the config's option
// structs: In<&TrainingConfig::epochs>, In<&TrainingConfig::optimizer,
// &OptimizerOptions::momentum>.
template <auto kMember, auto... kInner>
auto& In(Options& options) {
  if constexpr (std::is_same_v<typename MemberOf<decltype(kMember)>::Class, Options>) {
    return MemberAt<Options, kMember, kInner...>(options);
  } else {
    return MemberAt<training::TrainingConfig, kMember, kInner...>(options.training);
  }
}

// {"--name", value}: a worker's arguments for one value.
std::vector<std::string> Args(const std::string& name, const std::string& value);
Flag Base(const char* name, const char* value_name);
// A number as a checkpoint records it (Note [Values in checkpoints] in flag_kinds.cpp).
std::string RecordedNumber(double value);

template <int64_t kMax>
int64_t Constant(const Options&) {
  return kMax;
}

// An integer in [min, max_of(options)]; the maximum may depend on a flag applied before.
template <typename Int>
Flag Integer(const char* name, const char* value_name, int64_t min,
             int64_t (*max_of)(const Options&), Field<Int> field) {
  Flag flag = Base(name, value_name);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    int64_t value = 0;
    DPL_RETURN_IF_ERROR(ParseInteger(label, text, min, max_of(parsed->options), &value));
    field(parsed->options) = static_cast<Int>(value);
    return Status::Ok();
  };
  flag.recorded_value = [=](const Options& o) { return std::to_string(Read(field, o)); };
  flag.forward = [=](const Options& o) { return Args(name, std::to_string(Read(field, o))); };
  return flag;
}

Flag Unsigned64(const char* name, const char* value_name, Field<uint64_t> field);

// A real number for which `in_range` holds; `range` says which in words.
Flag Real(const char* name, const char* value_name, const char* range, bool (*in_range)(double),
          Field<double> field);

Flag Seconds(const char* name, Field<std::chrono::milliseconds> field);

template <typename Enum>
Flag Choice(const char* name, const char* value_name, const training::Spellings<Enum>& (*choices)(),
            Field<Enum> field) {
  Flag flag = Base(name, value_name);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseChoice(label, text, choices(), &field(parsed->options));
  };
  flag.recorded_value = [=](const Options& o) {
    return std::string(training::NameOf(choices(), Read(field, o)));
  };
  flag.forward = [=](const Options& o) {
    return Args(name, training::NameOf(choices(), Read(field, o)));
  };
  return flag;
}

// Free text. Workers get it unless it is empty (the default of every text flag, which some flags
// could not take back).
enum class EmptyText { kAllowed, kRefused };
Flag Text(const char* name, const char* value_name, EmptyText empty, Field<std::string> field);

// A switch that sets `field` to the value it `sets`; workers get it when the field has that value.
enum class SwitchSets { kTrue, kFalse };
Flag Switch(const char* name, SwitchSets sets, Field<bool> field);

// A switch that picks the command (--help, --version, ...); never forwarded by the table.
Flag CommandSwitch(const char* name, bool ParsedFlags::*member);

// Not passed on to workers or to the launchers of other machines.
Flag NotForwarded(Flag flag);
// Set by the launcher for its workers: not in --help, refused without --worker, not forwarded.
Flag Internal(Flag flag);
// A default from the environment variable `variable` when it is set and not empty.
Flag FromEnvironment(Flag flag, const char* variable);

// Note [Flags that must agree]. Changes the trained values: the same on every machine, and on
// resume as in the checkpoint.
Agreement ChangesTheMath();
// The same on every machine (the job's shape, its collectives, what it trains on); a resumed run
// may give another value, for the reason given.
Agreement SameOnEveryMachine(const char* why_resume_may_differ);
// May differ between machines and on resume, for the reason given.
Agreement MayDiffer(const char* why);

// A row's section of --help: add(Section::kData, ...).
using Section = HelpSection;

// Appends rows to the table, each with its section of --help, what must agree on its value and
// its help line.
class TableRows {
 public:
  explicit TableRows(std::vector<Flag>* flags) : flags_(flags) {}
  void operator()(Section section, Agreement agreement, Flag flag, std::string help) const;

 private:
  std::vector<Flag>* flags_;
};

// The groups of rows, in the table's order (flags.cpp).
void AddPluginFlags(TableRows add);    // flags_job.cpp
void AddJobFlags(TableRows add);       // flags_job.cpp
void AddTrainingFlags(TableRows add);  // flags_training.cpp
void AddOutputFlags(TableRows add);    // flags_output.cpp
void AddCommandFlags(TableRows add);   // flags_output.cpp
void AddProgramFlags(TableRows add);   // flags_program.cpp

// flags_program.cpp: what the parser checks of a program's job (Note [A program's workers] in
// protocol/program_environment.hpp) and of --log-ranks once every flag is applied, and the hint
// for a stray word that looks like a script.
Status CheckProgramJob(const Options& options);
Status CheckLogRanks(const Options& options);
std::string ProgramHint(const std::string& argument);

}  // namespace dpl::cli::table
