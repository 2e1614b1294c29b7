// What environment.cpp (Slurm) and torchrun_environment.cpp (torchrun, Kubernetes) share to read
// the variables of a cluster's environment. Internal to cluster/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cluster/decimal.hpp"
#include "cluster/environment.hpp"
#include "common/status.hpp"

namespace dpl::cluster::detail {

// Far above any job; the command line holds its limits.
inline constexpr int64_t kMaxCount = 1 << 20;
inline constexpr int kMaxPort = 65535;

// A variable that was set, with its value as a number.
struct Found {
  std::string name;
  int64_t value = 0;
  std::string Show() const { return name + "=" + std::to_string(value); }
};

class Variables {
 public:
  explicit Variables(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> Text(const std::string& name) const {
    std::optional<std::string> value = lookup_(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  }
  bool Has(const std::string& name) const { return Text(name).has_value(); }

  // `name` as a whole number in [min, max]; nothing when unset.
  Result<std::optional<Found>> Number(const std::string& name, int64_t min, int64_t max) const {
    const std::optional<std::string> text = Text(name);
    if (!text) return std::optional<Found>();
    const auto value = ParseDecimal(*text, max);
    if (!value || *value < min) {
      return Status::InvalidArgument(name + "='" + *text + "' in the environment is not a whole " +
                                     "number from " + std::to_string(min) + " to " +
                                     std::to_string(max));
    }
    return std::optional<Found>(Found{name, *value});
  }

  // The first of `names` that is set.
  Result<std::optional<Found>> FirstNumber(const std::vector<std::string>& names, int64_t min,
                                           int64_t max) const {
    for (const std::string& name : names) {
      auto found = Number(name, min, max);
      if (!found.ok() || found->has_value()) return found;
    }
    return std::optional<Found>();
  }

  // Every one of `names` that is set; they must all have the same value.
  Result<std::optional<Found>> AgreeingNumber(const std::vector<std::string>& names, int64_t min,
                                              int64_t max, const std::string& what) const {
    std::optional<Found> first;
    for (const std::string& name : names) {
      DPL_ASSIGN_OR_RETURN(auto found, Number(name, min, max));
      if (!found.has_value()) continue;
      if (first && first->value != found->value) {
        return Status::InvalidArgument(first->Show() + " and " + found->Show() +
                                       " in the environment disagree about " + what +
                                       "; unset one or make them equal");
      }
      if (!first) first = found;
    }
    return first;
  }

 private:
  const EnvironmentLookup& lookup_;
};

inline std::string JoinParts(const std::vector<std::string>& parts) {
  std::string line;
  for (const std::string& part : parts) line += (line.empty() ? "" : ", ") + part;
  return line;
}

inline std::optional<std::string> ReadMasterAddr(const Variables& variables) {
  return variables.Text("MASTER_ADDR");
}

inline Result<std::optional<Found>> ReadMasterPort(const Variables& variables) {
  return variables.Number("MASTER_PORT", 0, kMaxPort);
}

// Whether any variable of torchrun or Kubeflow's PyTorchJob is set.
bool HasTorchrunVariables(const Variables& variables);
// Note [torchrun and Kubernetes environment] in torchrun_environment.cpp.
Result<ClusterEnvironment> ReadTorchrun(const Variables& variables);

}  // namespace dpl::cluster::detail
