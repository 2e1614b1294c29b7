// A --config file: one `name = value` a line, '#' starts a comment, blank lines are skipped.
// What is wrong with a file is said with the file and the line (Note [Config file errors] in
// config_file.cpp); which names are flags is the parser's business (options.cpp), which says
// the place the same way (ConfigPlace).
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cli {

// Larger files are refused: a config file is a few dozen lines, and a large one is something
// else given by mistake (a data file, a binary).
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

struct ConfigEntry {
  int line = 0;  // from 1
  std::string name;
  std::string value;  // without the blanks around it
};

// "config file PATH, line N": where an entry came from, in messages.
std::string ConfigPlace(const std::string& path, int line);

// The entries of the file at `path`, in order. Refused (DPL_ERR_INVALID_ARGUMENT), naming the
// file and, for a bad line, its number and the problem: a folder, a file that cannot be opened,
// one over kMaxConfigFileBytes, a line that is not text (a control byte or invalid UTF-8), a line
// without '=' or without a name before it.
Result<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

}  // namespace dpl::cli
