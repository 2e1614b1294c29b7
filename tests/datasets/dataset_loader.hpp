// Dataset plugins loaded from the build's plugin folder with dlopen and driven through the C ABI
// only (dpl/dataset.h), as the launcher drives them, plus the scratch files the tests write.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dpl/dataset.h"

namespace dpl::datasets::testing {

// Loads libdpl_dataset_<name>.so once per process.
inline const dpl_dataset_plugin_v2& Plugin(const std::string& name) {
  static std::map<std::string, const dpl_dataset_plugin_v2*> loaded;
  auto found = loaded.find(name);
  if (found != loaded.end()) return *found->second;
  const std::string path = std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_dataset_" + name + ".so";
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
    std::abort();
  }
  auto* table = static_cast<const dpl_dataset_plugin_v2*>(dlsym(handle, "dpl_dataset_plugin_v2"));
  if (table == nullptr) {
    ADD_FAILURE() << path << " has no dpl_dataset_plugin_v2";
    std::abort();
  }
  loaded[name] = table;
  return *table;
}

// Log lines a dataset sent to the host, as "W: text" (level initial, then the message).
struct LogLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  static void Callback(void* context, dpl_log_level level, const char* message) {
    auto* self = static_cast<LogLines*>(context);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.push_back(std::string(1, "DIWE"[level]) + ": " + message);
  }
};

struct Settings {
  std::string path;
  std::string options;
  std::string cache_dir;
  int32_t split = DPL_DATASET_SPLIT_TRAIN;
  int32_t num_threads = 1;
  uint64_t seed = 0;
  LogLines* log = nullptr;
};

inline dpl_dataset_config_v2 ConfigOf(const Settings& settings) {
  dpl_dataset_config_v2 config{};
  config.struct_size = sizeof config;
  config.version = DPL_DATASET_ABI_VERSION_2;
  config.path = settings.path.c_str();
  config.options = settings.options.c_str();
  config.split = settings.split;
  config.num_threads = settings.num_threads;
  config.cache_dir = settings.cache_dir.c_str();
  config.seed = settings.seed;
  config.log = settings.log ? &LogLines::Callback : nullptr;
  config.log_context = settings.log;
  return config;
}

// A filled batch: floats row by row, and labels.
struct Batch {
  std::vector<float> input;
  std::vector<int64_t> labels;
};

// A filled batch of int64 inputs and int64 targets, row by row.
struct TokenBatch {
  std::vector<int64_t> input;
  std::vector<int64_t> target;
};

// The shape of one sample's tensor, and its elements.
inline std::vector<int64_t> ShapeOf(const dpl_sample_tensor_v2& tensor) {
  return std::vector<int64_t>(tensor.shape, tensor.shape + tensor.ndim);
}
inline int64_t ElementsOf(const dpl_sample_tensor_v2& tensor) {
  int64_t elements = 1;
  for (const int64_t extent : ShapeOf(tensor)) elements *= extent;
  return elements;
}

// A batch's tensor over `data`: `dtype`, shape (n, sample.shape...), host memory.
struct BatchTensor {
  BatchTensor(void* data, DLDataType dtype, int64_t n, const dpl_sample_tensor_v2& sample)
      : shape{n} {
    for (const int64_t extent : ShapeOf(sample)) shape.push_back(extent);
    tensor.data = data;
    tensor.device = {kDLCPU, 0};
    tensor.ndim = int32_t(shape.size());
    tensor.dtype = dtype;
    tensor.shape = shape.data();
  }
  std::vector<int64_t> shape;
  DLTensor tensor{};
};

// One dataset instance, destroyed at scope end. A failed create leaves status() and error().
class Dataset {
 public:
  Dataset(const std::string& plugin, const Settings& settings) : plugin_(Plugin(plugin)) {
    const dpl_dataset_config_v2 config = ConfigOf(settings);
    status_ = plugin_.create(&config, &dataset_);
    if (status_ != DPL_OK) error_ = plugin_.last_error();
  }
  ~Dataset() { plugin_.destroy(dataset_); }
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  bool ok() const { return status_ == DPL_OK; }
  dpl_status status() const { return status_; }
  const std::string& error() const { return error_; }
  dpl_dataset* get() const { return dataset_; }
  const dpl_dataset_plugin_v2& plugin() const { return plugin_; }

  dpl_dataset_info_v2 Info() const {
    dpl_dataset_info_v2 info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(plugin_.describe(dataset_, &info), DPL_OK) << plugin_.last_error();
    return info;
  }
  // The input's shape and elements.
  std::vector<int64_t> SampleShape() const { return ShapeOf(Info().input); }
  int64_t SampleElements() const { return ElementsOf(Info().input); }

