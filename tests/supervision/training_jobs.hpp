// Small real training jobs for the supervision tests: a few hundred synthetic 28x28 images in a
// folder of the test's own, and the launcher flags of a job on them.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include <filesystem>
#include <string>
#include <vector>

#include "launcher_processes.hpp"
#include "support/idx_writer.hpp"

namespace dpl::test {

using Args = std::vector<std::string>;

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `args` with `flag`'s value replaced by `value` (a flag may be given once).
inline std::vector<std::string> WithValue(std::vector<std::string> args, const std::string& flag,
                                          const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) args[i + 1] = value;
  }
  return args;
}

class TrainingJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Orphans of killed launchers become our children, so the test can see all of them.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    char pattern[] = "/tmp/dpl-jobs-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    using namespace ::dpl::testing;
    WriteRaw(dir_ + "/train-images-idx3-ubyte", IdxImages(512, 28, 28));
    WriteRaw(dir_ + "/train-labels-idx1-ubyte", IdxLabels(512));
    WriteRaw(dir_ + "/t10k-images-idx3-ubyte", IdxImages(64, 28, 28));
    WriteRaw(dir_ + "/t10k-labels-idx1-ubyte", IdxLabels(64));
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  // The flags of a job of `processes` workers on this machine training `model` through `backend`
  // on the test's data, many epochs of `global_batch`-sample global batches; `extra` comes last.
  Args Job(const std::string& backend, const std::string& model, int processes,
           const Args& extra = {}, int global_batch = 8) const {
    Args args = {"--plugin-dir",
                 DPL_TEST_PLUGIN_DIR,
                 "--plugin-dir",
                 DPL_TEST_FAULTY_MODEL_DIR,
                 "--data-dir",
                 dir_,
                 "--data-cache",
                 "none",
                 "--no-progress",
                 "--threads-per-worker",
                 "1",
                 "--backend",
                 backend,
                 "--model",
                 model,
                 "--num-processes",
                 std::to_string(processes),
                 "--batch-size",
                 std::to_string(global_batch),
                 "--epochs",
                 "1000",
                 "--no-eval"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // A folder `name` of the test's own that holds only `plugins` (paths of plugin files), for
  // `--plugin-dir`.
  std::string PluginFolder(const std::string& name, const std::vector<std::string>& plugins) const {
    const std::string folder = dir_ + "/" + name;
    std::filesystem::create_directories(folder);
    for (const std::string& path : plugins) {
      std::filesystem::create_symlink(
          path, folder + "/" + std::filesystem::path(path).filename().string());
    }
    return folder;
  }

  // A plugin folder with the tcp and gloo backends, the idx data set and the test model only, for
  // `--plugin-dir`: the worker loader then loads no libtorch, most of a second of every start of
  // an attempt (a test that restarts a job ten times).
  std::string LightPluginDir() const {
    const std::string built = DPL_TEST_PLUGIN_DIR;
    return PluginFolder("plugins",
                        {built + "/libdpl_backend_tcp.so", built + "/libdpl_backend_gloo.so",
                         built + "/libdpl_dataset_idx.so",
                         std::string(DPL_TEST_FAULTY_MODEL_DIR) + "/libdpl_test_model_faulty.so"});
  }

  // A file for the output of launcher `name` of this test.
  std::string OutputPath(const std::string& name) const {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string test = info->name();
    for (auto& c : test) c = c == '/' ? '_' : c;
    return std::string(DPL_TEST_BINARY_DIR) + "/" + test + "-" + name + ".log";
  }

  std::string dir_;
};

}  // namespace dpl::test
