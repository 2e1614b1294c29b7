// Note [Values in checkpoints]: a checkpoint records the options a resumed run must share as
// text, as the first checkpoints wrote them: integers in decimal, real numbers with six
// significant digits (an ostream's default: "0.5", "1e-05"), choices by their spelling, switches
// as true or false, text as given. A resumed run compares its own text with the recorded one, so
// these texts stay as they are: another spelling would refuse every checkpoint written before.
#include "cli/flag_kinds.hpp"

#include <cstdlib>
#include <sstream>

namespace dpl::cli::table {

std::vector<std::string> Args(const std::string& name, const std::string& value) {
  return {"--" + name, value};
}

Flag Base(const char* name, const char* value_name) {
  Flag flag;
  flag.name = name;
  flag.value_name = value_name;
  return flag;
}

std::string RecordedNumber(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

Flag Unsigned64(const char* name, const char* value_name, Field<uint64_t> field) {
  Flag flag = Base(name, value_name);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseUnsigned64(label, text, &field(parsed->options));
  };
  flag.recorded_value = [=](const Options& o) { return std::to_string(Read(field, o)); };
  flag.forward = [=](const Options& o) { return Args(name, std::to_string(Read(field, o))); };
  return flag;
}

Flag Real(const char* name, const char* value_name, const char* range, bool (*in_range)(double),
          Field<double> field) {
  Flag flag = Base(name, value_name);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseReal(label, text, range, in_range, &field(parsed->options));
  };
  flag.recorded_value = [=](const Options& o) { return RecordedNumber(Read(field, o)); };
  flag.forward = [=](const Options& o) { return Args(name, ExactText(Read(field, o))); };
  return flag;
}

Flag Seconds(const char* name, Field<std::chrono::milliseconds> field) {
  Flag flag = Base(name, "SECONDS");
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseSeconds(label, text, &field(parsed->options));
  };
  flag.forward = [=](const Options& o) {
    return Args(name, ExactText(static_cast<double>(Read(field, o).count()) / 1000.0));
  };
  return flag;
}

Flag Text(const char* name, const char* value_name, EmptyText empty, Field<std::string> field) {
  Flag flag = Base(name, value_name);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (empty == EmptyText::kRefused) return ParseNonEmpty(label, text, &field(parsed->options));
    field(parsed->options) = text;
    return Status::Ok();
  };
  flag.recorded_value = [=](const Options& o) { return Read(field, o); };
  flag.forward = [=](const Options& o) {
    const std::string& value = Read(field, o);
    return value.empty() ? std::vector<std::string>{} : Args(name, value);
  };
  return flag;
}

Flag Switch(const char* name, SwitchSets sets, Field<bool> field) {
  const bool when_given = sets == SwitchSets::kTrue;
  Flag flag = Base(name, "");
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    bool given = false;
    DPL_RETURN_IF_ERROR(ParseBool(label, text, &given));
    if (given) field(parsed->options) = when_given;
    return Status::Ok();
  };
  flag.recorded_value = [=](const Options& o) {
    return std::string(Read(field, o) == when_given ? "true" : "false");
  };
  flag.forward = [=](const Options& o) {
    return Read(field, o) == when_given ? std::vector<std::string>{"--" + std::string(name)}
                                        : std::vector<std::string>{};
  };
  return flag;
}

Flag CommandSwitch(const char* name, bool ParsedFlags::*member) {
  Flag flag = Base(name, "");
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseBool(label, text, &(parsed->*member));
  };
  flag.forward = [](const Options&) { return std::vector<std::string>{}; };
  return flag;
}

Flag NotForwarded(Flag flag) {
  flag.forward = [](const Options&) { return std::vector<std::string>{}; };
  return flag;
}

Flag Internal(Flag flag) {
  flag.internal = true;
  return NotForwarded(std::move(flag));
}

Flag FromEnvironment(Flag flag, const char* variable) {
  flag.environment = [variable]() -> std::optional<std::pair<std::string, std::string>> {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::make_pair(std::string(variable) + " (environment)", std::string(value));
  };
  return flag;
}

Agreement ChangesTheMath() {
  return Agreement{true, true, ""};
}

Agreement SameOnEveryMachine(const char* why_resume_may_differ) {
  return Agreement{true, false, why_resume_may_differ};
}

Agreement MayDiffer(const char* why) {
  return Agreement{false, false, why};
}

void TableRows::operator()(Section section, Agreement agreement, Flag flag,
                           std::string help) const {
  flag.section = section;
  flag.agreement = std::move(agreement);
  flag.help = std::move(help);
  flags_->push_back(std::move(flag));
}

}  // namespace dpl::cli::table
