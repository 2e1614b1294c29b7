// dpl SDK: header-only C++ helper that turns a libtorch module into a dpl model plugin.
//
// A model author writes an ordinary `torch::nn::Module` whose
//     torch::Tensor forward(torch::Tensor input)
// takes a float32 batch (batch, input_shape...) and returns LOG-PROBABILITIES (batch, classes),
// and exports it with one macro in the plugin's only .cpp file:
//
//     struct ConvNet : torch::nn::Module {
//       explicit ConvNet(const dpl::torch_model::ModelOptions& options);  // or ConvNet()
//       torch::Tensor forward(torch::Tensor input);
//     };
//     DPL_EXPORT_TORCH_MODEL(ConvNet, "convnet", "1.0.0", "one-line description",
//                            (std::vector<int64_t>{1, 28, 28}), 10)
//
// The macro defines the plugin's one exported symbol, `dpl_model_plugin_v2`, implementing every
// entry of dpl/model_v2.h (define DPL_TORCH_MODEL_ABI_VERSION 1 before including this header to
// export `dpl_model_plugin_v1` instead, for launchers that only know model ABI v1). On a CUDA
// device the gradients are views into one flat buffer (the host then reduces a whole bucket with
// one collective), batches come through page-locked host buffers and are copied asynchronously.
// Model options ("key=value,..." from --model-options) reach the module's constructor through
// ModelOptions; a key the constructor never asked for is an error that names the key and the known
// ones. Everything here has internal linkage (an anonymous namespace), so the plugin, built with
// hidden visibility, exports nothing else.
//
// Only include this header from ONE translation unit per plugin (the one with the macro).
#ifndef DPL_TORCH_MODEL_HPP
#define DPL_TORCH_MODEL_HPP

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"

#ifndef DPL_TORCH_MODEL_ABI_VERSION
#define DPL_TORCH_MODEL_ABI_VERSION 2
#endif
#if DPL_TORCH_MODEL_ABI_VERSION != 1 && DPL_TORCH_MODEL_ABI_VERSION != 2
#error "DPL_TORCH_MODEL_ABI_VERSION must be 1 or 2"
#endif

namespace dpl {
namespace torch_model {
namespace {

using support::PluginError;

// What a model's constructor throws for an option value it cannot use; the host reports it as
// DPL_ERR_INVALID_ARGUMENT, prefixed with the model's name.
class InvalidOption : public PluginError {
 public:
  explicit InvalidOption(const std::string& message)
      : PluginError(DPL_ERR_INVALID_ARGUMENT, message) {}
};

// The "key=value,..." model options (--model-options), handed to the module's constructor. Each
// Get* marks its key as known, so after construction every key the module did not ask for is
// reported as unknown (dpl/support/options.hpp).
class ModelOptions : public support::KeyValueOptions {
 public:
  ModelOptions(const char* text, c10::Device device)
      : KeyValueOptions(text, "--model-options"), device_(device) {}

  // The device the model lives on (already checked to exist).
  c10::Device device() const { return device_; }

 private:
  c10::Device device_;
};

// Runs `body` so that no exception crosses the plugin edge (dpl/support/error.hpp): every
// message starts with `model "<name>": `, and libtorch's errors say which call failed.
template <typename Body>
dpl_status Guarded(const char* model_name, const char* what, Body&& body) {
  return support::Guarded(std::string("model \"") + model_name + "\"", [&] {
    try {
      body();
    } catch (const PluginError&) {
      throw;
    } catch (const c10::IndexError& error) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        std::string(what) + ": " + error.what_without_backtrace());
    } catch (const c10::Error& error) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed in libtorch: " +
                                              error.what_without_backtrace());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& error) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed: " + error.what());
    } catch (...) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed: unknown exception");
    }
  });
}

