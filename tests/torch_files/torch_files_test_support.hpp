// What the torch_files tests share: a value of every kind and dtype, archives made record by
// record, and a temporary folder for each test.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dpl/torch_files/torch_value.hpp"

namespace dpl::torch_files::testing {

// A string literal with its NUL bytes: "\x80\x02N."_b.
std::string operator""_b(const char* text, size_t size);
std::string Le32(uint32_t v);

// Writes an archive in torch.save's layout holding `pickle` as <name>/data.pkl and `storages`
// as <name>/data/0, 1, ... (with a version record unless `version` is empty).
void WriteRawArchive(const std::string& path, const std::string& name, const std::string& pickle,
                     const std::vector<std::string>& storages, const std::string& version = "3\n");

TorchTensor F32(std::vector<int64_t> shape, std::vector<float> values);
TorchTensor Raw(TorchDtype dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
TorchValue Str(const char* text);

// A state dict of torch.nn.Sequential(Linear(3, 2), BatchNorm1d(2)), as nn.Module returns it.
TorchValue ModelStateDict();
// What the C++ side writes for torch.load: every kind of value, every dtype, odd shapes.
TorchValue CppCheckpoint();

class TempDir {
 public:
  TempDir() {
    // Memory-backed where there is one: the fuzzing rewrites a file thousands of times.
    std::string pattern = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                          "/dpl-torch-archive-XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class TorchArchiveTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

}  // namespace dpl::torch_files::testing
