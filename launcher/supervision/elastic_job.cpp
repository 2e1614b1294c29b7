#include "supervision/elastic_job.hpp"

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/liveness.hpp"
#include "rendezvous/membership.hpp"
#include "supervision/heartbeat.hpp"
#include "supervision/stop_signals.hpp"
#include "supervision/supervisor.hpp"

namespace dpl::supervision {
namespace {

using Clock = std::chrono::steady_clock;

std::string ListMembers(const std::vector<rendezvous::Member>& members) {
  std::string list;
  for (size_t i = 0; i < members.size(); ++i) {
    list += (i ? ", " : "") + std::string("machine ") + std::to_string(members[i].machine_id) +
            " (" + members[i].name + ")";
  }
  return list;
}

// Note [Elastic membership]: every change says who left or came and what it does to the batch.
void LogMembership(const cli::Options& options, int attempt,
                   const std::vector<rendezvous::Member>& before,
                   const std::vector<rendezvous::Member>& now, const Regrouping& regrouping) {
  const int machines = static_cast<int>(now.size());
  const int batch = options.training.batch_size;
  const int per_rank = batch / (machines * options.num_processes);
  if (before.empty()) {
    log::Info("attempt " + std::to_string(attempt) + " runs on " + std::to_string(machines) +
              " machines: " + ListMembers(now) + "; global batch " + std::to_string(batch) + ", " +
              std::to_string(per_rank) + " per rank");
    return;
  }
  const std::string change = rendezvous::DescribeMembershipChange(before, now);
  if (change.empty()) return;
  const int was = static_cast<int>(before.size());
  log::Info("the job continues on " + std::to_string(machines) + " machines (was " +
            std::to_string(was) + ") " +
            (regrouping.kept ? "in place, from the newest step a worker holds"
             : regrouping.max_machines > 0
                 ? "from the newest step its running workers hold (else the newest checkpoint)"
                 : "from the newest checkpoint") +
            ": " + change + "; the global batch stays " + std::to_string(batch) + ", " +
            std::to_string(per_rank) + " per rank (was " +
            std::to_string(batch / (was * options.num_processes)) + ")");
}

// The coordinator of the job's last attempt ends the elastic job for every launcher still waiting
// for an attempt: those of `waiting_attempt`.
int EndElastic(Joined& joined, const Status& failure, bool coordinator, int waiting_attempt) {
  if (coordinator) {
    (void)rendezvous::EndElasticJob(*joined.client, failure.message(), waiting_attempt);
  }
  return failure.ok() ? 0 : Fail(failure);
}

// The job ended while this launcher waited for an attempt: "" is success.
int EndedWhileWaiting(const rendezvous::Attempt& ended) {
  if (!ended.job_end.empty()) return Fail(Status::Error(ended.job_end));
  log::Info("the job finished without this machine");
  return 0;
}

// The launchers of `members` whose machines the attempt found vanished (its own lost places and
// those any other launcher recorded), added to `gone` and recorded in the store: the next
// attempts wait for none of them, nor do launchers that join later.
void ForgetLostMembers(rendezvous::StoreClient& client, int attempt,
                       const std::vector<rendezvous::Member>& members,
                       const std::vector<int>& lost_here, std::set<int>* gone) {
  std::vector<int> lost = ReadLostMachines(client, rendezvous::AttemptPrefix(attempt),
                                           static_cast<int>(members.size()));
  lost.insert(lost.end(), lost_here.begin(), lost_here.end());
  for (int place : lost) {
    if (place >= 0 && place < static_cast<int>(members.size())) {
      const int id = members[static_cast<size_t>(place)].machine_id;
      gone->insert(id);
      (void)rendezvous::RecordGone(client, id);  // without it, a later joiner waits a lease
    }
  }
}

// Note [A preemption while the machines meet]: a preemption asked while this launcher waits for
// an attempt (a regroup after a lost machine, the job's start) does not end the wait: the attempt
// forms and its workers write the preemption's checkpoint at their first step boundary, as the
// other machines' do. Ending the wait instead left the others waiting for this machine until the
// rendezvous timeout, and no checkpoint of the step was written. Past kPreemptionJoinWait without
// an attempt, the launcher stops.
constexpr auto kPreemptionJoinWait = std::chrono::seconds(10);

rendezvous::ElasticOptions ElasticOptionsOf(const cli::Options& options) {
  rendezvous::ElasticOptions elastic;
  elastic.min_machines = options.min_machines;
  elastic.max_machines = options.num_machines;
  elastic.join_grace = options.join_grace;
  elastic.timeout = options.rendezvous_timeout;
  elastic.stop_requested = [asked = std::optional<Clock::time_point>()]() mutable {
    if (StopSignal() != 0) return true;
    if (PreemptionSignal() == 0) return false;
    if (!asked) asked = Clock::now();
    return Clock::now() - *asked > kPreemptionJoinWait;
  };
  return elastic;
}

// Attempt `attempt` runs on `members` without this machine: its workers, if it kept any, stop.
void LeftOut(int attempt, const std::vector<rendezvous::Member>& members, Regrouping* regrouping,
             rendezvous::AttemptJoin* join) {
  regrouping->kept.reset();
  log::Info("attempt " + std::to_string(attempt) + " runs on " + std::to_string(members.size()) +
            " machines without this one; it joins at the next change of machines");
  join->previous = members;
}

// Note [Shrink in place] (training/live_state.hpp): the built-in loop's workers regroup, up to
// the job's most machines; 0: they are restarted.
int RegroupsUpTo(const cli::Options& options) {
  const bool in_place = !options.restart_workers && options.command == cli::Command::kTrain &&
                        !options.runs_program();
  return in_place ? options.num_machines : 0;
}

// Running workers wait for the next attempt, so it closes once the machines left are in; a
// machine that comes later joins by a regroup of its own.
rendezvous::ElasticOptions AttemptElasticOptions(const rendezvous::ElasticOptions& elastic,
                                                 const Regrouping& regrouping) {
  rendezvous::ElasticOptions options = elastic;
  if (regrouping.kept) options.join_grace = std::chrono::milliseconds(0);
  return options;
}

// After an attempt that did not regroup: the launcher's exit code where the job ends here
// (preempted, done, failed for good), or none where it restarts.
std::optional<int> EndOfJob(const cli::Options& options, Joined& joined, const AttemptEnd& end,
                            bool coordinator, int attempt, int restarts) {
  const Status& result = end.status;
  // Note [Leaving an elastic job] in supervisor_regroup.cpp: the job is not this launcher's to end.
  if (end.left) return Fail(result);
  if (result.ok() && !end.preempted) return EndElastic(joined, result, coordinator, attempt + 1);
  const std::optional<int> preempted =
      end.preempted ? EndPreempted()
                    : PreemptedInsteadOfRestart(end, restarts, options.max_restarts);
  if (preempted) {
    if (coordinator) {
      (void)rendezvous::EndElasticJob(*joined.client, "the job was preempted", attempt + 1);
    }
    return preempted;
  }
  if (!MayRestart(end, restarts, options.max_restarts)) {
    return EndElastic(joined, result.WithContext("job failed"), coordinator, attempt + 1);
  }
  // Another attempt meets in the store: one gone (machine 0's, with its machine) ends the job
  // here, rather than say it restarts and fail at once.
  if (const auto store = rendezvous::MachinesWaiting(*joined.client, attempt + 1); !store.ok()) {
    return EndElastic(
        joined,
        result.WithContext("job failed, and cannot restart (" + store.status().message() + ")"),
        coordinator, attempt + 1);
  }
  return std::nullopt;
}

}  // namespace

int RunElasticJob(const cli::Options& options, Joined& joined) {
  auto heartbeat = rendezvous::Heartbeat::Start(joined.client_options, joined.machine_id);
  if (!heartbeat.ok()) return Fail(heartbeat.status());
  const rendezvous::ElasticOptions elastic = ElasticOptionsOf(options);
  rendezvous::AttemptJoin join;
  join.self = {joined.machine_id, joined.machine_name};
  int restarts = 0;
  Regrouping regrouping;
  regrouping.max_machines = RegroupsUpTo(options);
  for (int attempt = 0;; ++attempt) {
    join.attempt = attempt;
    bool coordinating = false;
    auto joined_attempt = rendezvous::JoinAttempt(
        *joined.client, join, AttemptElasticOptions(elastic, regrouping), &coordinating);
    if (!joined_attempt.ok()) {
      return EndElastic(joined, joined_attempt.status(), coordinating, attempt);
    }
    using Outcome = rendezvous::Attempt::Outcome;
    if (joined_attempt->outcome == Outcome::kJobEnded) return EndedWhileWaiting(*joined_attempt);
    if (joined_attempt->outcome == Outcome::kAbandoned) {
      log::Warning("the launcher that was choosing the machines of attempt " +
                   std::to_string(attempt) + " vanished; going on to the next attempt");
      continue;
    }
    if (joined_attempt->outcome == Outcome::kLeftOut) {
      LeftOut(attempt, joined_attempt->members, &regrouping, &join);
      continue;
    }
    LogMembership(options, attempt, join.previous, joined_attempt->members, regrouping);
    join.previous = joined_attempt->members;
    std::vector<int> ids;
    for (const rendezvous::Member& member : join.previous) ids.push_back(member.machine_id);
    const cli::Options attempt_options =
        AttemptOptions(options, joined, static_cast<int>(join.previous.size()),
                       joined_attempt->index, std::move(ids));
    const AttemptEnd end = RunAttempt(attempt_options, joined, attempt, &regrouping);
    if (end.regrouped) {
      ForgetLostMembers(*joined.client, attempt, join.previous, end.lost_machines, &join.gone);
      log::Warning("attempt " + std::to_string(attempt) +
                   " regroups, its workers running: " + end.regroup_why);
      continue;
    }
    const bool coordinator = joined_attempt->index == 0;
    if (auto exit_code = EndOfJob(options, joined, end, coordinator, attempt, restarts)) {
      return *exit_code;
    }
    ForgetLostMembers(*joined.client, attempt, join.previous, end.lost_machines, &join.gone);
    ++restarts;
    log::Warning(end.status.message());
    log::Warning("restarting the job (restart " + std::to_string(restarts) + " of " +
                 std::to_string(options.max_restarts) + ") with the machines that are left");
  }
}

}  // namespace dpl::supervision
