#include "rendezvous/membership.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "common/log.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/liveness.hpp"
#include "rendezvous/store_beat.hpp"

// Note [Elastic membership]
// Attempt n of an elastic job runs on the launchers its coordinator lets in (the lowest live
// launcher, machine 0 while it lives: Note [Attempt coordinator] in liveness.cpp):
// - Every launcher but the coordinator takes a slot of the attempt ("attempt/<n>/members/count",
//   a counter), writes who it is into "attempt/<n>/members/slot/<s>", and waits for the list
//   ("attempt/<n>/members/list") that the coordinator writes once; its slot is in the list or not.
// - The coordinator writes the list when MAX machines are in, or when at least MIN are, every
//   member of the attempt before whose launcher still beats has come back (it may still be
//   stopping its workers), and none came for --join-grace. Launchers past MAX, and those that
//   come after the list was written, take part in the next attempt: a machine that starts late
//   joins at the next restart, and one that left is simply not waited for (nor one the attempt
//   before found vanished).
// - The coordinator is always first, so it keeps ranks 0..P-1 (rank 0 writes the checkpoints).
//   With the built-in store the job cannot outlive machine 0: its store is the job's.
// - Each launcher beats in "job/alive/<id>" every kHeartbeatInterval from a thread and connection
//   of its own; one whose beat did not move for kMemberLease has left (killed, machine down).
// - "job/end" (a counter and a message) releases every launcher that waits for an attempt when
//   the job is over, with success or with the failure that ended it. Each such launcher counts
//   itself in "job/end/seen", and the coordinator keeps the store up until all that took a slot
//   of the attempt they wait for have (or kEndSeenWait passed): a machine beyond MAX would
//   otherwise find the store gone between two looks and fail a job that succeeded.

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = 50ms;
constexpr auto kListWait = 200ms;     // a member looks at the job's end this often
constexpr auto kSlotWait = 2s;        // a launcher writes its slot right after it takes it
constexpr auto kEndMessageWait = 2s;  // machine 0 writes the message right after the count
constexpr const char* kJobEndMessage = "job/end/message";
constexpr const char* kJobEndSeen = "job/end/seen";
constexpr auto kEndSeenWait = 2s;  // a waiting launcher looks every kListWait

std::string MembersPrefix(int attempt) {
  return AttemptPrefix(attempt) + "members/";
}

std::string SecondsText(std::chrono::milliseconds duration) {
  const double seconds = static_cast<double>(duration.count()) / 1000.0;
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  return text;
}

// A member in a slot of an attempt; slot -1 is machine 0's.
struct Slot {
  int slot = -1;
  Member member;
};

std::string EncodeSlot(const Slot& slot) {
  return EncodeFields(
      {std::to_string(slot.slot), std::to_string(slot.member.machine_id), slot.member.name});
}

Result<Slot> DecodeSlot(const std::string& text) {
  auto fields = DecodeFields(text);
  if (!fields.ok() || fields->size() != 3) {
    return Status::Error("malformed member of an elastic attempt in the store");
  }
  Slot slot;
  slot.slot = std::atoi((*fields)[0].c_str());
  slot.member.machine_id = std::atoi((*fields)[1].c_str());
  slot.member.name = (*fields)[2];
  return slot;
}

Result<std::optional<std::string>> JobEnd(StoreClient& client) {
  DPL_ASSIGN_OR_RETURN(auto count, client.Add(kJobEndKey, 0));
  if (count == 0) return std::optional<std::string>();
  auto message = client.Get(kJobEndMessage, kEndMessageWait);
  if (!message.ok()) return std::optional<std::string>("the job ended");
  return std::optional<std::string>(FromBytes(*message));
}

bool Contains(const std::vector<Slot>& joined, int machine_id) {
  return std::any_of(joined.begin(), joined.end(),
                     [&](const Slot& slot) { return slot.member.machine_id == machine_id; });
}

// The slots taken since the last look, appended to `joined`; true when there were any.
Result<bool> ReadNewSlots(StoreClient& client, const std::string& prefix,
                          std::vector<Slot>* joined) {
  DPL_ASSIGN_OR_RETURN(auto count, client.Add(prefix + "count", 0));
  const bool any = static_cast<int64_t>(joined->size()) < count;
  while (static_cast<int64_t>(joined->size()) < count) {
    const int slot = static_cast<int>(joined->size());
    auto text = client.Get(prefix + "slot/" + std::to_string(slot), kSlotWait);
    DPL_ASSIGN_OR_RETURN(Slot decoded,
                         text.ok() ? DecodeSlot(FromBytes(*text)) : Result<Slot>(Slot{}));
    if (!text.ok()) decoded.member.machine_id = -1;  // its launcher died right after joining
    decoded.slot = slot;
    joined->push_back(decoded);
  }
  return any;
}

// Members of the attempt before that have not joined this one but whose launchers still beat.
Result<int> AwaitedMembers(StoreClient& client, const AttemptJoin& join,
                           const std::vector<Slot>& joined, LivenessWatch& watch) {
  int awaited = 0;
  for (const Member& member : join.previous) {
    if (member.machine_id == join.self.machine_id || Contains(joined, member.machine_id)) continue;
    DPL_ASSIGN_OR_RETURN(auto alive, watch.Alive(client, member.machine_id));
    awaited += alive ? 1 : 0;
  }
  return awaited;
}

