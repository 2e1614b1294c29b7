#include "protocol/worker_command.hpp"

namespace dpl::protocol {
namespace {

std::string Dashed(const char* flag) {
  return std::string("--") + flag;
}

std::vector<std::string> Command(const char* role_flag, const std::string& role_value,
                                 const std::string& store_addr,
                                 const std::vector<std::string>& job_flags) {
  std::vector<std::string> command = {kSelfExecutable, Dashed(kWorkerFlag),    Dashed(role_flag),
                                      role_value,      Dashed(kStoreAddrFlag), store_addr};
  command.insert(command.end(), job_flags.begin(), job_flags.end());
  return command;
}

}  // namespace

std::vector<std::string> WorkerCommand(const std::vector<std::string>& job_flags, int local_rank,
                                       const std::string& store_addr) {
  return Command(kLocalRankFlag, std::to_string(local_rank), store_addr, job_flags);
}

std::vector<std::string> WorkerLoaderCommand(const std::vector<std::string>& job_flags,
                                             const std::vector<int>& output_fds,
                                             const std::string& store_addr) {
  std::string list;
  for (int fd : output_fds) list += (list.empty() ? "" : ",") + std::to_string(fd);
  return Command(kWorkerOutputsFlag, list, store_addr, job_flags);
}

}  // namespace dpl::protocol
