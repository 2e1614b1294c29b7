// The flag table (flags.hpp): its rows, group by group, and what is derived from the rows'
// agreements (Note [Flags that must agree]).
#include "cli/flags.hpp"

#include "cli/flag_kinds.hpp"

namespace dpl::cli {
namespace {

// In the order values are applied (flags.hpp); --help lists them in this order too.
std::vector<Flag> BuildFlagTable() {
  std::vector<Flag> flags;
  const table::TableRows rows(&flags);
  table::AddPluginFlags(rows);
  table::AddJobFlags(rows);
  table::AddTrainingFlags(rows);
  table::AddOutputFlags(rows);
  table::AddCommandFlags(rows);
  table::AddProgramFlags(rows);
  return flags;
}

}  // namespace

const std::vector<Flag>& FlagTable() {
  static const std::vector<Flag> table = BuildFlagTable();
  return table;
}

std::string CanonicalFlagName(const std::string& name) {
  std::string canonical = name;
  for (char& c : canonical) c = c == '_' ? '-' : c;
  return canonical;
}

const Flag* FindFlag(const std::string& name) {
  const std::string canonical = CanonicalFlagName(name);
  for (const Flag& flag : FlagTable()) {
    if (flag.name == canonical) return &flag;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> SettingsThatMustMatch(const Options& options) {
  std::vector<std::pair<std::string, std::string>> settings;
  for (const Flag& flag : FlagTable()) {
    if (!flag.MustMatchAcrossMachines()) continue;
    const std::vector<std::string> arguments = flag.forward(options);
    std::string value;
    if (flag.compared_value) {
      value = flag.compared_value(options);
    } else if (flag.value_name.empty()) {
      value = arguments.empty() ? "off" : "on";
    } else if (arguments.size() < 2) {
      value = "(none)";
    } else {
      for (size_t i = 1; i < arguments.size(); ++i) value += (i > 1 ? " " : "") + arguments[i];
    }
    settings.emplace_back("--" + flag.name, value);
  }
  return settings;
}

std::vector<training::ResumeSetting> ResumeSettings(const Options& options) {
  static const Options defaults;
  std::vector<training::ResumeSetting> settings;
  for (const Flag& flag : FlagTable()) {
    if (!flag.MustMatchOnResume()) continue;
    settings.push_back(
        {"--" + flag.name, flag.recorded_value(options), flag.recorded_value(defaults)});
  }
  return settings;
}

}  // namespace dpl::cli