// The machines in `joined` besides the coordinator itself (which may have taken a slot before it
// claimed the attempt).
bool Present(const Slot& slot, const Member& self) {
  return slot.member.machine_id >= 0 && slot.member.machine_id != self.machine_id;
}

// The coordinator first, then the joined slots, up to max_machines; written for the others.
Result<Attempt> CloseAttempt(StoreClient& client, const std::string& prefix, const Member& self,
                             const std::vector<Slot>& joined, int max_machines) {
  Attempt result;
  result.index = 0;
  result.members.push_back(self);
  std::vector<std::string> list = {EncodeSlot({-1, self})};
  for (const Slot& slot : joined) {
    if (!Present(slot, self)) continue;
    if (static_cast<int>(result.members.size()) >= max_machines) break;
    result.members.push_back(slot.member);
    list.push_back(EncodeSlot(slot));
  }
  DPL_RETURN_IF_ERROR(client.Set(prefix + "list", ToBytes(EncodeFields(list))));
  return result;
}

std::string TooFewMachines(int present, int attempt, const ElasticOptions& options) {
  return "only " + std::to_string(present) + " of the at least " +
         std::to_string(options.min_machines) + " machines (--num-machines " +
         std::to_string(options.min_machines) + ":" + std::to_string(options.max_machines) +
         ") joined attempt " + std::to_string(attempt) + " within " + SecondsText(options.timeout) +
         " s (--rendezvous-timeout)";
}

// Note [Refused launchers] (join.hpp): the coordinator warns of each refusal as it comes (a
// look a second), and names them again if too few machines came.
class RefusalWatch {
 public:
  explicit RefusalWatch(StoreClient& client) : client_(client) {}
  void Poll() {
    if (Clock::now() < next_look_) return;
    next_look_ = Clock::now() + kRefusalLook;
    auto refusals = ReadRefusals(client_, next_, &next_);
    if (!refusals.ok()) return;  // the store's trouble shows in the next call that needs it
    for (const std::string& refusal : *refusals) {
      log::Warning(refusal);
      said_ += (said_.empty() ? "; " : ", ") + refusal;
    }
  }
  const std::string& Said() const { return said_; }

 private:
  static constexpr auto kRefusalLook = std::chrono::seconds(1);
  StoreClient& client_;
  int64_t next_ = 0;
  Clock::time_point next_look_ = Clock::now();
  std::string said_;
};

