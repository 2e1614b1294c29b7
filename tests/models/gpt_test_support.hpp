// What the gpt network tests share: the tiny network of the tests, reading tensor files, and the
// Python reference (gpt_reference.py over tools/gpt_model.py).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "dpl/torch_model/state_file.hpp"
#include "gpt_network.hpp"
#include "support/shell_capture.hpp"

namespace dpl::gpt_test {

// 2 layers, 4 heads, 64 dims, block 32, bytes: the tiny GPT of the tests (and of the Python side).
inline gpt::GptConfig TinyConfig(bool bias = true) {
  gpt::GptConfig config;
  config.vocab = 256;
  config.block = 32;
  config.layers = 2;
  config.heads = 4;
  config.dim = 64;
  config.bias = bias;
  return config;
}

inline double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The {name: tensor} file at `path` (torch.save or torch.jit.save) through the SDK's reader.
inline gpt::NamedTensors ReadTensorList(const std::string& path) {
  return torch_model::ReadStateFile(path, "file " + path).tensors;
}

inline std::map<std::string, torch::Tensor> ReadTensors(const std::string& path) {
  std::map<std::string, torch::Tensor> named;
  for (auto& [name, tensor] : ReadTensorList(path)) named.emplace(name, tensor);
  return named;
}

inline std::string ReferenceScript() {
  return std::string(DPL_TEST_SOURCE_DIR) + "/tests/models/gpt_reference.py";
}

// gpt_reference.py `arguments`, failing the test when it exits non-zero.
inline std::string RunReference(const std::string& arguments) {
  return dpl::testing::RunPythonScript(ReferenceScript(), arguments);
}

// The folder `gpt_reference.py write` filled, once for its sources.
inline const std::string& FixtureDir() {
  static const std::string directory = [] {
    std::vector<std::string> sources = {ReferenceScript()};
    for (const char* tool : {"/tools/gpt_model.py", "/tools/export_model.py"}) {
      sources.push_back(std::string(DPL_TEST_SOURCE_DIR) + tool);
    }
    return dpl::testing::PythonFixtureFolder(ReferenceScript(), sources, DPL_TEST_BINARY_DIR);
  }();
  return directory;
}

inline std::string Fixture(const std::string& name) {
  return FixtureDir() + "/" + name;
}

// A folder of this process for files the test writes.
inline std::string ScratchDir() {
  static const std::string directory = [] {
    const std::string path =
        std::string(DPL_TEST_BINARY_DIR) + "/gpt-scratch-" + std::to_string(getpid());
    int exit_code = -1;
    dpl::testing::Capture("rm -rf '" + path + "' && mkdir -p '" + path + "'", &exit_code);
    return path;
  }();
  return directory;
}

}  // namespace dpl::gpt_test
