// Running the Python reference scripts of these tests (tests/training/*_reference.py) on Debian's
// dpl's Python, and the binary files they exchange with the tests. A script that cannot import
// torch exits with kNoTorchExitCode; the test then skips, saying so.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace dpl::training::torch_reference {

inline constexpr int kNoTorchExitCode = 77;

// A file name for this test process in the build tree: <binary dir>/<stem>-<pid>.
inline std::string ScratchPath(const std::string& stem) {
  return std::string(DPL_TEST_BINARY_DIR) + "/" + stem + "-" + std::to_string(::getpid());
}

// A double as Python reads it back bit for bit.
inline std::string ExactText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

enum class ReferenceRun { kOk, kNoTorch, kFailed };

// Runs tests/training/<script> with `arguments` on dpl's Python (DPL_TEST_PYTHON).
inline ReferenceRun RunTorchReference(const std::string& script, const std::string& arguments,
                                      std::string* command_out) {
  const std::string python = std::string(DPL_TEST_PYTHON);
  *command_out = python + " " + std::string(DPL_TEST_SOURCE_DIR) + "/tests/training/" + script +
                 " " + arguments;
  const int status = std::system(command_out->c_str());
  if (status == -1 || !WIFEXITED(status)) return ReferenceRun::kFailed;
  const int code = WEXITSTATUS(status);
  if (code == kNoTorchExitCode || code == 127) return ReferenceRun::kNoTorch;
  return code == 0 ? ReferenceRun::kOk : ReferenceRun::kFailed;
}

template <typename T>
void WriteValues(std::ofstream& out, const std::vector<T>& values) {
  out.write(reinterpret_cast<const char*>(values.data()),
            std::streamsize(values.size() * sizeof(T)));
}

template <typename T>
std::vector<T> ReadValues(std::ifstream& in, size_t count) {
  std::vector<T> values(count);
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(count * sizeof(T)));
  if (size_t(in.gcount()) != count * sizeof(T)) values.clear();
  return values;
}

}  // namespace dpl::training::torch_reference

// Runs a reference script in a test body: skips the test when python3 or torch is missing, fails
// it when the script fails.
#define DPL_RUN_TORCH_REFERENCE(script, arguments)                                             \
  do {                                                                                         \
    std::string dpl_command_;                                                                  \
    const ::dpl::training::torch_reference::ReferenceRun dpl_run_ =                            \
        ::dpl::training::torch_reference::RunTorchReference(script, arguments, &dpl_command_); \
    if (dpl_run_ == ::dpl::training::torch_reference::ReferenceRun::kNoTorch)                  \
      GTEST_SKIP() << DPL_TEST_PYTHON                                                          \
          " cannot import torch (run tools/setup.sh), so there is no "                         \
          "reference to compare with: "                                                        \
                   << dpl_command_;                                                            \
    ASSERT_EQ(dpl_run_, ::dpl::training::torch_reference::ReferenceRun::kOk) << dpl_command_;  \
  } while (0)
