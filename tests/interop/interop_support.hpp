// What the interop tests share: the Python fixtures written once, Python torch run as the
// reference, real launcher jobs in a folder of the test's own, and reading what they leave.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "supervision/launcher_processes.hpp"
#include "support/shell_capture.hpp"

namespace dpl::interop_test {

using Args = std::vector<std::string>;

inline constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using dpl::testing::Capture;
using dpl::testing::PythonHasTorch;

// Runs tests/interop/interop.py with `arguments`; fails the test when it exits non-zero.
inline std::string RunPython(const std::string& arguments) {
  return dpl::testing::RunPythonScript(DPL_TEST_INTEROP_PYTHON, arguments);
}

// The value after `key` in the last line of `text` that has it ("key value key value ...").
inline std::string Field(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line, found;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word, value;
    while (words >> word && words >> value) {
      if (word == key) found = value;
    }
  }
  return found;
}

// The folder of interop.py write, written once for its sources (PythonFixtureFolder).
inline const std::string& FixtureDir() {
  static const std::string directory = [] {
    std::vector<std::string> sources;
    for (const char* file :
         {"/tests/interop/interop.py", "/tools/recipe_convnet.py", "/tools/export_model.py"}) {
      sources.push_back(std::string(DPL_TEST_SOURCE_DIR) + file);
    }
    return dpl::testing::PythonFixtureFolder(DPL_TEST_INTEROP_PYTHON, sources, DPL_TEST_BINARY_DIR);
  }();
  return directory;
}

inline std::string Fixture(const std::string& name) {
  return FixtureDir() + "/" + name;
}

inline std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The accuracy line rank 0 prints after evaluating: "... accuracy: CORRECT/COUNT (..%)".
struct PrintedAccuracy {
  bool found = false;
  double average_loss = 0.0;
  long correct = -1;
  long count = -1;
};

inline PrintedAccuracy AccuracyIn(const std::string& output) {
  std::smatch match;
  PrintedAccuracy accuracy;
  if (!std::regex_search(output, match,
                         std::regex(R"(test set: average loss: ([0-9.]+), accuracy: (\d+)/(\d+))")))
    return accuracy;
  accuracy.found = true;
  accuracy.average_loss = std::stod(match[1]);
  accuracy.correct = std::stol(match[2]);
  accuracy.count = std::stol(match[3]);
  return accuracy;
}

// The losses of the "step" lines of a --metrics file, in order.
inline std::vector<double> StepLosses(const std::string& metrics_file) {
  std::ifstream in(metrics_file);
  std::vector<double> losses;
  const std::regex step(R"(^\{"kind": "step", .*"loss": ([0-9.eE+-]+),)");
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_search(line, match, step)) losses.push_back(std::stod(match[1]));
  }
  return losses;
}

struct JobResult {
  std::optional<int> status;  // the launcher's wait status; empty if it did not end in time
  std::string output;
  bool ok() const { return test::ExitedWith(status, 0); }
};

// A test with a scratch folder of its own and the Python fixtures; skipped without Python torch.
class InteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PythonHasTorch()) {
      GTEST_SKIP() << DPL_TEST_PYTHON
          " cannot import torch (run tools/setup.sh): the "
          "interop tests need it as the reference";
    }
    char pattern[] = "/tmp/dpl-interop-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    ASSERT_FALSE(FixtureDir().empty());
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Folder(const std::string& name) const {
    std::filesystem::create_directories(Path(name));
    return Path(name);
  }

  // The flags every job of these tests has; `extra` comes last. The inflated data is cached in
  // the build folder for all of them (written atomically, so concurrent tests may share it).
  static Args Job(const Args& extra) {
    Args args = {"--plugin-dir",
                 DPL_TEST_PLUGIN_DIR,
                 "--master-port",
                 "0",
                 "--no-progress",
                 "--threads-per-worker",
                 "1",
                 "--data-cache",
                 std::string(DPL_TEST_BINARY_DIR) + "/data-cache",
                 "--backend-timeout",
                 "60",
                 "--rendezvous-timeout",
                 "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Runs a launcher job to its end (at most `timeout`).
  JobResult Run(const Args& extra, const std::string& name,
                std::chrono::seconds timeout = std::chrono::seconds(120)) const {
    test::LauncherProcess launcher(Job(extra), Path(name + ".log"));
    JobResult result;
    result.status = launcher.Wait(timeout);
    result.output = launcher.Output();
    return result;
  }

  std::string dir_;
};

}  // namespace dpl::interop_test
