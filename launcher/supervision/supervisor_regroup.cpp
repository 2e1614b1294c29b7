// Note [Shrink in place] (training/live_state.hpp), the supervisor's part: an attempt of an
// elastic job ends with its workers running when a machine is lost or one waits to join, and the
// same supervisor goes on with them in the next attempt. And what it records of lost machines,
// and how its own machine leaves the job.
#include <chrono>

#include "rendezvous/membership.hpp"
#include "rendezvous/regroup.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/supervisor.hpp"

namespace dpl::supervision {

void Supervisor::AllowRegroup(int max_machines) {
  regroup_max_machines_ = max_machines;
}

Status Supervisor::Regroup(const std::string& why) {
  regroup_why_ = why;
  (void)client_.Set(rendezvous::RegroupCallKey(prefix_), rendezvous::ToBytes(why));
  return Status::Ok();
}

Result<bool> Supervisor::RegroupCalled() {
  if (regroup_max_machines_ == 0) return false;
  auto called = client_.Get(rendezvous::RegroupCallKey(prefix_), std::chrono::milliseconds(0));
  if (called.ok()) {
    regroup_why_ = rendezvous::FromBytes(*called);
    return true;
  }
  if (called.status().code() != DPL_ERR_TIMEOUT && called.status().code() != DPL_ERR_NOT_FOUND) {
    return called.status();
  }
  if (shape_.machine_id != 0 || shape_.num_machines >= regroup_max_machines_) return false;
  DPL_ASSIGN_OR_RETURN(const bool waiting, rendezvous::MachinesWaiting(client_, attempt_ + 1));
  if (waiting) (void)Regroup("a machine joins");
  return waiting;
}

Status Supervisor::Continue(const cli::Options& options, const rendezvous::JobShape& shape,
                            int attempt) {
  for (const Worker& worker : workers_) {
    if (worker.exited) continue;
    rendezvous::RegroupOrder order;
    order.why = regroup_why_;
    order.attempt = attempt;
    order.place = shape.machine_id;
    order.machines = shape.num_machines;
    DPL_RETURN_IF_ERROR(rendezvous::SendRegroupOrder(client_, prefix_, worker.rank, order));
  }
  if (heartbeat_) heartbeat_->Finish();
  options_ = options;
  shape_ = shape;
  attempt_ = attempt;
  prefix_ = rendezvous::AttemptPrefix(attempt);
  regroup_why_.clear();
  lost_machines_.clear();
  for (Worker& worker : workers_) {
    worker.rank = shape_.RankOf(worker.local_rank);
    worker.on_console = cli::LogsRank(options_, worker.rank);
  }
  stalls_.Restart(prefix_, shape.world_size());
  machines_.reset();
  heartbeat_.reset();
  if (shape.num_machines > 1) {
    machines_ = std::make_unique<MachineWatch>(client_, prefix_, shape);
    heartbeat_ = std::make_unique<Heartbeat>(client_, prefix_, shape_.machine_id);
  }
  return Status::Ok();
}

std::vector<int> Supervisor::IdsOf(const std::vector<int>& places) const {
  std::vector<int> ids;
  for (int place : places) ids.push_back(options_.MachineIdAt(place));
  return ids;
}

void Supervisor::RecordLost(const std::vector<int>& machines) {
  lost_machines_ = machines;
  (void)RecordLostMachines(client_, prefix_, machines);
  for (int machine : machines) {
    std::vector<int> ranks;
    for (int local = 0; local < shape_.num_processes; ++local) {
      ranks.push_back(machine * shape_.num_processes + local);
    }
    stalls_.MarkGone(machine, std::move(ranks));
  }
}

// Note [Leaving an elastic job]: a stop signal to the launcher of one machine of an elastic job
// (Ctrl-C in its terminal; a scheduler's SIGTERM where no checkpoint is written) takes that
// machine out of the job, as torchrun's agents do: its workers stop, no failure is published and
// its beat ends unfinished, so the other machines find it gone and go on without it (in place,
// where they may). Publishing a failure made them fail and restart from the newest checkpoint,
// which cost more than a machine that vanished. A fixed job cannot go on without the machine:
// there the stop fails the job everywhere.
Status Supervisor::Stopped() {
  if (!options_.attempt_of_elastic_job()) return Failed(StoppedBySignal());
  StopAll();
  left_ = true;
  return Status::Error(StoppedBySignal() +
                       ": this machine leaves the job, which goes on without it where enough "
                       "machines are left");
}

}  // namespace dpl::supervision
