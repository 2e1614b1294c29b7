// model_step_perf: the time of one training step (train_step: forward, loss, backward) of a model
// plugin, driven through the C ABI as the launcher drives it, on a fixed random batch.
//
//   model_step_perf [--model convnet] [--model-options dropout=1] [--batch 64] [--threads 1]
//                   [--precision fp32|bf16|fp16] [--steps 50] [--warmup 5]
//                   [--input-shape 1,28,28] [--classes 10] [--plugin-dir DIR]
//
// Prints the median, the 10th and the 90th percentile of the steps' wall times.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/model.h"

namespace {

struct Settings {
  std::string model = "convnet";
  std::string options = "";
  std::string plugin_dir = DPL_BENCH_PLUGIN_DIR;
  int64_t batch = 64;
  int32_t threads = 1;
  dpl_precision precision = DPL_PRECISION_FP32;
  int steps = 50;
  int warmup = 5;
  std::vector<int64_t> input_shape = {1, 28, 28};
  int64_t classes = 10;
};

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(
      stderr,
      "model_step_perf: %s\nusage: model_step_perf [--model NAME] [--model-options K=V,...] "
      "[--batch N] [--threads N] [--precision fp32|bf16|fp16] [--steps N] [--warmup N] "
      "[--input-shape C,H,W] [--classes N] [--plugin-dir DIR]\n",
      problem.c_str());
  std::exit(2);
}

int64_t Positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) Usage(flag + " needs a positive integer");
  return value;
}

Settings Parse(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--model") {
      settings.model = value;
    } else if (flag == "--model-options") {
      settings.options = value;
    } else if (flag == "--plugin-dir") {
      settings.plugin_dir = value;
    } else if (flag == "--batch") {
      settings.batch = Positive(flag, value);
    } else if (flag == "--threads") {
      settings.threads = static_cast<int32_t>(Positive(flag, value));
    } else if (flag == "--steps") {
      settings.steps = static_cast<int>(Positive(flag, value));
    } else if (flag == "--warmup") {
      settings.warmup = static_cast<int>(Positive(flag, value));
    } else if (flag == "--classes") {
      settings.classes = Positive(flag, value);
    } else if (flag == "--precision") {
      const std::string name = value;
      if (name == "fp32") {
        settings.precision = DPL_PRECISION_FP32;
      } else if (name == "bf16") {
        settings.precision = DPL_PRECISION_BF16;
      } else if (name == "fp16") {
        settings.precision = DPL_PRECISION_FP16;
      } else {
        Usage("--precision must be fp32, bf16 or fp16");
      }
    } else if (flag == "--input-shape") {
      settings.input_shape.clear();
      std::stringstream extents(value);
      std::string extent;
      while (std::getline(extents, extent, ',')) {
        settings.input_shape.push_back(Positive(flag, extent.c_str()));
      }
      if (settings.input_shape.empty() || settings.input_shape.size() > DPL_MODEL_MAX_INPUT_DIMS) {
        Usage("--input-shape needs 1 to 8 extents");
      }
    } else {
      Usage("unknown flag " + flag);
    }
  }
  return settings;
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(fraction * double(values.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = Parse(argc, argv);
  const std::string path = settings.plugin_dir + "/libdpl_model_" + settings.model + ".so";
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "model_step_perf: dlopen %s: %s\n", path.c_str(), dlerror());
    return 1;
  }
  const auto* plugin =
      static_cast<const dpl_model_plugin_v4*>(dlsym(library, "dpl_model_plugin_v4"));
  if (plugin == nullptr) {
    std::fprintf(stderr, "model_step_perf: %s exports no dpl_model_plugin_v4\n", path.c_str());
    return 1;
  }
  dpl_model_config_v4 config{};
  config.struct_size = sizeof config;
  config.version = DPL_MODEL_ABI_VERSION_4;
  config.options = settings.options.c_str();
  config.device_type = kDLCPU;
  config.num_threads = settings.threads;
  config.input_ndim = static_cast<uint32_t>(settings.input_shape.size());
  std::copy(settings.input_shape.begin(), settings.input_shape.end(), config.input_shape);
  config.num_classes = settings.classes;
  config.precision = settings.precision;
  dpl_model* model = nullptr;
  if (plugin->create(&config, &model) != DPL_OK) {
    std::fprintf(stderr, "model_step_perf: %s\n", plugin->last_error());
    return 1;
  }
  DLTensor input{}, labels{};
  if (plugin->host_batch(model, settings.batch, &input, &labels) != DPL_OK) {
    std::fprintf(stderr, "model_step_perf: %s\n", plugin->last_error());
    return 1;
  }
  std::mt19937 generator(1);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, settings.classes - 1);
  int64_t elements = 1;
  for (int32_t d = 0; d < input.ndim; ++d) elements *= input.shape[d];
  for (int64_t i = 0; i < elements; ++i) static_cast<float*>(input.data)[i] = pixel(generator);
  for (int64_t i = 0; i < settings.batch; ++i)
    static_cast<int64_t*>(labels.data)[i] = label(generator);

  std::vector<double> milliseconds;
  for (int step = 0; step < settings.warmup + settings.steps; ++step) {
    float loss = 0;
    const auto start = std::chrono::steady_clock::now();
    const dpl_status status = plugin->train_step(model, &input, &labels, &loss);
    const auto end = std::chrono::steady_clock::now();
    if (status != DPL_OK) {
      std::fprintf(stderr, "model_step_perf: %s\n", plugin->last_error());
      return 1;
    }
    plugin->zero_gradients(model);
    if (step >= settings.warmup) {
      milliseconds.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
  }
  plugin->destroy(model);
  const char* precision_names[] = {"fp32", "bf16", "fp16"};
  std::printf(
      "%s batch %lld threads %d %s: train_step median %.2f ms (p10 %.2f, p90 %.2f) over "
      "%d steps\n",
      settings.model.c_str(), static_cast<long long>(settings.batch), settings.threads,
      precision_names[settings.precision], Percentile(milliseconds, 0.5),
      Percentile(milliseconds, 0.1), Percentile(milliseconds, 0.9), settings.steps);
  return 0;
}
