// The flag table's rows for the plugins and for the job's shape and wiring (flags.hpp).
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "cli/flag_kinds.hpp"

namespace dpl::cli::table {
namespace {

constexpr int kMaxProcesses = 1024;
constexpr int kMaxMachines = 1024;
constexpr int kMaxThreadsPerWorker = 1024;
constexpr int kMaxPort = 65535;

// --num-machines N, or MIN:MAX for an elastic job.
Flag MachineCount() {
  Flag flag = Base("num-machines", "N|MIN:MAX");
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    const size_t colon = text.find(':');
    int64_t least = 0, most = 0;
    if (colon == std::string::npos) {
      DPL_RETURN_IF_ERROR(ParseInteger(label, text, 1, kMaxMachines, &most));
      least = most;
    } else {
      DPL_RETURN_IF_ERROR(
          ParseInteger(label + " MIN", text.substr(0, colon), 1, kMaxMachines, &least));
      DPL_RETURN_IF_ERROR(
          ParseInteger(label + " MAX", text.substr(colon + 1), 1, kMaxMachines, &most));
      if (least > most) {
        return Status::InvalidArgument(label + " " + text + " goes down; write it as " +
                                       std::to_string(most) + ":" + std::to_string(least));
      }
    }
    parsed->options.min_machines = static_cast<int>(least);
    parsed->options.num_machines = static_cast<int>(most);
    return Status::Ok();
  };
  flag.forward = [](const Options& o) {
    std::string count = std::to_string(o.num_machines);
    if (o.elastic()) count = std::to_string(o.min_machines) + ":" + count;
    return Args("num-machines", count);
  };
  return flag;
}

// --machine-id N or auto; its range depends on --num-machines, applied before.
Flag MachineId() {
  Flag flag = Base("machine-id", "N|auto");
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (text == "auto") {
      parsed->options.machine_id = kAutoMachineId;
      return Status::Ok();
    }
    int64_t id = 0;
    DPL_RETURN_IF_ERROR(ParseInteger(label, text, 0, parsed->options.num_machines - 1, &id));
    parsed->options.machine_id = static_cast<int>(id);
    return Status::Ok();
  };
  flag.forward = [](const Options& o) {
    return Args("machine-id",
                o.machine_id == kAutoMachineId ? "auto" : std::to_string(o.machine_id));
  };
  return flag;
}

// --config is read by the parser itself, before every other flag (cli/options.cpp).
Flag ConfigFile() {
  Flag config = NotForwarded(Base("config", "FILE"));
  config.apply = [](const std::string&, const std::string&, ParsedFlags*) { return Status::Ok(); };
  return config;
}

Flag PluginDirs() {
  Flag plugin_dir = Base("plugin-dir", "DIR");
  plugin_dir.repeatable = true;
  plugin_dir.apply = [](const std::string&, const std::string& text, ParsedFlags* parsed) {
    parsed->options.plugin_dirs.push_back(text);
    return Status::Ok();
  };
  plugin_dir.forward = [](const Options& o) {
    std::vector<std::string> args;
    for (const auto& dir : o.plugin_dirs) args.insert(args.end(), {"--plugin-dir", dir});
    return args;
  };
  return plugin_dir;
}

// Never forwarded in argv, which every user can read in `ps`: the launcher hands the token to
// its workers as DPL_JOB_TOKEN in their environment instead.
Flag JobToken() {
  return NotForwarded(FromEnvironment(
      Text("job-token", "TOKEN", EmptyText::kAllowed, In<&Options::job_token>), "DPL_JOB_TOKEN"));
}

Flag StallWarning() {
  Flag stall = Seconds("stall-warning", In<&Options::stall_warning>);
  stall.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (text == "0") {
      parsed->options.stall_warning = std::chrono::milliseconds(0);
      return Status::Ok();
    }
    return ParseSeconds(label, text, &parsed->options.stall_warning);
  };
  return stall;
}

// The job's shape and how its machines meet: machines, processes, the store, timeouts.
void AddShapeFlags(TableRows add) {
  add(Section::kJob,
      SameOnEveryMachine("an elastic job resumes on the machines it has, with the same global "
                         "batch"),
      MachineCount(),
      "machines in the job, 1..1024 (default 1); MIN:MAX for an elastic job: it starts once MIN "
      "machines joined and none came for --join-grace; when one is lost or comes the workers "
      "regroup in place, or restart (--max-restarts) from the newest checkpoint where they cannot");
  add(Section::kJob, MayDiffer("each machine's own place in the job"), MachineId(),
      "this machine's index, 0..num-machines-1, or auto (the default): machine 0 is the one whose "
      "address is --master-addr, the others are numbered as they join");
  add(Section::kJob, SameOnEveryMachine("the global batch stays whatever the world size"),
      Integer<int>("num-processes", "N", 1, Constant<kMaxProcesses>, In<&Options::num_processes>),
      "workers on this machine, 1..1024 (default 1)");
  add(Section::kRendezvous, MayDiffer("how this machine reaches machine 0"),
      FromEnvironment(Text("master-addr", "HOST", EmptyText::kRefused, In<&Options::master_addr>),
                      "MASTER_ADDR"),
      "host of machine 0's store (default $MASTER_ADDR, the cluster's, or 127.0.0.1)");
  add(Section::kRendezvous, MayDiffer("how this machine reaches machine 0"),
      FromEnvironment(
          Integer<int>("master-port", "PORT", 0, Constant<kMaxPort>, In<&Options::master_port>),
          "MASTER_PORT"),
      "port of machine 0's store, 0..65535 (default $MASTER_PORT, the cluster's, or 29500)");
  add(Section::kRendezvous, MayDiffer("the store's handshake checks it, and it is never published"),
      JobToken(), "shared secret of the job (default $DPL_JOB_TOKEN)");
  add(Section::kRendezvous,
      SameOnEveryMachine("every machine must keep the job's keys in the same place"),
      Text("store", "URL", EmptyText::kAllowed, In<&Options::store>),
      "where the job's keys live: etcd://HOST:PORT[,HOST:PORT...] keeps them in an etcd "
      "cluster, which outlives any machine of the job (default: the built-in store of machine 0)");
  add(Section::kRendezvous, MayDiffer("how long this machine waits"),
      Seconds("rendezvous-timeout", In<&Options::rendezvous_timeout>),
      "seconds to wait for every worker to join (default 300)");
  add(Section::kRendezvous, MayDiffer("how long this machine's backend calls may block"),
      Seconds("backend-timeout", In<&Options::backend_timeout>),
      "seconds a backend call may block (default 300)");
  add(Section::kRendezvous, MayDiffer("machine 0's decides when an elastic job starts"),
      Seconds("join-grace", In<&Options::join_grace>),
      "an elastic job starts once MIN machines joined and no other came for this long (default 5)");
}

