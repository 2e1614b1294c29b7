#include "rendezvous/join.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "rendezvous/liveness.hpp"
#include "rendezvous/membership.hpp"

// Note [Settings at the join]
// Every flag that changes the job's math or its collectives (the model and its options, the
// optimizer and its numbers, the batch, seed, gradient accumulation and compression, the data,
// the backend, the sizes: Note [Flags that must agree] in cli/flags.hpp) must have the same value
// on every machine, or the replicas diverge silently (a different --lr), a backend aborts (a
// different model) or the collectives mismatch (a different bucket size). So machine 0 publishes
// its settings as (flag, value) pairs, every other launcher compares its own before it takes a
// machine id, and the first difference is refused naming the flag and both values. The pairs
// come from the flag table (cli::SettingsThatMustMatch): a new flag joins the check by being
// marked there, and the join only compares text.

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSettingsKey = "job/settings";
constexpr const char* kNextMachineIdKey = "job/next_machine_id";
// How long a launcher that found its id taken waits for the first claimer's name.
constexpr auto kClaimerNameWait = 2s;

std::string MachineKey(int id) {
  return "job/machine/" + std::to_string(id);
}

// This launcher in messages about it: its id when it was given one, else its name.
std::string ThisMachine(const LauncherJoin& join) {
  if (join.machine_id)
    return "this machine (--machine-id " + std::to_string(*join.machine_id) + ")";
  return "this machine (" + join.machine_name + ")";
}

std::string EncodeSettings(const std::vector<JobSetting>& settings) {
  std::vector<std::string> fields;
  for (const JobSetting& setting : settings) {
    fields.push_back(setting.name);
    fields.push_back(setting.value);
  }
  return EncodeFields(fields);
}

// Note [Settings at the join].
Status CompareSettings(const LauncherJoin& join, const std::string& published) {
  auto fields = DecodeFields(published);
  if (!fields.ok() || fields->size() % 2 != 0) {
    return Status::Error(
        "machine 0 published malformed job settings; run the same dpl version "
        "on every machine");
  }
  std::vector<JobSetting> theirs;
  for (size_t i = 0; i < fields->size(); i += 2) {
    theirs.push_back({(*fields)[i], (*fields)[i + 1]});
  }
  for (const JobSetting& mine : join.settings) {
    auto match = std::find_if(theirs.begin(), theirs.end(),
                              [&](const JobSetting& other) { return other.name == mine.name; });
    if (match == theirs.end()) {
      return Status::InvalidArgument("machine 0 does not check " + mine.name +
                                     " at the join: run the same dpl version on every machine");
    }
    if (match->value != mine.value) {
      return Status::InvalidArgument(mine.name + " differs between machines: " + ThisMachine(join) +
                                     " has " + mine.value + ", machine 0 has " + match->value +
                                     "; pass the same value to every launcher");
    }
  }
  if (theirs.size() != join.settings.size()) {
    return Status::InvalidArgument("machine 0 checks other settings at the join than " +
                                   ThisMachine(join) +
                                   ": run the same dpl version on every "
                                   "machine");
  }
  return Status::Ok();
}

// Claims `id` for this launcher: false when another launcher claimed it first.
Result<bool> Claim(StoreClient& client, int id, const std::string& machine_name) {
  DPL_ASSIGN_OR_RETURN(auto claims, client.Add(MachineKey(id), 1));
  if (claims > 1) return false;
  DPL_RETURN_IF_ERROR(client.Set(MachineKey(id) + "/name", ToBytes(machine_name)));
  return true;
}

std::string FirstClaimer(StoreClient& client, int id) {
  auto name = client.Get(MachineKey(id) + "/name", kClaimerNameWait);
  return name.ok() ? FromBytes(*name) : std::string("another launcher");
}

// The next id no launcher claimed, in join order (machine 0 holds 0).
Result<int> ClaimNextId(StoreClient& client, const LauncherJoin& join) {
  for (;;) {
    DPL_ASSIGN_OR_RETURN(auto next, client.Add(kNextMachineIdKey, 1));
    const int id = static_cast<int>(next);
    if (!join.elastic && id >= join.num_machines) {
      std::string machines;
      for (int taken = 0; taken < join.num_machines; ++taken) {
        machines += (taken ? ", " : "") + std::to_string(taken) + " " + MachineName(client, taken);
      }
      return Status::InvalidArgument(
          ThisMachine(join) + " is one machine too many: the " + std::to_string(join.num_machines) +
          " ids of --num-machines " + std::to_string(join.num_machines) + " are taken (" +
          machines +
          "); start no more launchers than that, or give another job another --master-port");
    }
    DPL_ASSIGN_OR_RETURN(auto claimed, Claim(client, id, join.machine_name));
    if (claimed) return id;  // else a launcher given this id took it: try the next
  }
}

