#include "supervision/program_master.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cluster/machine_ids.hpp"
#include "rendezvous/join.hpp"
#include "supervision/stop_signals.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

constexpr const char* kMasterKey = "program_master";
constexpr const char* kRunIdKey = "job/program_run_id";
constexpr const char* kRunIdClaimKey = "job/program_run_id_claims";
constexpr auto kReadPollInterval = 200ms;
constexpr int kRunIdBytes = 8;

Result<std::string> NewRunId() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[kRunIdBytes];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
    return Status::Io("cannot read /dev/urandom for the job's run id");
  }
  std::string id = "dpl-";
  char hex[3];
  for (unsigned char byte : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", byte);
    id += hex;
  }
  return id;
}

// The job's run id: made by the first launcher that asks, read by the others.
Result<std::string> JobRunId(rendezvous::StoreClient& client, std::chrono::milliseconds timeout) {
  DPL_ASSIGN_OR_RETURN(auto claims, client.Add(kRunIdClaimKey, 1));
  if (claims > 1) {
    DPL_ASSIGN_OR_RETURN(auto id, client.Get(kRunIdKey, timeout));
    return rendezvous::FromBytes(id);
  }
  DPL_ASSIGN_OR_RETURN(auto id, NewRunId());
  DPL_RETURN_IF_ERROR(client.Set(kRunIdKey, rendezvous::ToBytes(id)));
  return id;
}

// The address by which the other machines reach this one: the job's --master-addr on its own
// machine, else (another machine became the attempt's first) this one's towards it.
Result<std::string> ThisMachinesAddress(const std::string& master_addr) {
  DPL_ASSIGN_OR_RETURN(auto local, cluster::IsLocalAddress(master_addr));
  if (local) return master_addr;
  std::string address = cluster::SourceAddressTowards(master_addr);
  if (address.empty()) {
    return Status::Error("no address of this machine routes to --master-addr " + master_addr +
                         ", so the program's rank 0 cannot be named to the other machines");
  }
  return address;
}

}  // namespace

Result<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(std::string("cannot open a socket: ") + strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof address;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const std::string reason = bound ? "" : strerror(errno);
  close(fd);
  if (!bound) return Status::Error("cannot find a free port for the program's rank 0: " + reason);
  return static_cast<int>(ntohs(address.sin_port));
}

Result<ProgramMaster> PublishProgramMaster(rendezvous::StoreClient& client,
                                           const std::string& attempt_prefix,
                                           const std::string& master_addr) {
  ProgramMaster master;
  DPL_ASSIGN_OR_RETURN(master.addr, ThisMachinesAddress(master_addr));
  DPL_ASSIGN_OR_RETURN(auto port, PickFreePort());
  master.port = port;
  DPL_ASSIGN_OR_RETURN(auto run_id, JobRunId(client, rendezvous::kDefaultCallTimeout));
  master.run_id = run_id;
  const std::string fields =
      rendezvous::EncodeFields({master.addr, std::to_string(master.port), master.run_id});
  DPL_RETURN_IF_ERROR(client.Set(attempt_prefix + kMasterKey, rendezvous::ToBytes(fields)));
  return master;
}

Result<ProgramMaster> ReadProgramMaster(rendezvous::StoreClient& client,
                                        const std::string& attempt_prefix,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto value = client.Get(attempt_prefix + kMasterKey, kReadPollInterval);
    if (value.ok()) {
      auto fields = rendezvous::DecodeFields(rendezvous::FromBytes(*value));
      if (!fields.ok() || fields->size() != 3) {
        return Status::Error("machine 0 published no valid address for the program's rank 0");
      }
      return ProgramMaster{(*fields)[0], std::stoi((*fields)[1]), (*fields)[2]};
    }
    if (!value.status().IsTimeout()) return value.status();
    if (StopSignal() != 0) {
      return Status::Error("the launcher was stopped by signal " + SignalName(StopSignal()) +
                           " while it waited for machine 0 to name the program's rank 0");
    }
    DPL_ASSIGN_OR_RETURN(auto failure, rendezvous::CheckFailure(client, attempt_prefix));
    if (failure.has_value()) return Status::Error("the job failed elsewhere: " + *failure);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout("machine 0 did not name the program's rank 0 within " +
                             std::to_string(timeout.count() / 1000) + " s (--rendezvous-timeout)");
    }
  }
}

}  // namespace dpl::supervision
