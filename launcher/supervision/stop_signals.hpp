// Signals to a launcher: recorded, for the supervisor, the hostfile runner and the restart loop
// to act on at their next look (a handler may do nothing more).
//
// Note [Stop and preemption signals]: SIGINT (Ctrl-C, the hostfile runner) stops the job at
// once. SIGTERM and SIGUSR1 are what schedulers send before they take the machines back (Slurm,
// Kubernetes): in a run that writes checkpoints they ask for a preemption, the job's checkpoint
// at the next step boundary and then its end (Note [Preemption] in training/preemption.cpp);
// in any other they stop it at once, as SIGINT. The same signal again changes nothing: a
// scheduler's signal may come more than once (Slurm signals the step's processes and srun
// forwards the signal too).
#pragma once

#include <string>

namespace dpl::supervision {

enum class OnTermination {
  kStop,     // SIGTERM and SIGUSR1 stop the job at once
  kPreempt,  // they ask for a preemption
};

// From now on SIGINT, SIGTERM and SIGUSR1 only record the signal.
void InstallStopHandlers(OnTermination on_termination);
// The signal that stops the job at once, or 0.
int StopSignal();
// The signal that asked for a preemption, or 0.
int PreemptionSignal();
// Stops the launcher as `signal_number` stops a job that writes no checkpoints, from any thread:
// recorded as a stop (never a preemption) once the handlers are installed; before, the signal's
// default action ends the process.
void StopAsBy(int signal_number);
// "15 (SIGTERM)".
std::string SignalName(int signal_number);

}  // namespace dpl::supervision
