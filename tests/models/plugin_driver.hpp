// Drives model plugins through the C ABI only, as the launcher does: loading, configs, instances,
// batches, and Python torch as the reference.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "support/shell_capture.hpp"

namespace dpl_test {

// Loads a plugin library once per process (never unloaded: libtorch does not support it) and
// returns its entry table `symbol`.
inline const void* LoadTable(const std::string& path, const char* symbol) {
  static std::map<std::string, const void*> loaded;
  const std::string key = path + ":" + symbol;
  const auto found = loaded.find(key);
  if (found != loaded.end()) return found->second;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
    std::abort();
  }
  const void* table = dlsym(handle, symbol);
  if (table == nullptr) {
    ADD_FAILURE() << path << " has no " << symbol;
    std::abort();
  }
  loaded.emplace(key, table);
  return table;
}

// An in-tree model plugin, libdpl_model_<name>.so of the build's plugin folder.
inline const dpl_model_plugin_v4& Plugin(const std::string& name) {
  return *static_cast<const dpl_model_plugin_v4*>(LoadTable(
      std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_model_" + name + ".so", "dpl_model_plugin_v4"));
}

// A test-only plugin of tests/models (e.g. "batchnorm").
inline const dpl_model_plugin_v4& TestPlugin(const std::string& name) {
  return *static_cast<const dpl_model_plugin_v4*>(
      LoadTable(std::string(DPL_TEST_MODEL_DIR) + "/libdpl_test_model_" + name + ".so",
                "dpl_model_plugin_v4"));
}

// A config as the launcher writes it for 28x28 grayscale images of 10 classes: float32 input and
// one int64 label per sample.
inline dpl_model_config_v4 Config(const char* options, uint64_t seed = 0) {
  dpl_model_config_v4 config{};
  config.struct_size = sizeof config;
  config.version = DPL_MODEL_ABI_VERSION_4;
  config.options = options;
  config.device_type = kDLCPU;
  config.device_id = 0;
  config.seed = seed;
  config.num_threads = 1;
  config.input_ndim = 3;
  config.input_shape[0] = 1;
  config.input_shape[1] = 28;
  config.input_shape[2] = 28;
  config.num_classes = 10;
  config.precision = DPL_PRECISION_FP32;
  config.input.dtype = DLDataType{kDLFloat, 32, 1};
  config.input.ndim = 3;
  config.input.shape[0] = 1;
  config.input.shape[1] = 28;
  config.input.shape[2] = 28;
  config.target.dtype = DLDataType{kDLInt, 64, 1};
  return config;
}

// The lines a plugin logs through its config, each "LEVEL message" ("2 ..." for a warning).
class LogLines {
 public:
  // Points `config`'s log here.
  void CollectFrom(dpl_model_config_v4* config) {
    config->log = &Record;
    config->log_context = this;
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  static void Record(void* context, dpl_log_level level, const char* message) {
    auto* self = static_cast<LogLines*>(context);
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->lines_.push_back(std::to_string(int(level)) + " " + message);
  }

  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// `config` for float32 samples of `shape` (empty: the host does not say) in `classes` classes.
inline dpl_model_config_v4 WithData(dpl_model_config_v4 config, std::vector<int64_t> shape,
                                    int64_t classes) {
  config.input_ndim = static_cast<uint32_t>(shape.size());
  config.input.ndim = config.input_ndim;
  for (size_t i = 0; i < DPL_MODEL_MAX_INPUT_DIMS; ++i) {
    config.input_shape[i] = i < shape.size() ? shape[i] : 0;
    config.input.shape[i] = config.input_shape[i];
  }
  if (shape.empty()) config.input.dtype = DLDataType{0, 0, 0};
  if (shape.empty()) config.target.dtype = DLDataType{0, 0, 0};
  config.num_classes = classes;
  return config;
}

// `config` for token data: int64 ids (block) in, the next id per position as the target.
inline dpl_model_config_v4 WithTokens(dpl_model_config_v4 config, int64_t block, int64_t vocab) {
  config = WithData(config, {block}, vocab);
  config.input.dtype = DLDataType{kDLInt, 64, 1};
  config.target = config.input;
  return config;
}

inline dpl_model_config_v4 WithPrecision(dpl_model_config_v4 config, dpl_precision precision) {
  config.precision = precision;
  return config;
}

// info.flags but those every SDK model says (its optimizer on its device, its replaced
// gradients): what a test of buffers or modes compares.
inline uint32_t BufferFlags(const dpl_model_info_v4& info) {
  return info.flags & ~uint32_t(DPL_MODEL_DEVICE_OPTIMIZER | DPL_MODEL_REPLACED_GRADIENTS);
}

// The status and message of a create that is expected to fail (the instance, if any, freed).
inline dpl_status CreateStatus(const dpl_model_plugin_v4& plugin, const dpl_model_config_v4& config,
                               std::string* message) {
  dpl_model* model = nullptr;
  const dpl_status status = plugin.create(&config, &model);
  *message = plugin.last_error();
  plugin.destroy(model);
  return status;
}

// One model instance, destroyed at scope end.
class Model {
 public:
  Model(const dpl_model_plugin_v4& plugin, const dpl_model_config_v4& config) : plugin_(plugin) {
    const dpl_status status = plugin_.create(&config, &model_);
    if (status != DPL_OK) {
      ADD_FAILURE() << "create " << plugin_.header.name << " (" << config.options
                    << "): " << plugin_.last_error();
    }
  }
  Model(const std::string& name, const char* options, uint64_t seed = 0)
      : Model(Plugin(name), Config(options, seed)) {}
  ~Model() { plugin_.destroy(model_); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const dpl_model_plugin_v4& plugin() const { return plugin_; }
  dpl_model* get() const { return model_; }
  const char* error() const { return plugin_.last_error(); }

  dpl_model_info_v4 Info() const {
    dpl_model_info_v4 info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(plugin_.describe(model_, &info), DPL_OK) << plugin_.last_error();
    return info;
  }

  dpl_parameter_v2 Parameter(uint32_t index) const {
    dpl_parameter_v2 parameter{};
    parameter.struct_size = sizeof parameter;
    EXPECT_EQ(plugin_.parameter(model_, index, &parameter), DPL_OK) << plugin_.last_error();
    return parameter;
  }

  std::vector<dpl_parameter_v2> Parameters() const {
    std::vector<dpl_parameter_v2> parameters;
    for (uint32_t i = 0; i < Info().parameter_count; ++i) parameters.push_back(Parameter(i));
    return parameters;
  }

  dpl_buffer_v3 Buffer(uint32_t index) const {
    dpl_buffer_v3 buffer{};
    buffer.struct_size = sizeof buffer;
    EXPECT_EQ(plugin_.buffer(model_, index, &buffer), DPL_OK) << plugin_.last_error();
    return buffer;
  }

  std::vector<dpl_buffer_v3> Buffers() const {
    std::vector<dpl_buffer_v3> buffers;
    for (uint32_t i = 0; i < Info().buffer_count; ++i) buffers.push_back(Buffer(i));
    return buffers;
  }

  // Every parameter's elements, in all.
  uint64_t ParameterElements() const {
    uint64_t count = 0;
    for (const auto& parameter : Parameters()) {
      int64_t elements = 1;
      for (int32_t d = 0; d < parameter.value.ndim; ++d) elements *= parameter.value.shape[d];
      count += uint64_t(elements);
    }
    return count;
  }

  // Every parameter value (or gradient), back to back (read_tensors).
  std::vector<float> Values(dpl_model_tensors which = DPL_MODEL_TENSORS_VALUES) const {
    const uint64_t count = ParameterElements();
    std::vector<float> values(count);
    EXPECT_EQ(plugin_.read_tensors(model_, which, values.data(), count), DPL_OK)
        << plugin_.last_error();
    return values;
  }

  std::vector<uint8_t> RngState() const {
    uint64_t size = 0;
    EXPECT_EQ(plugin_.rng_state(model_, nullptr, 0, &size), DPL_ERR_BUFFER_TOO_SMALL);
    std::vector<uint8_t> state(size);
    EXPECT_EQ(plugin_.rng_state(model_, state.data(), state.size(), &size), DPL_OK)
        << plugin_.last_error();
    return state;
  }

 private:
  const dpl_model_plugin_v4& plugin_;
  dpl_model* model_ = nullptr;
};

inline int64_t Elements(const DLTensor& tensor) {
  int64_t count = 1;
  for (int32_t i = 0; i < tensor.ndim; ++i) count *= tensor.shape[i];
  return count;
}

// The optimizer `kind` (model ABI v4's set_optimizer) over all `elements` parameter elements,
// parameter i decayed by weight_decay[i] (borrowed: it must outlive the call), with betas 0.9 and
// 0.95, rho 0.9 and eps 1e-8; the caller changes what its test needs.
inline dpl_optimizer_config_v4 OptimizerConfig(int32_t kind,
                                               const std::vector<double>& weight_decay,
                                               uint64_t elements) {
  dpl_optimizer_config_v4 config{};
  config.struct_size = sizeof config;
  config.kind = kind;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.rho = 0.9;
  config.eps = 1e-8;
  config.weight_decay = weight_decay.data();
  config.shard_begin = 0;
  config.shard_end = elements;
  return config;
}

// nanoGPT's parameter groups: `decay` on the tensors of two or more dimensions, none on the others.
inline std::vector<double> GroupDecay(const Model& model, double decay) {
  std::vector<double> weight_decay;
  for (const dpl_parameter_v2& parameter : model.Parameters()) {
    weight_decay.push_back(parameter.value.ndim >= 2 ? decay : 0.0);
  }
  return weight_decay;
}

// apply_update of optimizer step `step` at `learning_rate`, the gradients times `factor`.
inline dpl_status ApplyUpdate(const Model& model, int64_t step, double learning_rate,
                              double factor) {
  dpl_update_v4 update{};
  update.struct_size = sizeof update;
  update.step = step;
  update.learning_rate = learning_rate;
  update.gradient_factor = factor;
  return model.plugin().apply_update(model.get(), &update);
}

inline float* Floats(const DLTensor& tensor) {
  return static_cast<float*>(tensor.data);
}

// A batch in host memory: pseudo-random pixels and labels, or one read from a file of
// tests/models/fixtures.py's batch format.
struct Batch {
  explicit Batch(int64_t size, uint32_t seed = 7, std::vector<int64_t> sample = {1, 28, 28},
                 int64_t classes = 10)
      : sample_shape(std::move(sample)) {
    int64_t sample_elements = 1;
    for (int64_t extent : sample_shape) sample_elements *= extent;
    images.resize(size_t(size * sample_elements));
    labels.resize(size_t(size));
    std::mt19937 generator(seed);
    std::normal_distribution<float> pixel(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> label(0, classes - 1);
    for (auto& value : images) value = pixel(generator);
    for (auto& value : labels) value = label(generator);
    Bind();
  }

  static Batch FromFile(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    int64_t size = 0, ndim = 0;
    file.read(reinterpret_cast<char*>(&size), sizeof size);
    file.read(reinterpret_cast<char*>(&ndim), sizeof ndim);
    std::vector<int64_t> sample(size_t(ndim > 0 && ndim < 8 ? ndim : 0));
    file.read(reinterpret_cast<char*>(sample.data()), std::streamsize(sample.size() * 8));
    Batch batch(size > 0 ? size : 1, 0, sample);
    file.read(reinterpret_cast<char*>(batch.images.data()),
              std::streamsize(batch.images.size() * sizeof(float)));
    file.read(reinterpret_cast<char*>(batch.labels.data()),
              std::streamsize(batch.labels.size() * sizeof(int64_t)));
    EXPECT_TRUE(file.good()) << "cannot read batch file " << path;
    return batch;
  }

  Batch(const Batch& other)
      : sample_shape(other.sample_shape), images(other.images), labels(other.labels) {
    Bind();
  }
  Batch& operator=(const Batch&) = delete;

  // Writes the batch in fixtures.py's format.
  void Write(const std::string& path) const {
    std::ofstream file(path, std::ios::binary);
    const int64_t size = int64_t(labels.size()), ndim = int64_t(sample_shape.size());
    file.write(reinterpret_cast<const char*>(&size), sizeof size);
    file.write(reinterpret_cast<const char*>(&ndim), sizeof ndim);
    file.write(reinterpret_cast<const char*>(sample_shape.data()), std::streamsize(ndim * 8));
    file.write(reinterpret_cast<const char*>(images.data()),
               std::streamsize(images.size() * sizeof(float)));
    file.write(reinterpret_cast<const char*>(labels.data()),
               std::streamsize(labels.size() * sizeof(int64_t)));
  }

  std::vector<int64_t> sample_shape;
  std::vector<float> images;
  std::vector<int64_t> labels;
  std::vector<int64_t> image_shape;
  std::vector<int64_t> label_shape;
  DLTensor input{};
  DLTensor target{};

 private:
  void Bind() {
    image_shape = {int64_t(labels.size())};
    image_shape.insert(image_shape.end(), sample_shape.begin(), sample_shape.end());
    label_shape = {int64_t(labels.size())};
    input.data = images.data();
    input.device = {kDLCPU, 0};
    input.ndim = static_cast<int32_t>(image_shape.size());
    input.dtype = {kDLFloat, 32, 1};
    input.shape = image_shape.data();
    target.data = labels.data();
    target.device = {kDLCPU, 0};
    target.ndim = 1;
    target.dtype = {kDLInt, 64, 1};
    target.shape = label_shape.data();
  }
};

inline float TrainStep(const Model& model, const Batch& batch) {
  float loss = NAN;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss), DPL_OK)
      << model.plugin().last_error();
  return loss;
}

struct Evaluation {
  double loss_sum = NAN;
  int64_t correct = -1;
  int64_t elements = -1;
};

// eval_step on `input` and `target`, its result in *loss_sum and *correct.
inline dpl_status EvalStepInto(const Model& model, const DLTensor& input, const DLTensor& target,
                               double* loss_sum, int64_t* correct, int64_t* elements = nullptr) {
  dpl_eval_result_v4 result{};
  result.struct_size = sizeof result;
  const dpl_status status = model.plugin().eval_step(model.get(), &input, &target, &result);
  *loss_sum = result.loss_sum;
  *correct = result.correct;
  if (elements != nullptr) *elements = result.elements;
  return status;
}

inline Evaluation EvalStep(const Model& model, const Batch& batch) {
  Evaluation result;
  EXPECT_EQ(EvalStepInto(model, batch.input, batch.target, &result.loss_sum, &result.correct,
                         &result.elements),
            DPL_OK)
      << model.plugin().last_error();
  return result;
}

inline void Sgd(const Model& model, float learning_rate) {
  for (const auto& parameter : model.Parameters()) {
    float* value = Floats(parameter.value);
    const float* gradient = Floats(parameter.gradient);
    for (int64_t i = 0; i < Elements(parameter.value); ++i) value[i] -= learning_rate * gradient[i];
  }
}

using dpl::testing::Capture;
using dpl::testing::PythonHasTorch;

// Runs tests/models/fixtures.py with `arguments`; fails the test when it exits non-zero.
inline std::string RunFixtures(const std::string& arguments) {
  return dpl::testing::RunPythonScript(DPL_TEST_PYTHON_FIXTURES, arguments);
}

// The value after `key` in a line of "key value key value ..." pairs; "" if absent.
inline std::string Field(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    std::string value;
    if (!(words >> value)) break;
    if (word == key) return value;
  }
  return "";
}

// The last line of `text` that starts with "loss_sum" (Python's warnings may precede it).
inline std::string ResultLine(const std::string& text) {
  std::istringstream lines(text);
  std::string line, result;
  while (std::getline(lines, line)) {
    if (line.rfind("loss_sum ", 0) == 0) result = line;
  }
  return result;
}

// The folder of fixtures.py write, written once for its sources (PythonFixtureFolder).
inline const std::string& FixtureDir() {
  static const std::string directory = [] {
    std::vector<std::string> sources;
    for (const char* file : {"/tests/models/fixtures.py", "/tests/models/fixture_models.py",
                             "/tools/export_model.py", "/tools/recipe_convnet.py"}) {
      sources.push_back(std::string(DPL_TEST_SOURCE_DIR) + file);
    }
    return dpl::testing::PythonFixtureFolder(DPL_TEST_PYTHON_FIXTURES, sources,
                                             DPL_TEST_BINARY_DIR);
  }();
  return directory;
}

}  // namespace dpl_test
