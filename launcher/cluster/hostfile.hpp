// DeepSpeed's hostfile: one `HOST slots=N` line per machine, N its processes; the machines in
// the file's order. Format and the few differences from DeepSpeed: Note [Hostfile].
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// Parses `text`, the contents of the file `file_name` (named in errors with the line number).
Result<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& file_name);

// Reads and parses the file at `path`.
Result<std::vector<HostSlots>> ReadHostfile(const std::string& path);

}  // namespace dpl::cluster
