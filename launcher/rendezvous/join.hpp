// The join protocol on top of the store: launchers check they describe the same job and take
// their machine ids, workers meet at barriers, and a failure anywhere is published so every
// launcher stops its workers.
//
// Keys: "job/settings" (set by machine 0: every setting that must match, Note [Settings at the
// join]), "job/machine/<id>" (a counter: above 1 means an id claimed twice) with
// "job/machine/<id>/name" (the machine that claimed it first), "job/next_machine_id" (ids taken
// in join order), and per attempt of the job (restarts start a new attempt) "attempt/<n>/..." for
// barriers, failures, an elastic job's members (rendezvous/membership.hpp) and the backend's own
// keys.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

struct JobShape {
  int num_machines = 1;
  int num_processes = 1;  // workers per machine
  int machine_id = 0;
  int world_size() const { return num_machines * num_processes; }
  int RankOf(int local_rank) const { return machine_id * num_processes + local_rank; }
};

// Checks the shape itself: machine id in range, sizes >= 1.
Status ValidateShape(const JobShape& shape);

// One setting every machine must give alike: {"--lr", "0.5"}.
struct JobSetting {
  std::string name;
  std::string value;
};

struct LauncherJoin {
  // The id this launcher was given, or nothing for the next free one in join order (machine 0,
  // the launcher that serves the store, is always given 0).
  std::optional<int> machine_id;
  // Ids are below this many; for an elastic job (`elastic`), ids name launchers, not places in
  // an attempt, and ids taken in join order have no bound (a machine may come after one left).
  int num_machines = 1;
  bool elastic = false;
  std::string machine_name;          // this launcher in others' messages: "node7 10.0.0.7 pid 42"
  std::vector<JobSetting> settings;  // every setting that must match, in the same order everywhere
};

// Machine 0 publishes its settings; every other launcher waits (up to `timeout`) for them and
// refuses to join with a different value, naming the setting and both values. Then the launcher
// claims its id or takes the next free one; an id claimed by two launchers is refused naming
// both machines. Returns this launcher's machine id.
Result<int> JoinAsLauncher(StoreClient& client, const LauncherJoin& join,
                           std::chrono::milliseconds timeout);

// Whether a launcher of the job in the store other than machine 0 (ids up to the job's
// `num_machines` and those taken in join order) still beats, watched for a
// member lease: an elastic job that lost machine 0 and runs on (with the store in etcd, a launcher
// given id 0 then joins it as a new machine), not the keys of a job that ended.
Result<bool> JobRunsWithoutMachineZero(StoreClient& client, int num_machines);

// The name machine `id` joined with (LauncherJoin::machine_name), or "" when unknown.
std::string MachineName(StoreClient& client, int id);

// Note [Refused launchers]: a launcher the join refused (a flag that differs, an id taken) records
// why, so that machine 0 says it rather than wait out the rendezvous timeout in silence, or call
// the machine one that never reached the store. `id` is the machine's, -1 when it had none.
Status RecordRefusal(StoreClient& client, int id, const std::string& why);
// The refusals recorded from the `from`-th on (counting from 0); `*next` gets where to go on.
Result<std::vector<std::string>> ReadRefusals(StoreClient& client, int64_t from, int64_t* next);
// Whether the launcher of machine `id` was refused.
bool WasRefused(StoreClient& client, int id);

// The key prefix of one attempt of the job, e.g. "attempt/0/".
std::string AttemptPrefix(int attempt);
// The environment variable in which a launcher tells its workers their attempt's number.
inline constexpr const char* kAttemptEnvironmentVariable = "DPL_ATTEMPT";
// In a worker: the attempt its launcher started it in, or the one it regrouped into last; 0 when
// none is named.
int AttemptOfThisWorker();

// Returns once `world_size` callers have entered the barrier `name` of this attempt.
Status Barrier(StoreClient& client, const std::string& attempt_prefix, const std::string& name,
               int world_size, std::chrono::milliseconds timeout);

// Adds `values` element-wise over all `world_size` ranks through the store: every rank calls it
// with the same `name` (unique per use) and as many values, and every rank gets the same sums,
// added in rank order. For a few numbers (test-set totals), whatever memory the backend moves.
Status SumAcrossRanks(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& name, int rank, int world_size,
                      std::vector<double>* values, std::chrono::milliseconds timeout);

// Records the job's failure for this attempt (the first one recorded wins) so that every
// launcher stops its workers.
Status PublishFailure(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& message);
// The recorded failure of this attempt, if any. An error means the store is unreachable.
Result<std::optional<std::string>> CheckFailure(StoreClient& client,
                                                const std::string& attempt_prefix);

std::vector<uint8_t> ToBytes(const std::string& text);
std::string FromBytes(const std::vector<uint8_t>& bytes);

// `fields` as one value, and back: each field as "<length>:<text>", so any text survives.
std::string EncodeFields(const std::vector<std::string>& fields);
Result<std::vector<std::string>> DecodeFields(const std::string& text);

}  // namespace dpl::rendezvous
