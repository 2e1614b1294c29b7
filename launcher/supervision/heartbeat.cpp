#include "supervision/heartbeat.hpp"

#include <utility>

namespace dpl::supervision {
namespace {

// Added to a counter when its machine finished the attempt: no beat count comes near it.
constexpr int64_t kFinishedMark = int64_t{1} << 48;

std::string HeartbeatKey(const std::string& attempt_prefix, int machine_id) {
  return attempt_prefix + "heartbeat/" + std::to_string(machine_id);
}

std::string LostKey(const std::string& attempt_prefix, int machine_id) {
  return attempt_prefix + "lost/" + std::to_string(machine_id);
}

}  // namespace

Heartbeat::Heartbeat(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                     int machine_id)
    : client_(client),
      key_(HeartbeatKey(attempt_prefix, machine_id)),
      beat_(client, key_, kHeartbeatInterval) {}

Heartbeat::~Heartbeat() = default;

void Heartbeat::Finish() {
  beat_.Stop();
  if (finished_) return;
  finished_ = true;
  (void)client_.Add(key_, kFinishedMark);
}

Result<std::vector<int64_t>> ReadHeartbeats(rendezvous::StoreClient& client,
                                            const std::string& attempt_prefix,
                                            const rendezvous::JobShape& shape) {
  std::vector<int64_t> counters;
  for (int machine = 0; machine < shape.num_machines; ++machine) {
    DPL_ASSIGN_OR_RETURN(auto counter, client.Add(HeartbeatKey(attempt_prefix, machine), 0));
    counters.push_back(counter);
  }
  return counters;
}

std::vector<int> SilentMachines(const std::vector<int64_t>& before,
                                const std::vector<int64_t>& after, int this_machine) {
  std::vector<int> silent;
  for (size_t machine = 0; machine < before.size() && machine < after.size(); ++machine) {
    // A machine that never beat has not started this attempt: late, not vanished.
    const bool was_beating = before[machine] > 0 && before[machine] < kFinishedMark;
    if (static_cast<int>(machine) != this_machine && was_beating &&
        after[machine] == before[machine]) {
      silent.push_back(static_cast<int>(machine));
    }
  }
  return silent;
}

MachineWatch::MachineWatch(rendezvous::StoreClient& client, std::string attempt_prefix,
                           const rendezvous::JobShape& shape, Joining joining)
    : client_(client), prefix_(std::move(attempt_prefix)), joining_(joining) {
  if (shape.machine_id != 0) {
    watched_.push_back(0);
    return;
  }
  for (int machine = 1; machine < shape.num_machines; ++machine) watched_.push_back(machine);
}

Result<std::vector<int>> MachineWatch::Lost(std::chrono::milliseconds silence) {
  std::vector<int> lost;
  const auto now = Clock::now();
  for (int machine : watched_) {
    DPL_ASSIGN_OR_RETURN(auto beats, client_.Add(HeartbeatKey(prefix_, machine), 0));
    auto seen = seen_.find(machine);
    if (seen == seen_.end() || seen->second.beats != beats) {
      seen_[machine] = {beats, now};
      continue;
    }
    // A machine that never beat has not started this attempt: late, and lost only when it stays
    // so for much longer than a start takes after it joined.
    if (beats == 0 && joining_ == Joining::kByClaimedId &&
        rendezvous::MachineName(client_, machine).empty()) {
      seen->second.changed = now;
      continue;
    }
    const bool beating = beats > 0 && beats < kFinishedMark;
    const auto quiet = now - seen->second.changed;
    if ((beating && quiet >= silence) || (beats == 0 && quiet >= kMachineNeverBegan)) {
      lost.push_back(machine);
    }
  }
  return lost;
}

bool MachineWatch::NeverBegan(int machine) const {
  const auto seen = seen_.find(machine);
  return seen != seen_.end() && seen->second.beats == 0;
}

Status RecordLostMachines(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                          const std::vector<int>& machines) {
  for (int machine : machines) {
    DPL_RETURN_IF_ERROR(client.Add(LostKey(attempt_prefix, machine), 1).status());
  }
  return Status::Ok();
}

std::vector<int> ReadLostMachines(rendezvous::StoreClient& client,
                                  const std::string& attempt_prefix, int num_machines) {
  std::vector<int> lost;
  for (int machine = 0; machine < num_machines; ++machine) {
    auto marks = client.Add(LostKey(attempt_prefix, machine), 0);
    if (marks.ok() && *marks > 0) lost.push_back(machine);
  }
  return lost;
}

void WaitForOtherMachinesToEnd(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                               const rendezvous::JobShape& shape,
                               std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::vector<int64_t> previous;
  std::vector<Clock::time_point> last_beat(static_cast<size_t>(shape.num_machines), start);
  while (Clock::now() - start < timeout) {
    auto counters = ReadHeartbeats(client, attempt_prefix, shape);
    if (!counters.ok()) return;  // nothing to wait for without the store
    const auto now = Clock::now();
    bool waiting = false;
    for (size_t machine = 0; machine < counters->size(); ++machine) {
      const int64_t beats = (*counters)[machine];
      if (static_cast<int>(machine) == shape.machine_id || beats == 0 || beats >= kFinishedMark) {
        continue;
      }
      if (!previous.empty() && beats != previous[machine]) last_beat[machine] = now;
      if (now - last_beat[machine] < kHeartbeatSilence) waiting = true;
    }
    if (!waiting) return;
    previous = std::move(*counters);
    std::this_thread::sleep_for(kHeartbeatInterval / 5);
  }
}

}  // namespace dpl::supervision