inline std::string ShapeText(const int64_t* shape, int32_t ndim) {
  std::string text = "(";
  for (int32_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

// A tensor's DLTensor view with its own copy of the shape, valid as long as the tensor's storage.
struct TensorView {
  std::vector<int64_t> shape;
  DLTensor tensor{};

  // `page_locked`: host memory from the CUDA host allocator (kDLCUDAHost).
  void Bind(const torch::Tensor& source, bool page_locked = false) {
    shape = source.sizes().vec();
    tensor.data = source.data_ptr();
    tensor.device.device_type = source.is_cuda() ? kDLCUDA : page_locked ? kDLCUDAHost : kDLCPU;
    tensor.device.device_id = source.is_cuda() ? source.get_device() : 0;
    tensor.ndim = static_cast<int32_t>(shape.size());
    const bool is_int64 = source.scalar_type() == torch::kInt64;
    tensor.dtype.code = is_int64 ? kDLInt : kDLFloat;
    tensor.dtype.bits = is_int64 ? 64 : 32;
    tensor.dtype.lanes = 1;
    tensor.shape = shape.data();
    tensor.strides = nullptr;  // compact row-major
    tensor.byte_offset = 0;
  }
};

template <typename Traits>
struct Instance;

// Calls the host's gradient-ready callback once autograd has accumulated one parameter's grad.
template <typename Traits>
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(const Instance<Traits>* instance, uint32_t index)
      : instance_(instance), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    if (instance_->gradient_ready != nullptr) {
      instance_->gradient_ready(instance_->gradient_ready_context, index_);
    }
    return outputs;
  }

 private:
  const Instance<Traits>* instance_;
  uint32_t index_;
};

template <typename Traits>
struct Instance {
  using Module = typename Traits::Module;

  std::shared_ptr<Module> module;
  c10::Device device{c10::kCPU};
  std::vector<int64_t> input_shape;
  std::vector<std::string> parameter_names;
  std::vector<torch::Tensor> parameters;
  std::vector<TensorView> value_views;
  std::vector<TensorView> gradient_views;
  // Every gradient is a view into this one buffer, in parameter order (Note [Flat gradients]).
  torch::Tensor flat_gradients;
  // Host memory handed out by host_batch (page-locked for a CUDA model).
  torch::Tensor host_input, host_labels;
  TensorView host_input_view, host_labels_view;
  // Owning references: autograd keeps only a weak one, and a new accumulator would lose our hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  // Set by the host thread between steps, read by autograd threads during train_step.
  dpl_gradient_ready_fn gradient_ready = nullptr;
  void* gradient_ready_context = nullptr;
  dpl_log_fn log = nullptr;
  void* log_context = nullptr;
};

template <typename Module>
std::shared_ptr<Module> ConstructModule(const ModelOptions& options) {
  if constexpr (std::is_constructible<Module, const ModelOptions&>::value) {
    return std::make_shared<Module>(options);
  } else {
    return std::make_shared<Module>();
  }
}

template <typename Traits>
struct Plugin {
  using Module = typename Traits::Module;
  using ModelInstance = Instance<Traits>;

