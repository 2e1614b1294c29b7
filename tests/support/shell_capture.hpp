// Running a shell command or a Python script from a test and reading what it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

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

// What a libtorch model plugin says when asked for --device cuda on this machine, which has no
// GPU: pip's torch has its CUDA part, Debian's is a CPU-only build.
inline const char* NoCudaDeviceMessage() {
  return DPL_TEST_TORCH_HAS_CUDA
             ? "libtorch has CUDA but sees no GPU (no driver, or CUDA_VISIBLE_DEVICES hides them "
               "all); use --device cpu"
             : "this plugin's libtorch is a CPU-only build (no CUDA support); use --device cpu, "
               "or rebuild the plugin against a libtorch with CUDA";
}

// Whether dpl's Python (DPL_TEST_PYTHON) can import torch (asked once).
inline bool PythonHasTorch() {
  static const bool has_torch = [] {
    int exit_code = -1;
    Capture(std::string(DPL_TEST_PYTHON) + " -c 'import torch' 2>&1", &exit_code);
    return exit_code == 0;
  }();
  return has_torch;
}

// Runs the Python script `script` with `arguments`, stdout and stderr together; fails the test
// when it exits non-zero.
inline std::string RunPythonScript(const std::string& script, const std::string& arguments) {
  int exit_code = -1;
  const std::string output =
      Capture(std::string(DPL_TEST_PYTHON) + " " + script + " " + arguments + " 2>&1", &exit_code);
  EXPECT_EQ(exit_code, 0) << script << " " << arguments << ":\n" << output;
  return output;
}

// The folder below `parent` that `script write FOLDER` fills, named by the contents of `sources`
// (the script and what it imports). ctest runs every test in its own process, several at once, so
// the folder is written under a temporary name and renamed into place by whichever process
// finishes first; later processes, and later runs with the same sources, reuse it.
inline std::string PythonFixtureFolder(const std::string& script,
                                       const std::vector<std::string>& sources,
                                       const std::string& parent) {
  std::string contents;
  for (const std::string& file : sources) {
    std::ifstream in(file, std::ios::binary);
    contents += std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string path =
      parent + "/fixtures-" + std::to_string(std::hash<std::string>{}(contents));
  if (std::ifstream(path + "/complete").good()) return path;
  const std::string scratch = path + ".tmp" + std::to_string(getpid());
  int exit_code = -1;
  Capture("rm -rf '" + scratch + "' && mkdir -p '" + scratch + "'", &exit_code);
  RunPythonScript(script, "write " + scratch);
  std::ofstream(scratch + "/complete") << "written by " << script << "\n";
  if (std::rename(scratch.c_str(), path.c_str()) != 0) {  // another process was first
    Capture("rm -rf '" + scratch + "'", &exit_code);
  }
  return path;
}

}  // namespace dpl::testing