// Note [A vanished launcher's id]: in an elastic job a machine may come back, or be replaced,
// under the --machine-id of a launcher that left (killed, its machine down). Once that launcher's
// beat ("job/alive/<id>") stood still for kMemberLease, the newcomer joins under the next free id
// instead (an elastic job's ids name launchers and have no bound): the other launchers remember
// the old id as gone for good, and would never wait for a launcher that reused it. While the beat
// moves the claim is refused as before, after twice the lease. Newcomers that find the same
// claimer vanished each take a free id of their own.
Result<bool> ClaimerVanished(StoreClient& client, int id) {
  LivenessWatch watch(kMemberLease, {});
  const auto deadline = std::chrono::steady_clock::now() + 2 * kMemberLease;
  while (std::chrono::steady_clock::now() < deadline) {
    DPL_ASSIGN_OR_RETURN(const bool alive, watch.Alive(client, id));
    if (!alive) return true;
    std::this_thread::sleep_for(kHeartbeatInterval);
  }
  return false;
}

}  // namespace

Result<bool> JobRunsWithoutMachineZero(StoreClient& client, int num_machines) {
  // Ids given on the command line are below num_machines; ids taken in join order, below the count.
  DPL_ASSIGN_OR_RETURN(const int64_t handed_out, client.Add(kNextMachineIdKey, 0));
  const int last = std::max(num_machines - 1, int(handed_out));
  LivenessWatch watch(kMemberLease, {});
  // A beat that stood still for the lease is gone; one that moves within it is not.
  const auto deadline = std::chrono::steady_clock::now() + kMemberLease + kHeartbeatInterval;
  for (;;) {
    const bool decided = std::chrono::steady_clock::now() >= deadline;
    bool any = false;
    for (int id = 1; id <= last && !any; ++id) {
      DPL_ASSIGN_OR_RETURN(any, watch.Alive(client, id));
    }
    if (!any || decided) return any;
    std::this_thread::sleep_for(kHeartbeatInterval);
  }
}

namespace {

Result<int> ClaimGivenId(StoreClient& client, const LauncherJoin& join) {
  const int id = *join.machine_id;
  DPL_ASSIGN_OR_RETURN(auto claimed, Claim(client, id, join.machine_name));
  if (claimed) return id;
  if (join.elastic) {
    DPL_ASSIGN_OR_RETURN(const bool vanished, ClaimerVanished(client, id));
    if (vanished) return ClaimNextId(client, join);
  }
  return Status::InvalidArgument(
      "--machine-id " + std::to_string(id) +
      " is claimed by two machines: " + FirstClaimer(client, id) + " and " + join.machine_name +
      " (this one); give every machine a distinct id in [0, " + std::to_string(join.num_machines) +
      "), or leave --machine-id out to number the machines in the order they join");
}

}  // namespace

