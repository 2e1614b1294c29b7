// The environment --hostfile passes to the launchers of the other hosts, and how.
//
// Note [Forwarded environment]: ssh starts a remote command with sshd's environment, not this
// host's, so NCCL_SOCKET_IFNAME or PYTHONPATH set here would not reach the other hosts' workers.
// The hostfile runner passes the variables whose names start with kForwardedPrefixes (DeepSpeed
// forwards a similar list) and those given with --env on ssh's standard input, after the job
// token's line: a line NAME='value' each (quoted as one shell word), then an empty line, which the
// remote shell reads and exports before it starts the launcher (RemoteShellCommand). So no value
// shows in a command line that `ps` shows every user. A value with a line break cannot be passed
// so: --env refuses one, and a variable of the list that has one is left out, with a warning (as
// is a name other than letters, digits and '_', which the shell would not take as one word).
#pragma once

#include <string>
#include <vector>

namespace dpl::cluster {

// The variables passed by default, by the start of their names.
inline constexpr const char* kForwardedPrefixes[] = {"NCCL_", "DPL_",   "OMP_",
                                                     "CUDA_", "PYTHON", "TORCH_"};

struct ForwardedEnvironment {
  std::vector<std::string> entries;  // NAME=value
  // Names of the list left out: a value with a line break, or a name no shell takes.
  std::vector<std::string> left_out;
};

// From `environment` (this host's, NAME=value entries) every variable whose name starts with one of
// kForwardedPrefixes, except the job token (DPL_JOB_TOKEN, which has a line of its own) and the
// attempt number (DPL_ATTEMPT, each launcher's own); then `given` (--env NAME=VALUE), which wins
// over a value of the same name.
ForwardedEnvironment SelectForwarded(const std::vector<std::string>& environment,
                                     const std::vector<std::string>& given);

// What the remote shell reads after the token's line: NAME=<one shell word> per entry, each ended
// by a newline, then an empty line.
std::string EnvironmentLines(const std::vector<std::string>& entries);

// The names of `entries` apart by ", ".
std::string VariableNames(const std::vector<std::string>& entries);

}  // namespace dpl::cluster