  static ModelInstance& Get(dpl_model* model) {
    if (model == nullptr) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string("model handle is NULL"));
    }
    return *reinterpret_cast<ModelInstance*>(model);
  }

  static void RequireNotNull(const void* pointer, const char* what) {
    if (pointer == nullptr) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
    }
  }

  // True when this plugin's libtorch has its CUDA part (libtorch_cuda) loaded: a CPU-only build
  // (such as Debian's libtorch) answers every CUDA question through stubs that throw.
  static bool LibtorchHasCuda() {
    try {
      (void)at::detail::getCUDAHooks().versionCUDART();
      return true;
    } catch (const c10::Error&) {
      return false;
    }
  }

  static c10::Device SelectDevice(const dpl_model_config_v1& config) {
    if (config.device_type == kDLCPU) return c10::Device(c10::kCPU);
    if (config.device_type != kDLCUDA) {
      throw PluginError(DPL_ERR_UNSUPPORTED, std::string("device type ") +
                                                 std::to_string(config.device_type) +
                                                 " is not supported; use --device cpu or cuda");
    }
    if (!LibtorchHasCuda()) {
      throw PluginError(
          DPL_ERR_NO_DEVICE,
          std::string("this plugin's libtorch is a CPU-only build (no CUDA support); use --device "
                      "cpu, or rebuild the plugin against a libtorch with CUDA"));
    }
    if (!torch::cuda::is_available()) {
      throw PluginError(DPL_ERR_NO_DEVICE,
                        std::string("libtorch has CUDA but sees no GPU (no driver, or "
                                    "CUDA_VISIBLE_DEVICES hides them all); use --device cpu"));
    }
    const auto count = static_cast<int32_t>(torch::cuda::device_count());
    if (config.device_id < 0 || config.device_id >= count) {
      throw PluginError(DPL_ERR_NO_DEVICE,
                        std::string("CUDA device ") + std::to_string(config.device_id) +
                            " does not exist (" + std::to_string(count) + " visible)");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(config.device_id));
  }

  // Intra-op threads follow the config; inter-op parallelism is pinned to 1 once per process
  // (libtorch allows setting it only before its first inter-op use).
  static void ConfigureThreads(int32_t num_threads) {
    if (num_threads < 1) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string("num_threads must be >= 1, got ") +
                                                      std::to_string(num_threads));
    }
    if (at::get_num_threads() != num_threads) at::set_num_threads(num_threads);
    static const bool interop_pinned = [] {
      try {
        if (at::get_num_interop_threads() != 1) at::set_num_interop_threads(1);
      } catch (const c10::Error&) {
        // Already in use by someone else in this process: keep theirs.
      }
      return true;
    }();
    (void)interop_pinned;
  }

  // Note [Keep freed activations in the heap]
  // Every step allocates and frees the same few multi-megabyte activation and gradient buffers.
  // glibc serves blocks that large with mmap and returns them with munmap, so each step pays
  // page faults on fresh zero pages: measured on the ConvNet at batch 128, one thread, this
  // tripled the step time (145 ms against 50 ms). Raising the mmap and trim thresholds once per
  // process keeps those buffers in the heap for reuse. It only changes where memory comes from.
  static void KeepLargeBuffersInHeap() {
#if defined(__GLIBC__)
    static const bool configured = [] {
      mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's maximum on 64-bit
      mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
      mallopt(M_TOP_PAD, 64 * 1024 * 1024);
      return true;
    }();
    (void)configured;
#endif
  }

  static dpl_status Create(const dpl_model_config_v1* config, dpl_model** out) {
    return Guarded(Traits::kName, "create", [&] {
      RequireNotNull(config, "config");
      RequireNotNull(out, "out");
      *out = nullptr;
      if (config->struct_size < sizeof(dpl_model_config_v1)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          std::string("config struct_size ") + std::to_string(config->struct_size) +
                              " is smaller than " + std::to_string(sizeof(dpl_model_config_v1)) +
                              " (dpl_model_config_v1); rebuild the host against this SDK");
      }
      const c10::Device device = SelectDevice(*config);
      ConfigureThreads(config->num_threads);
      KeepLargeBuffersInHeap();
      ModelOptions options(config->options, device);
      torch::manual_seed(config->seed);
      auto instance = std::make_unique<ModelInstance>();
      instance->module = ConstructModule<Module>(options);
      options.CheckAllKnown();
      instance->device = device;
      instance->log = config->log;
      instance->log_context = config->log_context;
      instance->input_shape = Traits::InputShape();
      instance->module->to(device);
      instance->module->train(true);
      torch::NoGradGuard no_grad;
      std::int64_t elements = 0;
      for (const auto& named : instance->module->named_parameters(/*recurse=*/true)) {
        torch::Tensor parameter = named.value();
        if (parameter.scalar_type() != torch::kFloat32 || !parameter.is_contiguous()) {
          throw PluginError(DPL_ERR_UNSUPPORTED, std::string("parameter ") + named.key() +
                                                     " is not a contiguous float32 tensor");
        }
        instance->parameter_names.push_back(named.key());
        instance->parameters.push_back(parameter);
        elements += parameter.numel();
      }
      // Note [Flat gradients]: every gradient is a view into one zeroed buffer, in parameter
      // order (DDP's gradient_as_bucket_view). A grad that exists before backward is accumulated
      // into in place (grad mode is off during backward), so the views never go stale, the host
      // reduces a bucket of neighbouring gradients with one collective and no copy, and zeroing
      // is one kernel.
      instance->flat_gradients =
          torch::zeros({elements}, torch::TensorOptions().device(device).dtype(torch::kFloat32));
      std::int64_t offset = 0;
      for (auto& parameter : instance->parameters) {
        parameter.mutable_grad() =
            instance->flat_gradients.narrow(0, offset, parameter.numel()).view(parameter.sizes());
        offset += parameter.numel();
      }
      const auto count = instance->parameters.size();
      instance->value_views.resize(count);
      instance->gradient_views.resize(count);
      for (std::size_t i = 0; i < count; ++i) {
        instance->value_views[i].Bind(instance->parameters[i]);
        instance->gradient_views[i].Bind(instance->parameters[i].grad());
        auto accumulator = torch::autograd::impl::grad_accumulator(instance->parameters[i]);
        accumulator->add_post_hook(
            std::make_unique<GradientReadyHook<Traits>>(instance.get(), static_cast<uint32_t>(i)));
        instance->accumulators.push_back(std::move(accumulator));
      }
      if (instance->log != nullptr) {
        const std::string message = std::string("model ") + Traits::kName + " " + Traits::kVersion +
                                    ": " + std::to_string(count) + " parameter tensors, " +
                                    std::to_string(elements) + " elements, on " + device.str();
        instance->log(instance->log_context, DPL_LOG_INFO, message.c_str());
      }
      *out = reinterpret_cast<dpl_model*>(instance.release());
    });
  }

  static void Destroy(dpl_model* model) {
    if (model == nullptr) return;
    try {
      delete reinterpret_cast<ModelInstance*>(model);
    } catch (...) {
      // A destructor that throws has nowhere to report; never let it cross the edge.
    }
  }

  static dpl_status Describe(dpl_model* model, dpl_model_info_v1* info) {
    return Guarded(Traits::kName, "describe", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(info, "info");
      if (info->struct_size < sizeof(dpl_model_info_v1)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          std::string("info struct_size ") + std::to_string(info->struct_size) +
                              " is smaller than " + std::to_string(sizeof(dpl_model_info_v1)));
      }
      if (instance.input_shape.size() > DPL_MODEL_MAX_INPUT_DIMS) {
        throw PluginError(DPL_ERR_INTERNAL, std::string("input has more than ") +
                                                std::to_string(DPL_MODEL_MAX_INPUT_DIMS) + " dims");
      }
      info->input_ndim = static_cast<uint32_t>(instance.input_shape.size());
      for (uint32_t i = 0; i < DPL_MODEL_MAX_INPUT_DIMS; ++i) {
        info->input_shape[i] = i < info->input_ndim ? instance.input_shape[i] : 0;
      }
      info->num_classes = Traits::kNumClasses;
      info->parameter_count = static_cast<uint32_t>(instance.parameters.size());
      info->reserved = 0;
    });
  }

  static dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
    return Guarded(Traits::kName, "parameter", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(parameter, "parameter");
      if (parameter->struct_size < sizeof(dpl_parameter_v1)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string("parameter struct_size ") +
                                                        std::to_string(parameter->struct_size) +
                                                        " is smaller than " +
                                                        std::to_string(sizeof(dpl_parameter_v1)));
      }
      if (index >= instance.parameters.size()) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          std::string("parameter index ") + std::to_string(index) +
                              " is out of range; the model has " +
                              std::to_string(instance.parameters.size()) + " parameters");
      }
      parameter->reserved = 0;
      parameter->name = instance.parameter_names[index].c_str();
      parameter->value = instance.value_views[index].tensor;
      parameter->gradient = instance.gradient_views[index].tensor;
    });
  }

  static dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                             void* user_context) {
    return Guarded(Traits::kName, "set_gradient_ready_callback", [&] {
      ModelInstance& instance = Get(model);
      instance.gradient_ready = callback;
      instance.gradient_ready_context = callback ? user_context : nullptr;
    });
  }

  static dpl_status SetMode(dpl_model* model, dpl_model_mode mode) {
    return Guarded(Traits::kName, "set_mode", [&] {
      ModelInstance& instance = Get(model);
      if (mode != DPL_MODEL_MODE_TRAIN && mode != DPL_MODEL_MODE_EVAL) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          std::string("unknown mode ") + std::to_string(static_cast<int>(mode)));
      }
      instance.module->train(mode == DPL_MODEL_MODE_TRAIN);
    });
  }

  static dpl_status ZeroGradients(dpl_model* model) {
    return Guarded(Traits::kName, "zero_gradients", [&] {
      ModelInstance& instance = Get(model);
      instance.flat_gradients.zero_();
    });
  }

  // Wraps the host's batch without copying, after checking it matches the model.
  static std::pair<torch::Tensor, torch::Tensor> WrapBatch(const ModelInstance& instance,
                                                           const DLTensor* input,
                                                           const DLTensor* labels) {
    RequireNotNull(input, "input");
    RequireNotNull(labels, "labels");
    const auto& shape = instance.input_shape;
    std::vector<int64_t> expected_shape{-1};
    expected_shape.insert(expected_shape.end(), shape.begin(), shape.end());
    const auto expected_ndim = static_cast<int32_t>(expected_shape.size());
    bool input_ok = input->dtype.code == kDLFloat && input->dtype.bits == 32 &&
                    input->dtype.lanes == 1 && input->ndim == expected_ndim &&
                    input->shape != nullptr && input->shape[0] >= 1;
    for (int32_t i = 1; input_ok && i < expected_ndim; ++i) {
      input_ok = input->shape[i] == expected_shape[i];
    }
    if (!input_ok) {
      std::string wanted = "(batch";
      for (auto extent : shape) wanted += ", " + std::to_string(extent);
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "input must be a float32 tensor of shape " + wanted +
                            ") with batch >= 1; got " +
                            (input->shape ? ShapeText(input->shape, input->ndim) : "no shape") +
                            " of dtype code " + std::to_string(input->dtype.code) + " bits " +
                            std::to_string(input->dtype.bits));
    }
    const int64_t batch = input->shape[0];
    if (labels->dtype.code != kDLInt || labels->dtype.bits != 64 || labels->dtype.lanes != 1 ||
        labels->ndim != 1 || labels->shape == nullptr || labels->shape[0] != batch) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "labels must be an int64 tensor of shape (" + std::to_string(batch) +
                            "); got " +
                            (labels->shape ? ShapeText(labels->shape, labels->ndim) : "no shape") +
                            " of dtype code " + std::to_string(labels->dtype.code) + " bits " +
                            std::to_string(labels->dtype.bits));
    }
    for (const DLTensor* tensor : {input, labels}) {
      if (tensor->strides != nullptr) {
        int64_t compact = 1;
        for (int32_t i = tensor->ndim - 1; i >= 0; --i) {
          if (tensor->shape[i] != 1 && tensor->strides[i] != compact) {
            throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                              "input and labels must be compact row-major tensors");
          }
          compact *= tensor->shape[i];
        }
      }
      if (!OnModelDevice(instance, tensor->device) && !InHostMemory(tensor->device)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          "input and labels must live on the model's device " +
                              instance.device.str() + " or in host memory");
      }
      RequireNotNull(tensor->data, "batch data");
    }
    std::vector<int64_t> input_sizes(input->shape, input->shape + input->ndim);
    return {OnDevice(instance, *input, input_sizes, torch::kFloat32, instance.host_input),
            OnDevice(instance, *labels, {batch}, torch::kInt64, instance.host_labels)};
  }

  static bool OnModelDevice(const ModelInstance& instance, const DLDevice& device) {
    return instance.device.is_cuda()
               ? device.device_type == kDLCUDA && device.device_id == instance.device.index()
               : device.device_type == kDLCPU;
  }

  static bool InHostMemory(const DLDevice& device) {
    return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
  }

  // The batch tensor on the model's device. Host memory is copied there (asynchronously when it
  // is the page-locked buffer of host_batch; the copy is ordered before the model's kernels on
  // the same stream, and train_step/eval_step read the loss back before returning, so the host
  // may refill the buffer once they return).
  static torch::Tensor OnDevice(const ModelInstance& instance, const DLTensor& tensor,
                                c10::IntArrayRef sizes, torch::ScalarType type,
                                const torch::Tensor& host_buffer) {
    void* data = static_cast<char*>(tensor.data) + tensor.byte_offset;
    if (OnModelDevice(instance, tensor.device)) {
      return torch::from_blob(data, sizes,
                              torch::TensorOptions().device(instance.device).dtype(type));
    }
    torch::Tensor host =
        host_buffer.defined() && data == host_buffer.data_ptr()
            ? host_buffer.narrow(0, 0, sizes[0]).view(sizes)  // keeps the pinned allocator's view
            : torch::from_blob(data, sizes, torch::TensorOptions().dtype(type));
    if (!instance.device.is_cuda()) return host;
    return host.to(instance.device, type, /*non_blocking=*/true);
  }

  static dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                              float* loss) {
    return Guarded(Traits::kName, "train_step", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(loss, "loss");
      const std::pair<torch::Tensor, torch::Tensor> batch = WrapBatch(instance, input, labels);
      torch::Tensor log_probabilities = instance.module->forward(batch.first);
      torch::Tensor mean_loss = torch::nll_loss(log_probabilities, batch.second);
      mean_loss.backward();
      *loss = mean_loss.item<float>();
    });
  }

  static dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                             double* loss_sum, int64_t* correct) {
    return Guarded(Traits::kName, "eval_step", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(loss_sum, "loss_sum");
      RequireNotNull(correct, "correct");
      const std::pair<torch::Tensor, torch::Tensor> batch = WrapBatch(instance, input, labels);
      torch::NoGradGuard no_grad;
      const bool was_training = instance.module->is_training();
      instance.module->eval();
      struct RestoreMode {
        Module& module;
        bool training;
        ~RestoreMode() { module.train(training); }
      } restore{*instance.module, was_training};
      torch::Tensor log_probabilities = instance.module->forward(batch.first);
      torch::Tensor summed =
          torch::nll_loss(log_probabilities, batch.second, {}, at::Reduction::Sum);
      *loss_sum = summed.item<double>();
      *correct = log_probabilities.argmax(1).eq(batch.second).sum().item<int64_t>();
    });
  }

  static constexpr const char* kModelNameKey = "dpl.model";

  static dpl_status SaveState(dpl_model* model, const char* path) {
    return Guarded(Traits::kName, "save_state", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(path, "path");
      torch::serialize::OutputArchive archive;
      archive.write(kModelNameKey, c10::IValue(std::string(Traits::kName)));
      for (const auto& named : instance.module->named_parameters(true)) {
        archive.write(named.key(), named.value());
      }
      for (const auto& named : instance.module->named_buffers(true)) {
        archive.write(named.key(), named.value(), /*is_buffer=*/true);
      }
      try {
        archive.save_to(path);
      } catch (const c10::Error& error) {
        throw PluginError(DPL_ERR_IO, std::string("cannot write state file ") + path + ": " +
                                          error.what_without_backtrace());
      }
    });
  }

  // Copies every saved tensor INTO the existing one, so parameter views stay valid.
  static dpl_status LoadState(dpl_model* model, const char* path) {
    return Guarded(Traits::kName, "load_state", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(path, "path");
      const std::string prefix = std::string("state file ") + path;
      torch::serialize::InputArchive archive;
      try {
        archive.load_from(path, instance.device);
      } catch (const c10::Error& error) {
        throw PluginError(DPL_ERR_IO,
                          prefix + " cannot be read: " + error.what_without_backtrace());
      }
      c10::IValue saved_name;
      if (!archive.try_read(kModelNameKey, saved_name) || !saved_name.isString() ||
          saved_name.toStringRef() != Traits::kName) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          prefix + " was not saved by this model (\"" + Traits::kName + "\")");
      }
      torch::NoGradGuard no_grad;
      auto copy_into = [&](const std::string& name, torch::Tensor& target, bool is_buffer) {
        torch::Tensor saved;  // undefined, so try_read hands over the saved tensor itself
        if (!archive.try_read(name, saved, is_buffer)) {
          throw PluginError(DPL_ERR_INVALID_ARGUMENT, prefix + " has no tensor \"" + name + "\"");
        }
        if (saved.sizes() != target.sizes()) {
          throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                            prefix + ": tensor \"" + name + "\" has shape " +
                                c10::str(saved.sizes()) + ", the model expects " +
                                c10::str(target.sizes()));
        }
        target.copy_(saved);
      };
      for (auto& named : instance.module->named_parameters(true)) {
        copy_into(named.key(), named.value(), /*is_buffer=*/false);
      }
      for (auto& named : instance.module->named_buffers(true)) {
        copy_into(named.key(), named.value(), /*is_buffer=*/true);
      }
    });
  }

  static const char* LastError() {
    return support::LastError();
  }

  static dpl_status HostBatch(dpl_model* model, int64_t capacity, DLTensor* input,
                              DLTensor* labels) {
    return Guarded(Traits::kName, "host_batch", [&] {
      ModelInstance& instance = Get(model);
      RequireNotNull(input, "input");
      RequireNotNull(labels, "labels");
      if (capacity < 1) {
        throw PluginError(
            DPL_ERR_INVALID_ARGUMENT,
            std::string("host_batch capacity must be >= 1, got ") + std::to_string(capacity));
      }
      if (!instance.host_input.defined() || instance.host_input.size(0) != capacity) {
        // Page-locked memory exists only with CUDA; a CPU model's batches need no copy at all.
        const bool page_locked = instance.device.is_cuda();
        const auto options = torch::TensorOptions().pinned_memory(page_locked);
        std::vector<int64_t> input_sizes{capacity};
        input_sizes.insert(input_sizes.end(), instance.input_shape.begin(),
                           instance.input_shape.end());
        instance.host_input = torch::empty(input_sizes, options.dtype(torch::kFloat32));
        instance.host_labels = torch::empty({capacity}, options.dtype(torch::kInt64));
        instance.host_input_view.Bind(instance.host_input, page_locked);
        instance.host_labels_view.Bind(instance.host_labels, page_locked);
      }
      *input = instance.host_input_view.tensor;
      *labels = instance.host_labels_view.tensor;
    });
  }

  // The host-memory side of read_tensors / write_tensors: one float32 tensor per parameter over
  // `host`, after checking that `count` is exactly what the model holds.
  static std::vector<torch::Tensor> HostSlices(const ModelInstance& instance, const float* host,
                                               uint64_t count) {
    RequireHostCount(instance, host, count);
    std::vector<torch::Tensor> slices;
    int64_t offset = 0;
    for (const auto& parameter : instance.parameters) {
      slices.push_back(torch::from_blob(const_cast<float*>(host) + offset, parameter.sizes(),
                                        torch::TensorOptions().dtype(torch::kFloat32)));
      offset += parameter.numel();
    }
    return slices;
  }

  static void RequireHostCount(const ModelInstance& instance, const float* host, uint64_t count) {
    RequireNotNull(host, "host");
    uint64_t total = 0;
    for (const auto& parameter : instance.parameters) total += uint64_t(parameter.numel());
    if (count != total) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        std::string("the host buffer holds ") + std::to_string(count) +
                            " floats, the parameters " + std::to_string(total));
    }
  }

  static torch::Tensor Selected(ModelInstance& instance, dpl_model_tensors which, size_t index) {
    return which == DPL_MODEL_TENSORS_VALUES ? instance.parameters[index]
                                             : instance.parameters[index].mutable_grad();
  }

  static void RequireKnownTensors(dpl_model_tensors which) {
    if (which != DPL_MODEL_TENSORS_VALUES && which != DPL_MODEL_TENSORS_GRADIENTS) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string("unknown tensor set ") +
                                                      std::to_string(static_cast<int>(which)));
    }
  }

  // Blocking copies (non_blocking = false): from a device they wait for all work issued before on
  // the default stream, collectives included.
  static dpl_status ReadTensors(dpl_model* model, dpl_model_tensors which, float* host,
                                uint64_t count) {
    return Guarded(Traits::kName, "read_tensors", [&] {
      ModelInstance& instance = Get(model);
      RequireKnownTensors(which);
      torch::NoGradGuard no_grad;
      if (which == DPL_MODEL_TENSORS_GRADIENTS) {  // one buffer: one copy (Note [Flat gradients])
        RequireHostCount(instance, host, count);
        torch::from_blob(host, {int64_t(count)}, torch::TensorOptions().dtype(torch::kFloat32))
            .copy_(instance.flat_gradients);
        return;
      }
      std::vector<torch::Tensor> slices = HostSlices(instance, host, count);
      for (size_t i = 0; i < slices.size(); ++i) slices[i].copy_(Selected(instance, which, i));
    });
  }

  static dpl_status WriteTensors(dpl_model* model, dpl_model_tensors which, const float* host,
                                 uint64_t count) {
    return Guarded(Traits::kName, "write_tensors", [&] {
      ModelInstance& instance = Get(model);
      RequireKnownTensors(which);
      std::vector<torch::Tensor> slices = HostSlices(instance, host, count);
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < slices.size(); ++i) Selected(instance, which, i).copy_(slices[i]);
    });
  }