// The coordinator's side (Note [Elastic membership]).
Result<Attempt> CoordinateAttempt(StoreClient& client, const AttemptJoin& join,
                                  LivenessWatch& watch, const ElasticOptions& options) {
  const std::string prefix = MembersPrefix(join.attempt);
  const auto deadline = Clock::now() + options.timeout;
  std::vector<Slot> joined;  // every slot taken so far; machine_id -1 for one never written
  auto last_change = Clock::now();
  RefusalWatch refusals(client);
  for (;;) {
    if (options.stop_requested && options.stop_requested()) {
      return Status::Error("stopped while machines joined attempt " + std::to_string(join.attempt));
    }
    refusals.Poll();
    DPL_ASSIGN_OR_RETURN(auto came, ReadNewSlots(client, prefix, &joined));
    if (came) last_change = Clock::now();
    int present = 1;  // the coordinator
    for (const Slot& slot : joined) present += Present(slot, join.self) ? 1 : 0;
    DPL_ASSIGN_OR_RETURN(auto awaited, AwaitedMembers(client, join, joined, watch));
    const bool quiet = Clock::now() - last_change >= options.join_grace;
    if (present >= options.max_machines ||
        (present >= options.min_machines && awaited == 0 && quiet)) {
      return CloseAttempt(client, prefix, join.self, joined, options.max_machines);
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout(TooFewMachines(present, join.attempt, options) + refusals.Said());
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// This launcher's place in the list the coordinator wrote, if it is there.
Result<Attempt> ReadList(const std::string& list, int slot) {
  DPL_ASSIGN_OR_RETURN(auto entries, DecodeFields(list));
  Attempt result;
  result.outcome = Attempt::Outcome::kLeftOut;
  for (const std::string& entry : entries) {
    DPL_ASSIGN_OR_RETURN(auto member, DecodeSlot(entry));
    if (member.slot == slot) {
      result.outcome = Attempt::Outcome::kMember;
      result.index = static_cast<int>(result.members.size());
    }
    result.members.push_back(member.member);
  }
  return result;
}

Attempt Outcome(Attempt::Outcome outcome, std::string job_end = "") {
  Attempt result;
  result.outcome = outcome;
  result.job_end = std::move(job_end);
  return result;
}

// Every launcher's side: a slot, then the list, unless this launcher becomes the coordinator
// (Note [Attempt coordinator]) or the job ends.
Result<Attempt> AwaitAttempt(StoreClient& client, const AttemptJoin& join,
                             const ElasticOptions& options, bool* coordinating) {
  const std::string prefix = MembersPrefix(join.attempt);
  LivenessWatch watch(kMemberLease, join.gone);
  CoordinatorElection election(client, prefix, join.self.machine_id, watch);
  const bool first = join.self.machine_id == 0;  // claims before taking a slot
  int slot = -1;
  for (;;) {
    if (options.stop_requested && options.stop_requested()) {
      return Status::Error("stopped while waiting to join attempt " + std::to_string(join.attempt));
    }
    if (first || slot >= 0) {
      DPL_ASSIGN_OR_RETURN(auto turn, election.Poll());
      if (turn == CoordinatorElection::Turn::kCoordinate) {
        *coordinating = true;
        return CoordinateAttempt(client, join, watch, options);
      }
      if (turn == CoordinatorElection::Turn::kCoordinatorVanished) {
        return Outcome(Attempt::Outcome::kAbandoned);
      }
    }
    if (slot < 0) {
      DPL_ASSIGN_OR_RETURN(auto taken, client.Add(prefix + "count", 1));
      slot = static_cast<int>(taken - 1);
      DPL_RETURN_IF_ERROR(client.Set(prefix + "slot/" + std::to_string(slot),
                                     ToBytes(EncodeSlot({slot, join.self}))));
    }
    auto list = client.Get(prefix + "list", kListWait);
    if (list.ok()) return ReadList(FromBytes(*list), slot);
    if (!list.status().IsTimeout()) return list.status();
    DPL_ASSIGN_OR_RETURN(auto end, JobEnd(client));
    if (end.has_value()) {
      (void)client.Add(kJobEndSeen, 1);
      return Outcome(Attempt::Outcome::kJobEnded, *end);
    }
  }
}

// The beat with a connection of its own, so a long call of the launcher's never delays it.
class HeartbeatThread : public Heartbeat {
 public:
  HeartbeatThread(std::unique_ptr<StoreClient> client, int machine_id)
      : client_(std::move(client)), beat_(*client_, AliveKey(machine_id), kHeartbeatInterval) {}

 private:
  std::unique_ptr<StoreClient> client_;
  StoreBeat beat_;  // after client_: stopped before the connection closes
};

}  // namespace

Result<Attempt> JoinAttempt(StoreClient& client, const AttemptJoin& join,
                            const ElasticOptions& options, bool* coordinating) {
  bool claimed = false;
  Result<Attempt> result = AwaitAttempt(client, join, options, &claimed);
  if (coordinating != nullptr) *coordinating = claimed;
  return result;
}

Result<Attempt> JoinAttempt(StoreClient& client, int attempt, const Member& self,
                            const std::vector<Member>& previous, const ElasticOptions& options) {
  return JoinAttempt(client, AttemptJoin{attempt, self, previous, {}}, options);
}

Result<bool> MachinesWaiting(StoreClient& client, int attempt) {
  DPL_ASSIGN_OR_RETURN(const int64_t count, client.Add(MembersPrefix(attempt) + "count", 0));
  return count > 0;
}

Status EndElasticJob(StoreClient& client, const std::string& failure, int waiting_attempt) {
  DPL_ASSIGN_OR_RETURN(auto order, client.Add(kJobEndKey, 1));
  if (order != 1) return Status::Ok();
  DPL_RETURN_IF_ERROR(client.Set(kJobEndMessage, ToBytes(failure)));
  const auto deadline = Clock::now() + kEndSeenWait;
  while (Clock::now() < deadline) {
    DPL_ASSIGN_OR_RETURN(auto waiting, client.Add(MembersPrefix(waiting_attempt) + "count", 0));
    DPL_ASSIGN_OR_RETURN(auto seen, client.Add(kJobEndSeen, 0));
    if (seen >= waiting) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  return Status::Ok();
}

std::string DescribeMembershipChange(const std::vector<Member>& before,
                                     const std::vector<Member>& now) {
  auto has = [](const std::vector<Member>& members, int id) {
    return std::any_of(members.begin(), members.end(),
                       [&](const Member& member) { return member.machine_id == id; });
  };
  std::string change;
  auto add = [&](const Member& member, const char* what) {
    change += (change.empty() ? "" : "; ") + std::string("machine ") +
              std::to_string(member.machine_id) + " (" + member.name + ") " + what;
  };
  for (const Member& member : before) {
    if (!has(now, member.machine_id)) add(member, "left");
  }
  for (const Member& member : now) {
    if (!has(before, member.machine_id)) add(member, "joined");
  }
  return change;
}

Result<std::unique_ptr<Heartbeat>> Heartbeat::Start(const StoreClientOptions& options,
                                                    int machine_id) {
  // With etcd, the beat is this launcher's alone: it vanishes with it (Note [Leases of the etcd
  // store] in etcd_store.cpp).
  StoreClientOptions own = options;
  own.key_lifetime = KeyLifetime::kClient;
  DPL_ASSIGN_OR_RETURN(auto client, StoreClient::Connect(own));
  return std::unique_ptr<Heartbeat>(new HeartbeatThread(std::move(client), machine_id));
}

}  // namespace dpl::rendezvous
