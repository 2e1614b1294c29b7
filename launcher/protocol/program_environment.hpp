// The environment of a program's workers (`launcher [flags] -- PROGRAM [ARGS...]`): what
// torchrun's agent gives each worker, so that a script written for torchrun runs unchanged.
//
// Note [A program's workers]: such a worker does not speak dpl's worker protocol (no report pipe,
// no progress records, no exit code of its own for a peer's failure): it is PROGRAM, started once
// per rank with torchrun's variables. MASTER_ADDR:MASTER_PORT there is not dpl's store but a port
// that rank 0's own torch TCPStore serves (`init_process_group("env://")`): machine 0's launcher
// picks a free one for every attempt and tells the other machines through dpl's store
// (supervision/program_master.hpp). TORCHELASTIC_RUN_ID is the job's id, never its token, and
// the token itself is not in the program's environment: the program never talks to dpl's store.
#pragma once

#include <string>
#include <vector>

namespace dpl::protocol {

// The variables torchrun sets for each worker. A worker of the built-in loop gets them too
// (supervision/worker_environment.cpp) with dpl's store as MASTER_ADDR:MASTER_PORT.
inline constexpr const char* kTorchrunWorkerVariables[] = {"RANK",
                                                           "LOCAL_RANK",
                                                           "ROLE_RANK",
                                                           "WORLD_SIZE",
                                                           "LOCAL_WORLD_SIZE",
                                                           "GROUP_RANK",
                                                           "GROUP_WORLD_SIZE",
                                                           "ROLE_WORLD_SIZE",
                                                           "ROLE_NAME",
                                                           "MASTER_ADDR",
                                                           "MASTER_PORT",
                                                           "TORCHELASTIC_RESTART_COUNT",
                                                           "TORCHELASTIC_MAX_RESTARTS"};

// Whether `name` is one of kTorchrunWorkerVariables.
bool IsTorchrunWorkerVariable(const std::string& name);

// Where one worker of a program stands in its attempt of the job.
struct ProgramWorkerPlace {
  int rank = 0;
  int local_rank = 0;
  int machine = 0;                // GROUP_RANK: the machine's place in this attempt
  int num_machines = 1;           // GROUP_WORLD_SIZE
  int processes_per_machine = 1;  // LOCAL_WORLD_SIZE
  std::string master_addr;        // where rank 0's TCPStore listens
  int master_port = 0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: 0 on the first attempt
  int max_restarts = 0;
  std::string run_id;  // TORCHELASTIC_RUN_ID
  int threads = 1;     // OMP_NUM_THREADS
};

// NAME=value entries of one worker's whole environment: `inherited` (NAME=value entries, the
// launcher's own without what is dpl's alone: the job token, the attempt number) without every
// variable set here, then `given` (--env NAME=VALUE: they win over inherited values), then
// torchrun's variables for `place`, TORCHELASTIC_RUN_ID and OMP_NUM_THREADS. As torchrun does,
// TORCH_NCCL_ASYNC_ERROR_HANDLING=1 unless it has a value, and the same for its older name,
// NCCL_ASYNC_ERROR_HANDLING (torch 1.13's); one given a value gives it to the other.
// TORCHELASTIC_USE_AGENT_STORE=False: rank 0 serves the TCPStore. Every inherited TORCHELASTIC_*
// variable is left out.
std::vector<std::string> ProgramEnvironment(const std::vector<std::string>& inherited,
                                            const std::vector<std::string>& given,
                                            const ProgramWorkerPlace& place);

// The value of `name` in NAME=value `entries`, or nullptr.
const char* FindVariable(const std::vector<std::string>& entries, const std::string& name);

}  // namespace dpl::protocol
