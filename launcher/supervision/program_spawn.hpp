// Starting a program's workers (Note [A program's workers] in protocol/program_environment.hpp):
// fork + exec of PROGRAM once per rank, as Note [Starting workers safely] in worker_spawn.cpp says
// (everything prepared before fork(), async-signal-safe calls only in the child).
//
// Note [A program's process group]: a program may start processes of its own (DataLoader
// workers, a shell's children), which no death signal reaches. So each rank runs in a process
// group of its own, which the launcher signals whole: the forwarded Ctrl-C or SIGTERM, SIGKILL
// after the grace period, and SIGKILL to what is left once the rank itself ended. The rank is
// left a zombie (PeekExit) until then, so that its pid, the group's id, cannot be taken by another
// process, whose group the launcher would then kill.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "supervision/worker_spawn.hpp"

namespace dpl::supervision {

// What a machine's program workers run with.
struct ProgramLaunch {
  std::vector<std::string> argv;                       // PROGRAM [ARGS...]
  std::vector<std::vector<std::string>> environments;  // NAME=value entries, one per local rank
};

// The file execve runs for `program`: itself when it names a path (it holds a '/'), else the first
// executable file of that name on `search_path` (PATH's value). DPL_ERR_INVALID_ARGUMENT naming the
// program when there is none.
Result<std::string> FindProgram(const std::string& program, const std::string& search_path);

// Starts one worker per environment, in local-rank order: each the leader of a process group of
// its own, standard input from /dev/null, stdout and stderr into one pipe, SIGKILL at the
// launcher's death, every other descriptor of the launcher closed. DPL_ERR_INVALID_ARGUMENT when
// the program cannot be started (not found, not executable: no restart helps), after the workers
// already started were ended.
Result<SpawnedWorkers> SpawnProgram(const ProgramLaunch& launch);

// The waitpid status of the program worker `pid` once it exited, without reaping it (Note [A
// program's process group]); nullopt while it runs.
std::optional<int> PeekExit(pid_t pid);

// Sends `signal_number` to the process group of the program worker `pid`.
void SignalProgramWorker(pid_t pid, int signal_number);

// SIGKILL to what is left of the process group of the program worker `pid`, which exited, then
// reaps it and the processes of its group that this launcher adopted.
void ReleaseProgramWorker(pid_t pid);

}  // namespace dpl::supervision