// How this machine runs its part: the hostfile runner, the watchdog, threads, logs.
void AddMachineFlags(TableRows add) {
  add(Section::kClusters,
      MayDiffer("read by the runner that starts the launchers; never passed on"),
      NotForwarded(Text("hostfile", "FILE", EmptyText::kRefused, In<&Options::hostfile>)),
      "start a launcher with these flags on every host of FILE (`HOST slots=N` lines, as "
      "DeepSpeed's; slots = --num-processes), over ssh for the other hosts; machine 0 is the "
      "first host");
  add(Section::kClusters,
      MayDiffer("read by the runner that starts the launchers; never passed on"),
      NotForwarded(Text("ssh-options", "\"ARGS\"", EmptyText::kAllowed, In<&Options::ssh_options>)),
      "more arguments for ssh to the hosts of --hostfile (\"-p 2222 -i KEY\"); ssh runs in batch "
      "mode");
  add(Section::kOutputs, MayDiffer("what this machine's launcher says"),
      Switch("no-flag-warnings", SwitchSets::kTrue, In<&Options::no_flag_warnings>),
      "do not warn of flags given that change nothing in this job (--hostfile's launchers get it: "
      "the runner warns once)");
  add(Section::kClusters, MayDiffer("how this machine's launcher is stopped"),
      NotForwarded(Switch("exit-with-stdin", SwitchSets::kTrue, In<&Options::exit_with_stdin>)),
      "stop the job when standard input closes (--hostfile starts the launchers of other hosts "
      "so, over ssh)");
  add(Section::kOutputs, MayDiffer("each worker's own watchdog"), StallWarning(),
      "report a backend call blocked this long: which ranks wait in which collective, which never "
      "came; 0 = never (default 60)");
  add(Section::kJob, MayDiffer("this machine's cores"),
      Integer<int>("threads-per-worker", "N", 0, Constant<kMaxThreadsPerWorker>,
                   In<&Options::threads_per_worker>),
      "compute threads per worker, 0 = cores / workers (default 0)");
  add(Section::kOutputs, MayDiffer("this machine's files"),
      Text("log-dir", "DIR", EmptyText::kAllowed, In<&Options::log_dir>),
      "write one log file per rank into this folder");
  add(Section::kOutputs, MayDiffer("this machine's console"),
      Choice<log::TimeFormat>("log-time", "FORMAT", LogTimeNames, In<&Options::log_time>),
      "time on each log line: iso (local time, ISO 8601), elapsed (seconds since the start) or "
      "none (default iso)");
}

}  // namespace

// The plugins: where they are searched, which backend and model, with their options.
void AddPluginFlags(TableRows add) {
  add(Section::kJob,
      MayDiffer("read by the parser; the flags in the file are classified themselves"),
      ConfigFile(),
      "read more flags from FILE (`name = value` lines; names without the leading dashes, with - "
      "or _)");
  add(Section::kJob, MayDiffer("where this machine finds its plugins"), PluginDirs(),
      "folder searched first for plugins (repeatable); then $DPL_PLUGIN_PATH, then the install's");
  add(Section::kJob,
      SameOnEveryMachine("a checkpoint holds no backend state; any backend sums alike"),
      Text("backend", "NAME", EmptyText::kRefused, In<&Options::backend>),
      "communication backend: auto|gloo|nccl|tcp|<plugin name> (default auto)");
  add(Section::kJob, MayDiffer("this machine's tuning of its backend (interfaces, buffers)"),
      Text("backend-options", "K=V,..", EmptyText::kAllowed, In<&Options::backend_options>),
      "backend-specific options \"key=value,key=value\"");
  add(Section::kTraining, ChangesTheMath(),
      Text("model", "NAME", EmptyText::kRefused, In<&TrainingConfig::model>),
      "model plugin name (default convnet)");
  add(Section::kTraining, ChangesTheMath(),
      Text("model-options", "K=V,..", EmptyText::kAllowed, In<&TrainingConfig::model_options>),
      "model-specific options \"key=value,key=value\"");
}

// The job's shape and its wiring: machines, processes, the store, timeouts, threads, logs.
void AddJobFlags(TableRows add) {
  AddShapeFlags(add);
  AddMachineFlags(add);
}

}  // namespace dpl::cli::table