std::vector<uint8_t> ToBytes(const std::string& text) {
  return {text.begin(), text.end()};
}
std::string FromBytes(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

std::string EncodeFields(const std::vector<std::string>& fields) {
  std::string text;
  for (const std::string& field : fields) text += std::to_string(field.size()) + ":" + field;
  return text;
}

Result<std::vector<std::string>> DecodeFields(const std::string& text) {
  std::vector<std::string> fields;
  size_t position = 0;
  while (position < text.size()) {
    const size_t colon = text.find(':', position);
    if (colon == std::string::npos || colon == position || colon - position > 9) {
      return Status::Error("malformed field list in the store");
    }
    size_t length = 0;
    for (size_t i = position; i < colon; ++i) {
      if (text[i] < '0' || text[i] > '9') return Status::Error("malformed field list in the store");
      length = length * 10 + static_cast<size_t>(text[i] - '0');
    }
    if (length > text.size() - colon - 1) return Status::Error("malformed field list in the store");
    fields.push_back(text.substr(colon + 1, length));
    position = colon + 1 + length;
  }
  return fields;
}

Status ValidateShape(const JobShape& shape) {
  if (shape.num_machines < 1 || shape.num_processes < 1) {
    return Status::Error("--num-machines (" + std::to_string(shape.num_machines) +
                         ") and --num-processes (" + std::to_string(shape.num_processes) +
                         ") must both be at least 1");
  }
  if (shape.machine_id < 0 || shape.machine_id >= shape.num_machines) {
    return Status::Error("--machine-id " + std::to_string(shape.machine_id) +
                         " is out of range: with --num-machines " +
                         std::to_string(shape.num_machines) + " it must be in [0, " +
                         std::to_string(shape.num_machines) + ")");
  }
  return Status::Ok();
}

Result<int> JoinAsLauncher(StoreClient& client, const LauncherJoin& join,
                           std::chrono::milliseconds timeout) {
  if (join.machine_id) {
    DPL_RETURN_IF_ERROR(ValidateShape({join.num_machines, 1, *join.machine_id}));
  }
  if (join.machine_id == 0) {
    DPL_RETURN_IF_ERROR(client.Set(kSettingsKey, ToBytes(EncodeSettings(join.settings))));
  } else {
    auto published = client.Get(kSettingsKey, timeout);
    if (!published.ok()) {
      return published.status().WithContext("waiting for machine 0 to publish the job's settings");
    }
    DPL_RETURN_IF_ERROR(CompareSettings(join, FromBytes(*published)));
  }
  return join.machine_id ? ClaimGivenId(client, join) : ClaimNextId(client, join);
}

std::string MachineName(StoreClient& client, int id) {
  auto name = client.Get(MachineKey(id) + "/name", 0ms);
  return name.ok() ? FromBytes(*name) : std::string();
}

Status RecordRefusal(StoreClient& client, int id, const std::string& why) {
  if (id >= 0)
    DPL_RETURN_IF_ERROR(client.Set("job/refused/id/" + std::to_string(id), ToBytes(why)));
  DPL_ASSIGN_OR_RETURN(const int64_t order, client.Add("job/refused/count", 1));
  return client.Set("job/refused/" + std::to_string(order - 1), ToBytes(why));
}

Result<std::vector<std::string>> ReadRefusals(StoreClient& client, int64_t from, int64_t* next) {
  DPL_ASSIGN_OR_RETURN(const int64_t count, client.Add("job/refused/count", 0));
  std::vector<std::string> refusals;
  *next = from;
  for (int64_t i = from; i < count; ++i) {
    // Counted before written: one not written yet is read at the next look.
    auto why = client.Get("job/refused/" + std::to_string(i), 0ms);
    if (!why.ok()) break;
    refusals.push_back(FromBytes(*why));
    *next = i + 1;
  }
  return refusals;
}

bool WasRefused(StoreClient& client, int id) {
  return client.Get("job/refused/id/" + std::to_string(id), 0ms).ok();
}

std::string AttemptPrefix(int attempt) {
  return "attempt/" + std::to_string(attempt) + "/";
}

int AttemptOfThisWorker() {
  const char* text = std::getenv(kAttemptEnvironmentVariable);
  return text == nullptr ? 0 : std::atoi(text);
}

Status Barrier(StoreClient& client, const std::string& attempt_prefix, const std::string& name,
               int world_size, std::chrono::milliseconds timeout) {
  const std::string key = attempt_prefix + "barrier/" + name;
  DPL_ASSIGN_OR_RETURN(auto arrived, client.Add(key + "/count", 1));
  if (arrived == world_size) DPL_RETURN_IF_ERROR(client.Set(key + "/done", {}));
  Status status = client.Wait({key + "/done"}, timeout);
  if (!status.ok()) {
    auto count = client.Add(key + "/count", 0);
    return status.WithContext("barrier '" + name +
                              "': " + (count.ok() ? std::to_string(*count) : std::string("?")) +
                              " of " + std::to_string(world_size) + " ranks arrived");
  }
  return Status::Ok();
}

Status SumAcrossRanks(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& name, int rank, int world_size,
                      std::vector<double>* values, std::chrono::milliseconds timeout) {
  const std::string key = attempt_prefix + "sum/" + name + "/";
  const size_t bytes = values->size() * sizeof(double);
  std::vector<uint8_t> mine(bytes);
  std::memcpy(mine.data(), values->data(), bytes);
  DPL_RETURN_IF_ERROR(client.Set(key + std::to_string(rank), mine));
  std::vector<double> sums(values->size(), 0.0), theirs(values->size());
  for (int r = 0; r < world_size; ++r) {
    auto value = client.Get(key + std::to_string(r), timeout);
    if (!value.ok()) {
      return value.status().WithContext("summing '" + name + "' over ranks: rank " +
                                        std::to_string(r) + " did not report");
    }
    if (value->size() != bytes) {
      return Status::Error("summing '" + name + "' over ranks: rank " + std::to_string(r) +
                           " reported " + std::to_string(value->size() / sizeof(double)) +
                           " values, this rank " + std::to_string(values->size()));
    }
    std::memcpy(theirs.data(), value->data(), bytes);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += theirs[i];
  }
  *values = std::move(sums);
  return Status::Ok();
}

Status PublishFailure(StoreClient& client, const std::string& attempt_prefix,
                      const std::string& message) {
  DPL_ASSIGN_OR_RETURN(auto order, client.Add(attempt_prefix + "failure/count", 1));
  if (order == 1)
    DPL_RETURN_IF_ERROR(client.Set(attempt_prefix + "failure/message", ToBytes(message)));
  return Status::Ok();
}

Result<std::optional<std::string>> CheckFailure(StoreClient& client,
                                                const std::string& attempt_prefix) {
  DPL_ASSIGN_OR_RETURN(auto count, client.Add(attempt_prefix + "failure/count", 0));
  if (count == 0) return std::optional<std::string>();
  // The first publisher sets the message right after its count; wait a little for it.
  auto message = client.Get(attempt_prefix + "failure/message", std::chrono::seconds(2));
  if (!message.ok()) return std::optional<std::string>("another launcher reported a failure");
  return std::optional<std::string>(FromBytes(*message));
}

}  // namespace dpl::rendezvous
