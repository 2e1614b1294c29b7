// The flag table's rows for what a run writes, for the commands, and for what a launcher sets
// for its workers (flags.hpp).
#include <limits>
#include <sstream>
#include <string>

#include "cli/flag_kinds.hpp"
#include "protocol/worker_command.hpp"

namespace dpl::cli::table {

using training::StragglerOptions;

namespace {

constexpr int kMaxRestarts = 1000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

Flag SelfTest() {
  Flag selftest = CommandSwitch("selftest", &ParsedFlags::selftest);
  selftest.forward = [](const Options& o) {
    return o.selftest_job ? std::vector<std::string>{"--selftest"} : std::vector<std::string>{};
  };
  return selftest;
}

// --help, or --help SECTION for that section alone.
Flag HelpCommand() {
  Flag help = CommandSwitch("help", &ParsedFlags::help);
  help.value_name = "[SECTION]";
  help.optional_value = true;
  help.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    parsed->help = true;
    std::string names;
    for (const HelpSectionText& section : HelpSections()) {
      if (text.empty() || text == section.name) {
        parsed->help_section = text;
        return Status::Ok();
      }
      names += (names.empty() ? "" : ", ") + std::string(section.name);
    }
    return Status::InvalidArgument(label + ": there is no section '" + text +
                                   "'; the sections are " + names);
  };
  return help;
}

// --worker-outputs FD,.. (protocol/worker_command.hpp).
Flag WorkerOutputs() {
  Flag outputs = Internal(Base(protocol::kWorkerOutputsFlag, "FD,.."));
  outputs.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    std::istringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
      int64_t fd = -1;
      DPL_RETURN_IF_ERROR(ParseInteger(label, item, 0, kIntMax, &fd));
      parsed->options.worker_output_fds.push_back(static_cast<int>(fd));
    }
    return Status::Ok();
  };
  return outputs;
}

int64_t LastLocalRank(const Options& o) {
  return o.num_processes - 1;
}

// Note [Stragglers] (training/stragglers.hpp).
void AddStragglerFlags(TableRows add) {
  add(Section::kOutputs,
      SameOnEveryMachine("every rank sends its step times to rank 0 when they are compared; a "
                         "resumed run may compare otherwise"),
      Real(
          "straggler-factor", "X", "0 (off) or greater than 1",
          [](double x) { return x == 0 || x > 1; },
          In<&TrainingConfig::stragglers, &StragglerOptions::factor>),
      "name a rank, with its machine, whose compute time per step is more than X times the "
      "median rank's for --straggler-steps steps in a row, in the log, --metrics and "
      "--tensorboard; 0 = off (default 2)");
  add(Section::kOutputs, MayDiffer("rank 0 alone compares the ranks' step times"),
      Integer<int>("straggler-steps", "N", 1, Constant<kIntMax>,
                   In<&TrainingConfig::stragglers, &StragglerOptions::steps>),
      "steps in a row a rank must be beyond --straggler-factor to be named a straggler, and "
      "within it to be named no longer one, >= 1 (default 5)");
}

// How a job comes back from a failure or a change of machines (listed after the checkpoints).
void AddRestartFlags(TableRows add) {
  add(Section::kJob, MayDiffer("each launcher's own; a failure anywhere stops every machine"),
      Integer<int>("max-restarts", "N", 0, Constant<kMaxRestarts>, In<&Options::max_restarts>),
      "restart a failed job up to N times, 0..1000 (default 0)");
  add(Section::kJob,
      SameOnEveryMachine("the launchers of an elastic job regroup their workers together"),
      Switch("restart-workers", SwitchSets::kTrue, In<&Options::restart_workers>),
      "when an elastic job loses or gains a machine, restart every worker from the newest "
      "checkpoint (default: the running workers go on in place from the newest step any of them "
      "holds, and a new machine's workers get that state from them, nothing read from disk)");
}

}  // namespace

