#include "protocol/loader_report.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace dpl::protocol {
namespace {

constexpr const char* kRefusal = "refused\n";

}  // namespace

std::string EncodeWorkerPids(const std::vector<pid_t>& pids) {
  std::string report;
  for (pid_t pid : pids) report += std::to_string(pid) + " ";
  return report + "\n";
}

std::string EncodeJobRefusal(const std::string& reason) {
  return kRefusal + reason;
}

LoaderReport DecodeLoaderReport(const std::string& text) {
  LoaderReport report;
  const std::string refusal = kRefusal;
  if (text.compare(0, refusal.size(), refusal) == 0) {
    report.refused = true;
    report.reason = text.substr(refusal.size());
    return report;
  }
  std::istringstream list(text);
  for (pid_t pid = 0; list >> pid;) report.pids.push_back(pid);
  return report;
}

std::string EncodeModelCheck(const Status& outcome) {
  return std::to_string(int(outcome.code())) + "\n" + outcome.message();
}

std::optional<Status> DecodeModelCheck(const std::string& text) {
  const size_t end_of_code = text.find('\n');
  if (end_of_code == std::string::npos || end_of_code == 0) return std::nullopt;
  const std::string digits = text.substr(0, end_of_code);
  char* end = nullptr;
  errno = 0;
  const long code = std::strtol(digits.c_str(), &end, 10);
  if (errno != 0 || end != digits.c_str() + digits.size() || code < 0) return std::nullopt;
  if (code == DPL_OK) return Status::Ok();
  return Status::Error(dpl_status(code), text.substr(end_of_code + 1));
}

}  // namespace dpl::protocol
