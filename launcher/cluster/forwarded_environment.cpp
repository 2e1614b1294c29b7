#include "cluster/forwarded_environment.hpp"

#include <algorithm>
#include <iterator>

#include "cluster/remote_command.hpp"

namespace dpl::cluster {
namespace {

std::string NameOf(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

// Letters, digits and '_': the remote shell evaluates the name (an environment may hold others).
bool IsShellName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool Forwarded(const std::string& name) {
  if (name == "DPL_JOB_TOKEN" || name == "DPL_ATTEMPT") return false;
  return std::any_of(std::begin(kForwardedPrefixes), std::end(kForwardedPrefixes),
                     [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
}

}  // namespace

ForwardedEnvironment SelectForwarded(const std::vector<std::string>& environment,
                                     const std::vector<std::string>& given) {
  ForwardedEnvironment forwarded;
  for (const std::string& entry : environment) {
    const std::string name = NameOf(entry);
    const bool overridden = std::any_of(given.begin(), given.end(), [&](const std::string& other) {
      return NameOf(other) == name;
    });
    if (!Forwarded(name) || overridden) continue;
    if (entry.find('\n') != std::string::npos || !IsShellName(name)) {
      forwarded.left_out.push_back(name);
    } else {
      forwarded.entries.push_back(entry);
    }
  }
  forwarded.entries.insert(forwarded.entries.end(), given.begin(), given.end());
  return forwarded;
}

std::string EnvironmentLines(const std::vector<std::string>& entries) {
  std::string lines;
  for (const std::string& entry : entries) {
    const size_t equals = entry.find('=');
    lines += entry.substr(0, equals) + "=" + ShellQuote(entry.substr(equals + 1)) + "\n";
  }
  return lines + "\n";
}

std::string VariableNames(const std::vector<std::string>& entries) {
  std::string names;
  for (const std::string& entry : entries) names += (names.empty() ? "" : ", ") + NameOf(entry);
  return names;
}

}  // namespace dpl::cluster