  // Fills `indices` of `epoch` into `input` and `target` (of `input_dtype` and `target_dtype`,
  // room for the batch); on failure returns the status and leaves the message in *error.
  dpl_status TryFillInto(const std::vector<int64_t>& indices, int64_t epoch, DLDataType input_dtype,
                         void* input, DLDataType target_dtype, void* target,
                         std::string* error) const {
    const dpl_dataset_info_v2 info = Info();
    BatchTensor in(input, input_dtype, int64_t(indices.size()), info.input);
    BatchTensor out(target, target_dtype, int64_t(indices.size()), info.target);
    const dpl_status status =
        plugin_.fill(dataset_, indices.data(), epoch, &in.tensor, &out.tensor);
    if (status != DPL_OK && error != nullptr) *error = plugin_.last_error();
    return status;
  }

  // Fills `indices` of `epoch` as float32 samples with one int64 label each.
  dpl_status TryFill(const std::vector<int64_t>& indices, int64_t epoch, Batch* batch,
                     std::string* error) const {
    batch->input.assign(indices.size() * size_t(SampleElements()), -1234.5f);
    batch->labels.assign(indices.size() * size_t(ElementsOf(Info().target)), -1);
    return TryFillInto(indices, epoch, {kDLFloat, 32, 1}, batch->input.data(), {kDLInt, 64, 1},
                       batch->labels.data(), error);
  }

  // Fills `indices` of `epoch` as int64 input and int64 target (token windows).
  TokenBatch FillTokens(const std::vector<int64_t>& indices, int64_t epoch = 0) const {
    TokenBatch batch;
    batch.input.assign(indices.size() * size_t(ElementsOf(Info().input)), -1);
    batch.target.assign(indices.size() * size_t(ElementsOf(Info().target)), -1);
    std::string error;
    EXPECT_EQ(TryFillInto(indices, epoch, {kDLInt, 64, 1}, batch.input.data(), {kDLInt, 64, 1},
                          batch.target.data(), &error),
              DPL_OK)
        << error;
    return batch;
  }

  Batch Fill(const std::vector<int64_t>& indices, int64_t epoch = 0) const {
    Batch batch;
    std::string error;
    EXPECT_EQ(TryFill(indices, epoch, &batch, &error), DPL_OK) << error;
    return batch;
  }

  // Every sample, in order.
  Batch FillAll(int64_t epoch = 0) const {
    std::vector<int64_t> indices(size_t(Info().count));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
    return Fill(indices, epoch);
  }

 private:
  const dpl_dataset_plugin_v2& plugin_;
  dpl_dataset* dataset_ = nullptr;
  dpl_status status_ = DPL_OK;
  std::string error_;
};

// The message of a create of `plugin` with `settings` that fails with `expected`.
inline std::string CreateError(const std::string& plugin, const Settings& settings,
                               dpl_status expected) {
  Dataset dataset(plugin, settings);
  EXPECT_EQ(dataset.status(), expected) << dataset.error();
  return dataset.error();
}

// A fresh folder under /tmp, removed with the fixture.
class ScratchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-dataset-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  Settings At(const std::string& options = "") const {
    Settings settings;
    settings.path = dir_;
    settings.options = options;
    return settings;
  }
  Settings AtSplit(int32_t split, const std::string& options, uint64_t seed = 0) const {
    Settings settings = At(options);
    settings.split = split;
    settings.seed = seed;
    return settings;
  }
  std::string dir_;
};

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(file)), {});
}

// dpl's Python, with numpy and PIL (tools/requirements.txt).
inline std::string Python() {
  return std::string(DPL_TEST_PYTHON);
}

// Runs `code` with Python in `directory` (its working directory); fails the test on an error.
inline void RunPython(const std::string& directory, const std::string& code) {
  const std::string script = directory + "/.write_data.py";
  std::ofstream(script) << "import os, sys\nimport numpy\n" << code << "\n";
  const std::string command = "cd '" + directory + "' && " + Python() + " " + script + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  std::filesystem::remove(script);
  ASSERT_EQ(status, 0) << "python failed:\n" << output;
}

// Runs the Python script `script` (a path) as __main__ in `directory`, with `arguments` split at
// spaces as its sys.argv[1:]; fails the test on an error.
inline void RunScript(const std::string& directory, const std::string& script,
                      const std::string& arguments) {
  RunPython(directory, "sys.argv = ['" + script + "'] + '" + arguments +
                           "'.split()\n"
                           "import runpy\n"
                           "runpy.run_path('" +
                           script + "', run_name='__main__')");
}

// The recipe's ToTensor then Normalize of a byte, in float32 as the plugins compute it.
inline float Normalised(uint8_t value, float mean, float std) {
  return (float(value) * (1.0f / 255.0f) - mean) / std;
}

}  // namespace dpl::datasets::testing
