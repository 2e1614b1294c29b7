// The join protocol on top of the store: launchers check they describe the same job, workers
// meet at barriers, and a failure anywhere is published so every launcher stops its workers.
//
// Keys: "job/shape" (set by machine 0: "<num_machines>x<num_processes>"), "job/machine/<id>"
// (a counter; above 1 means a repeated --machine-id), and per attempt of the job (restarts start
// a new attempt) "attempt/<n>/..." for barriers, failures and the backend's own keys.
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

// Machine 0 publishes the shape; every other machine waits (up to `timeout`) for it and refuses a
// different one with a message naming both values. Every machine claims its id; a repeated id is
// refused.
Status JoinAsLauncher(StoreClient& client, const JobShape& shape,
                      std::chrono::milliseconds timeout);

// The key prefix of one attempt of the job, e.g. "attempt/0/".
std::string AttemptPrefix(int attempt);
// The environment variable in which a launcher tells its workers their attempt's number.
inline constexpr const char* kAttemptEnvironmentVariable = "DPL_ATTEMPT";

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

}  // namespace dpl::rendezvous