// What a run writes: logs of the loss, metrics, traces, checkpoints, parameters, exports.
void AddOutputFlags(TableRows add) {
  add(Section::kOutputs, MayDiffer("how often rank 0 logs"),
      Integer<int>("log-interval", "N", 1, Constant<kIntMax>, In<&TrainingConfig::log_interval>),
      "log the loss every N batches, >= 1 (default 10); with --grad-accum at the optimizer "
      "step that holds each N-th batch, with the mean loss of its micro-batches");
  add(Section::kOutputs, MayDiffer("rank 0's file"),
      Text("metrics", "FILE", EmptyText::kAllowed, In<&TrainingConfig::metrics_file>),
      "write JSON-lines metrics to FILE: a line per logged step, epoch and evaluation (appended "
      "with --resume)");
  add(Section::kOutputs, MayDiffer("rank 0's files"),
      Text("tensorboard", "DIR", EmptyText::kAllowed, In<&TrainingConfig::tensorboard_dir>),
      "write TensorBoard event files (train/ and eval/ scalars) into DIR");
  add(Section::kOutputs, MayDiffer("machine 0's file"),
      Text("trace", "FILE", EmptyText::kAllowed, In<&TrainingConfig::trace_file>),
      "write a timeline of every rank to FILE (Chrome / Perfetto JSON: ui.perfetto.dev)");
  AddStragglerFlags(add);
  add(Section::kCheckpoints,
      MayDiffer("where rank 0 writes checkpoints and a resumed run reads them"),
      Text("checkpoint-dir", "DIR", EmptyText::kAllowed, In<&TrainingConfig::checkpoint_dir>),
      "folder for checkpoints");
  add(Section::kCheckpoints,
      SameOnEveryMachine("every rank copies a checkpoint's state at the same steps (and writes "
                         "its part with --shard-optimizer on); a resumed run may checkpoint at "
                         "other steps"),
      Integer<int64_t>("checkpoint-every", "N", 0, Constant<kInt64Max>,
                       In<&TrainingConfig::checkpoint_every>),
      "checkpoint every N steps, 0 = only at the end (default 0); the state is copied at the "
      "step and written while training goes on");
  add(Section::kCheckpoints, MayDiffer("which of rank 0's checkpoints stay on disk"),
      Integer<int>("keep-checkpoints", "K", 0, Constant<kIntMax>,
                   In<&TrainingConfig::keep_checkpoints>),
      "keep the newest K checkpoints, removing an older one only once a newer one is complete on "
      "disk; 0 = keep all (default 5: a long run would fill the disk, and a resume or a restart "
      "needs the newest, with a few before it in case it is not the one wanted)");
  AddRestartFlags(add);
  add(Section::kOutputs, MayDiffer("each rank's files"),
      Text("dump-parameters", "DIR", EmptyText::kAllowed, In<&TrainingConfig::dump_parameters_dir>),
      "each rank writes its final parameters to DIR/rank-N.bin (float32, back to back) and its "
      "buffers, if any, to DIR/rank-N.buffers.bin");
  add(Section::kCheckpoints, MayDiffer("rank 0's file"),
      Text("export", "FILE", EmptyText::kAllowed, In<&TrainingConfig::export_file>),
      "at the end, rank 0 writes the trained model for Python to FILE (torch.load or "
      "torch.jit.load)");
  add(Section::kCheckpoints, MayDiffer("rank 0's file"),
      Text("export-best", "FILE", EmptyText::kAllowed, In<&TrainingConfig::export_best_file>),
      "--eval-every: rank 0 writes the model of the lowest validation loss so far to FILE, as "
      "--export writes (atomically, at each new best)");
  add(Section::kCheckpoints,
      MayDiffer("the state rank 0 reads is broadcast to every rank; a resumed run starts from "
                "its checkpoint instead"),
      Text("init-from", "FILE", EmptyText::kAllowed, In<&TrainingConfig::init_from>),
      "start from the state dict in FILE (torch.save of {name: tensor}), e.g. to fine-tune");
}

// The commands and switches, then what the launcher sets for its workers.
void AddCommandFlags(TableRows add) {
  add(Section::kJob, MayDiffer("picks a command that starts no job"), HelpCommand(),
      "print this help, or only its section SECTION, and exit");
  add(Section::kJob, MayDiffer("picks a command that starts no job"),
      CommandSwitch("version", &ParsedFlags::version),
      "print the version and ABI versions and exit");
  add(Section::kJob, SameOnEveryMachine("a selftest trains nothing to resume"), SelfTest(),
      "rendezvous, then a barrier and an allgather of ranks through the backend, then the link "
      "test: latency and bandwidth between every two machines and between the workers of each "
      "machine, as a table naming the slowest link; no training");
  add(Section::kJob,
      SameOnEveryMachine("every rank takes part in the link test; a resumed run may skip it"),
      Switch("preflight", SwitchSets::kTrue, In<&Options::preflight>),
      "before the first step, run --selftest's link test (a few seconds) and warn, naming both "
      "hosts, of a link more than 2x slower than the median of its kind");
  add(Section::kTraining, ChangesTheMath(),
      Switch("drop-last", SwitchSets::kTrue, In<&TrainingConfig::drop_last>),
      "drop the last incomplete batch");
  add(Section::kCheckpoints, MayDiffer("how a run starts; a restart gives it to every machine"),
      Switch("resume", SwitchSets::kTrue, In<&TrainingConfig::resume>),
      "resume from the newest checkpoint");
  add(Section::kOutputs, MayDiffer("this machine's terminal"),
      Switch("no-progress", SwitchSets::kFalse, In<&TrainingConfig::progress>),
      "no progress bar on the terminal (there is none when the output is not a terminal)");
  add(Section::kTraining,
      SameOnEveryMachine("the evaluation is a collective of every rank; a resumed run may skip it"),
      Switch("no-eval", SwitchSets::kFalse, In<&TrainingConfig::evaluate>),
      "skip the test-set evaluation at the end");
  add(Section::kTraining, SameOnEveryMachine("the gradients take another path, to the same values"),
      Switch("mirror-parameters", SwitchSets::kTrue, In<&TrainingConfig::mirror_parameters>),
      "run the optimizer on a host copy of the parameters, as --device cuda always does (on cpu: "
      "to test that path)");
  // Set by the launcher for its workers (protocol/worker_command.hpp).
  const Agreement own_workers = MayDiffer("set by each launcher for its own workers");
  add(Section::kJob, own_workers,
      Internal(CommandSwitch(protocol::kWorkerFlag, &ParsedFlags::worker)),
      "run as a worker of a launcher");
  add(Section::kJob, own_workers,
      Internal(
          Integer<int>(protocol::kLocalRankFlag, "N", 0, LastLocalRank, In<&Options::local_rank>)),
      "the worker's index on this machine");
  add(Section::kJob, own_workers, WorkerOutputs(),
      "load once, then fork one worker per output descriptor");
  add(Section::kJob, own_workers,
      Internal(Text(protocol::kStoreAddrFlag, "HOST:PORT", EmptyText::kAllowed,
                    In<&Options::store_addr>)),
      "host:port of the running store");
}

}  // namespace dpl::cli::table
