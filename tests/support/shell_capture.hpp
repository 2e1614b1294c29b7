// Running a shell command or a Python script from a test and reading what it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <string>

namespace dpl::testing {

// stdout of a shell command (append 2>&1 for stderr too); *exit_code its exit status.
inline std::string Capture(const std::string& command, int* exit_code) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    output.append(buffer.data(), read);
  }
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

// Whether Debian's python3 can import torch (asked once).
inline bool PythonHasTorch() {
  static const bool has_torch = [] {
    int exit_code = -1;
    Capture("/usr/bin/python3 -c 'import torch' 2>&1", &exit_code);
    return exit_code == 0;
  }();
  return has_torch;
}

// Runs the Python script `script` with `arguments`, stdout and stderr together; fails the test
// when it exits non-zero.
inline std::string RunPythonScript(const std::string& script, const std::string& arguments) {
  int exit_code = -1;
  const std::string output =
      Capture("/usr/bin/python3 " + script + " " + arguments + " 2>&1", &exit_code);
  EXPECT_EQ(exit_code, 0) << script << " " << arguments << ":\n" << output;
  return output;
}

}  // namespace dpl::testing
