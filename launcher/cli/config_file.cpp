// Note [Config file errors]: a config file is refused at its first bad line, with the file, the
// line number and what is wrong with the line, so that a binary or garbled file given by mistake
// is recognised as such ("not text") instead of being read as a flag name. Text is UTF-8 without
// control bytes other than tab (and the '\r' of Windows line ends); a line that is text but not
// `name = value` is shown, cut to kShownLineLength characters.
#include "cli/config_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace dpl::cli {
namespace {

constexpr size_t kShownLineLength = 60;
constexpr const char* kByteOrderMark = "\xef\xbb\xbf";

std::string Trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// The length of the UTF-8 sequence that starts with `lead`, or 0 for a byte that cannot start
// one.
size_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  return 0;
}

// "" when `line` is text (Note [Config file errors]); else what is not, with its column.
std::string NotText(const std::string& line) {
  for (size_t i = 0; i < line.size();) {
    const auto byte = static_cast<unsigned char>(line[i]);
    const bool control = (byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7f;
    size_t length = control ? 0 : SequenceLength(byte);
    for (size_t k = 1; k < length; ++k) {
      const bool continuation =
          i + k < line.size() && (static_cast<unsigned char>(line[i + k]) & 0xc0) == 0x80;
      if (!continuation) length = 0;
    }
    if (length == 0) {
      char text[64];
      std::snprintf(text, sizeof text, "byte 0x%02x at column %zu", unsigned(byte), i + 1);
      return text;
    }
    i += length;
  }
  return "";
}

std::string Shown(const std::string& line) {
  if (line.size() <= kShownLineLength) return "'" + line + "'";
  size_t cut = kShownLineLength;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xc0) == 0x80) --cut;  // whole chars
  return "'" + line.substr(0, cut) + "...'";
}

Status CheckSize(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return Status::Ok();  // opening it says why
  if (S_ISDIR(info.st_mode)) {
    return Status::InvalidArgument("--config: '" + path +
                                   "' is a folder; pass a file of `name = value` lines");
  }
  if (S_ISREG(info.st_mode) && size_t(info.st_size) > kMaxConfigFileBytes) {
    return Status::InvalidArgument("--config: '" + path + "' is " + std::to_string(info.st_size) +
                                   " bytes, not a config file of `name = value` lines (at most " +
                                   std::to_string(kMaxConfigFileBytes) + " bytes)");
  }
  return Status::Ok();
}

}  // namespace

std::string ConfigPlace(const std::string& path, int line) {
  return "config file " + path + ", line " + std::to_string(line);
}

Result<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path) {
  DPL_RETURN_IF_ERROR(CheckSize(path));
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return Status::InvalidArgument("--config: cannot open '" + path + "' (" + std::strerror(errno) +
                                   ")");
  }
  std::vector<ConfigEntry> entries;
  int number = 0;
  size_t bytes = 0;
  for (std::string line; std::getline(file, line);) {
    ++number;
    bytes += line.size() + 1;
    if (number == 1 && line.rfind(kByteOrderMark, 0) == 0) line.erase(0, 3);  // Windows editors
    if (bytes > kMaxConfigFileBytes + 1) {  // a file that grew, or one stat could not size
      return Status::InvalidArgument(ConfigPlace(path, number) + ": the file is over " +
                                     std::to_string(kMaxConfigFileBytes) +
                                     " bytes, not a config file of `name = value` lines");
    }
    if (const std::string problem = NotText(line); !problem.empty()) {
      return Status::InvalidArgument(ConfigPlace(path, number) + ": not text (" + problem +
                                     "); a config file holds `name = value` lines");
    }
    const std::string content = Trimmed(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    const auto equals = content.find('=');
    const std::string name = Trimmed(content.substr(0, equals));
    if (equals == std::string::npos || name.empty()) {
      return Status::InvalidArgument(ConfigPlace(path, number) + ": " + Shown(content) +
                                     " is not `name = value`");
    }
    entries.push_back({number, name, Trimmed(content.substr(equals + 1))});
  }
  return entries;
}

}  // namespace dpl::cli
