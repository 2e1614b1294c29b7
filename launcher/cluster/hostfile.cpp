#include "cluster/hostfile.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "cluster/decimal.hpp"

// Note [Hostfile]
// As DeepSpeed's launcher reads it (deepspeed/launcher/runner.py, _parse_hostfile): each line is
// stripped; an empty line or one starting with '#' is skipped; any other must be
// `HOST slots=N`, the host and "slots=" apart by whitespace. A host listed twice, a line without
// slots= (DeepSpeed has no default: it is "a bad entry") and a file without any host are refused.
// Stricter than DeepSpeed, whose pattern only anchors the line's start: N must be at least 1
// (DeepSpeed takes slots=0), and after it only whitespace or a '#' comment may follow (DeepSpeed
// ignores whatever follows, so "slots=4x" would be 4).

namespace dpl::cluster {
namespace {

constexpr int64_t kMaxSlots = 1 << 20;  // far above any machine; the command line holds its limit
constexpr const char* kSlotsKey = "slots=";

std::vector<std::string> SplitWhitespace(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

}  // namespace

Result<std::vector<HostSlots>> ParseHostfile(const std::string& text,
                                             const std::string& file_name) {
  std::vector<HostSlots> hosts;
  std::map<std::string, int> first_line;  // host -> the line it was listed on
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    auto error = [&](const std::string& what) {
      return Status::InvalidArgument("hostfile '" + file_name + "', line " +
                                     std::to_string(number) + ": " + what);
    };
    const std::vector<std::string> words = SplitWhitespace(line.substr(0, line.find('#')));
    if (words.empty()) continue;
    const std::string& host = words[0];
    if (words.size() == 1) {
      return error("'" + host + "' has no slots; write '" + host +
                   " slots=N' with N its processes");
    }
    if (words[1].rfind(kSlotsKey, 0) != 0) {
      return error("expected 'HOST slots=N', got '" + words[1] + "' after '" + host + "'");
    }
    const std::string slots_text = words[1].substr(std::strlen(kSlotsKey));
    const auto slots = ParseDecimal(slots_text, kMaxSlots);
    if (!slots || *slots < 1) {
      return error("slots of '" + host + "' must be a whole number from 1 to " +
                   std::to_string(kMaxSlots) + " (got '" + slots_text + "')");
    }
    if (words.size() > 2) {
      return error("unexpected '" + words[2] + "' after '" + words[1] +
                   "'; a comment starts with '#'");
    }
    if (const auto seen = first_line.find(host); seen != first_line.end()) {
      return error("'" + host + "' is listed again (first on line " + std::to_string(seen->second) +
                   "); give each host once, with all its slots");
    }
    first_line.emplace(host, number);
    hosts.push_back(HostSlots{host, static_cast<int>(*slots)});
  }
  if (hosts.empty()) {
    return Status::InvalidArgument("hostfile '" + file_name +
                                   "' lists no host; expected lines such as 'worker-0 slots=4'");
  }
  return hosts;
}

Result<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return Status::Io("cannot read hostfile '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) {
    return Status::Io("cannot read hostfile '" + path + "': " + std::strerror(errno));
  }
  return ParseHostfile(text.str(), path);
}

}  // namespace dpl::cluster
