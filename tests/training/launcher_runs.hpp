// Runs of the launcher binary for the training tests: a folder of synthetic IDX data of the test's
// own, the launcher's exit code and output, the parameters a run dumped (--dump-parameters) and
// the numbers of its metrics file.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "support/idx_writer.hpp"

namespace dpl::test {

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// The launcher with the build's plugins, `arguments` last; stdout and stderr together.
inline RunResult RunLauncher(const std::string& arguments) {
  const std::string command =
      std::string(DPL_TEST_LAUNCHER) + " --plugin-dir " + DPL_TEST_PLUGIN_DIR +
      " --master-port 0 --no-progress --threads-per-worker 1 " + arguments + " 2>&1";
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Every number `key` has in the metrics file's lines of kind "step", in order.
inline std::vector<double> StepMetric(const std::string& metrics_file, const std::string& key) {
  std::ifstream in(metrics_file);
  const std::regex number("\"" + key + "\": ([-+0-9.eE]+)");
  std::vector<double> values;
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (line.rfind("{\"kind\": \"step\"", 0) != 0) continue;
    if (std::regex_search(line, match, number)) values.push_back(std::stod(match[1]));
  }
  return values;
}

// A temporary folder holding `train_images` synthetic 28x28 training images (and 100 test ones)
// in IDX files, removed at the end of the test.
class LauncherRunTest : public ::testing::Test {
 protected:
  void WriteData(uint32_t train_images) {
    char pattern[] = "/tmp/dpl-precision-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    using namespace ::dpl::testing;
    WriteRaw(dir_ + "/train-images-idx3-ubyte", IdxImages(train_images, 28, 28));
    WriteRaw(dir_ + "/train-labels-idx1-ubyte", IdxLabels(train_images));
    WriteRaw(dir_ + "/t10k-images-idx3-ubyte", IdxImages(100, 28, 28));
    WriteRaw(dir_ + "/t10k-labels-idx1-ubyte", IdxLabels(100));
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  // A new folder in the test's folder.
  std::string Folder(const std::string& name) const {
    const std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(path);
    return path;
  }
  std::string Data() const { return "--data-dir " + dir_ + " --data-cache none --seed 3 "; }

  std::string dir_;
};

}  // namespace dpl::test