#if DPL_TORCH_MODEL_ABI_VERSION == 2
  using Table_t = dpl_model_plugin_v2;
#else
  using Table_t = dpl_model_plugin_v1;
#endif

  static constexpr Table_t Table() {
    return Table_t {
      dpl_plugin_header{
          sizeof(Table_t), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, DPL_TORCH_MODEL_ABI_VERSION,
          Traits::kName,   Traits::kVersion, Traits::kDescription},
          &Create, &Destroy, &Describe, &Parameter, &SetGradientReadyCallback, &SetMode,
          &ZeroGradients, &TrainStep, &EvalStep, &SaveState, &LoadState, &LastError,
#if DPL_TORCH_MODEL_ABI_VERSION == 2
          &HostBatch, &ReadTensors, &WriteTensors,
#endif
    };
  }
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#if DPL_TORCH_MODEL_ABI_VERSION == 2
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v2
#define DPL_TORCH_MODEL_ENTRY_SYMBOL DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v2)
#else
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v1
#define DPL_TORCH_MODEL_ENTRY_SYMBOL DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1)
#endif

// Exports `ModuleType` as the plugin's `dpl_model_plugin_v2` (or _v1) table. `input_shape` is one
// sample's shape as a parenthesised std::vector<int64_t> expression, e.g.
// (std::vector<int64_t>{1, 28, 28}); `num_classes` the number of output classes.
#define DPL_EXPORT_TORCH_MODEL(ModuleType, name, version, description, input_shape, num_classes) \
  namespace {                                                                                    \
  struct DplTorchModelTraits {                                                                   \
    using Module = ModuleType;                                                                   \
    static constexpr const char* kName = name;                                                   \
    static constexpr const char* kVersion = version;                                             \
    static constexpr const char* kDescription = description;                                     \
    static constexpr int64_t kNumClasses = num_classes;                                          \
    static std::vector<int64_t> InputShape() { return input_shape; }                             \
  };                                                                                             \
  }                                                                                              \
  extern "C" {                                                                                   \
  DPL_PLUGIN_EXPORT extern const DPL_TORCH_MODEL_TABLE_TYPE dpl_torch_model_table                \
      DPL_TORCH_MODEL_ENTRY_SYMBOL;                                                              \
  const DPL_TORCH_MODEL_TABLE_TYPE dpl_torch_model_table =                                       \
      ::dpl::torch_model::Plugin<DplTorchModelTraits>::Table();                                  \
  }

#endif  // DPL_TORCH_MODEL_HPP
