#include "protocol/program_environment.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace dpl::protocol {
namespace {

constexpr const char* kTorchElasticPrefix = "TORCHELASTIC_";
constexpr const char* kThreadsVariable = "OMP_NUM_THREADS";
// torch 2 reads the first name (torchrun sets it), torch 1.13 the second.
constexpr const char* kNcclErrorHandling[] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                              "NCCL_ASYNC_ERROR_HANDLING"};

std::string NameOf(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

bool Named(const std::vector<std::string>& entries, const std::string& name) {
  return FindVariable(entries, name) != nullptr;
}

// The variables of `place` that this file sets, in torchrun's order.
std::vector<std::pair<const char*, std::string>> PlaceVariables(const ProgramWorkerPlace& place) {
  const int world_size = place.num_machines * place.processes_per_machine;
  return {
      {"LOCAL_RANK", std::to_string(place.local_rank)},
      {"RANK", std::to_string(place.rank)},
      {"GROUP_RANK", std::to_string(place.machine)},
      {"ROLE_RANK", std::to_string(place.rank)},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", std::to_string(place.processes_per_machine)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"GROUP_WORLD_SIZE", std::to_string(place.num_machines)},
      {"ROLE_WORLD_SIZE", std::to_string(world_size)},
      {"MASTER_ADDR", place.master_addr},
      {"MASTER_PORT", std::to_string(place.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(place.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(place.max_restarts)},
      {"TORCHELASTIC_RUN_ID", place.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {kThreadsVariable, std::to_string(place.threads)},
  };
}

}  // namespace

bool IsTorchrunWorkerVariable(const std::string& name) {
  return std::find(std::begin(kTorchrunWorkerVariables), std::end(kTorchrunWorkerVariables),
                   name) != std::end(kTorchrunWorkerVariables);
}

const char* FindVariable(const std::vector<std::string>& entries, const std::string& name) {
  for (const std::string& entry : entries) {
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
        entry[name.size()] == '=') {
      return entry.c_str() + name.size() + 1;
    }
  }
  return nullptr;
}

std::vector<std::string> ProgramEnvironment(const std::vector<std::string>& inherited,
                                            const std::vector<std::string>& given,
                                            const ProgramWorkerPlace& place) {
  const auto variables = PlaceVariables(place);
  const auto set_here = [&](const std::string& name) {
    if (name.rfind(kTorchElasticPrefix, 0) == 0 || IsTorchrunWorkerVariable(name)) return true;
    return std::any_of(variables.begin(), variables.end(),
                       [&](const auto& variable) { return name == variable.first; });
  };
  std::vector<std::string> environment;
  for (const std::string& entry : inherited) {
    const std::string name = NameOf(entry);
    if (!set_here(name) && !Named(given, name)) environment.push_back(entry);
  }
  for (const std::string& entry : given) {
    if (!set_here(NameOf(entry))) environment.push_back(entry);
  }
  // Each name the user left unset takes the value given to the other (the new name's first),
  // else 1: both torches then handle NCCL's errors alike.
  std::string error_handling = "1";
  for (const char* name : kNcclErrorHandling) {
    if (const char* value = FindVariable(environment, name)) {
      error_handling = value;
      break;
    }
  }
  for (const char* name : kNcclErrorHandling) {
    if (!Named(environment, name)) environment.push_back(std::string(name) + "=" + error_handling);
  }
  for (const auto& [name, value] : variables)
    environment.push_back(std::string(name) + "=" + value);
  return environment;
}

}  // namespace dpl::protocol
