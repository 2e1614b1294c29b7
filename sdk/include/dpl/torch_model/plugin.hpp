// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the C entry points of
// model ABI v1 to v4 over an Instance (dpl/torch_model/instance.hpp).
//
// Plugin<Traits> is the whole plugin but the network. Traits says what it is and builds it:
//     struct Traits {
//       static constexpr const char* kName, * kVersion, * kDescription;
//       using Options = ...;  // a support::KeyValueOptions, built as Options(text, context)
//       static DataSpec Accepts();  // the data the network takes (dpl/torch_model/data.hpp)
//       static NetworkSpec Build(Options& options, const BuildContext& context);
//     };
// DPL_EXPORT_TORCH_MODEL (dpl/torch_model.hpp) writes such a Traits for a torch::nn::Module; the
// TorchScript plugin (models/torchscript) writes one that loads a file. Either exports one table:
//     const dpl_model_plugin_v4 table = Plugin<Traits>::TableV4();  // or TableV3() .. TableV1()
//
// TableV4 runs the optimizer on the model's device when the host asks for it (Note [Device
// optimizer] in dpl/torch_model/device_optimizer.hpp): info.flags says DPL_MODEL_DEVICE_OPTIMIZER.
#ifndef DPL_TORCH_MODEL_PLUGIN_HPP
#define DPL_TORCH_MODEL_PLUGIN_HPP

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "dpl/model.h"
#include "dpl/support/error.hpp"
#include "dpl/torch_model/data.hpp"
#include "dpl/torch_model/device.hpp"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/instance.hpp"
#include "dpl/torch_model/large_blocks.hpp"
#include "dpl/torch_model/libtorch_versions.hpp"
#include "dpl/torch_model/network.hpp"
#include "dpl/torch_model/precision.hpp"
#include "dpl/torch_model/warnings.hpp"

namespace dpl {
namespace torch_model {
namespace {

// What create knows when Traits::Build runs.
struct BuildContext {
  c10::Device device{c10::kCPU};
  DataShape data;  // resolved against Traits::Accepts(); num_classes 0 = not known
  dpl_precision precision = DPL_PRECISION_FP32;
  dpl_log_fn log = nullptr;
  void* log_context = nullptr;

  void Log(dpl_log_level level, const std::string& message) const {
    if (log != nullptr) log(log_context, level, message.c_str());
  }
};

template <typename Traits>
struct Plugin {
  static Instance& Get(dpl_model* model) {
    if (model == nullptr) throw InvalidArgument("model handle is NULL");
    return *reinterpret_cast<Instance*>(model);
  }

  // Runs an entry point's body on the instance with its device current on this thread.
  template <typename Body>
  static dpl_status OnInstance(dpl_model* model, const char* what, Body&& body) {
    return Guarded(Traits::kName, what, [&] {
      Instance& instance = Get(model);
      DeviceScope device(instance.device());
      WarningHandlerScope warnings(instance.warnings());
      body(instance);
    });
  }

  // The data `config` describes, and its precision into `context` (model ABI v3 and later).
  template <uint32_t kAbi, typename Config>
  static DataShape HostDataOf(const Config& config, BuildContext* context) {
    if constexpr (kAbi >= 3) {
      if (config.struct_size >= sizeof(dpl_model_config_v3)) {
        context->precision = CheckPrecision(config.precision, context->device);
        if constexpr (kAbi >= 4) {
          if (config.struct_size >= sizeof(dpl_model_config_v4)) return HostData(config);
        }
        return HostData(reinterpret_cast<const dpl_model_config_v3&>(config));
      }
    }
    return DataShape{};
  }

  // `Config` is dpl_model_config_v1 (ABI v1, v2), dpl_model_config_v3 (ABI v3, which also reads
  // a v1-sized config as one that says nothing about the data) or dpl_model_config_v4 (ABI v4,
  // which reads a v3-sized config as one that says nothing about the samples' types).
  template <uint32_t kAbi, typename Config>
  static dpl_status Create(const Config* config, dpl_model** out) {
    return Guarded(Traits::kName, "create", [&] {
      RequireNotNull(config, "config");
      RequireNotNull(out, "out");
      *out = nullptr;
      if (config->struct_size < sizeof(dpl_model_config_v1)) {
        throw InvalidArgument("config struct_size " + std::to_string(config->struct_size) +
                              " is smaller than " + std::to_string(sizeof(dpl_model_config_v1)) +
                              " (dpl_model_config_v1); rebuild the host against this SDK");
      }
      auto warnings = std::make_unique<WarningLog>(Traits::kName, config->log, config->log_context);
      WarningHandlerScope warnings_scope(warnings.get());
      BuildContext context;
      context.device = SelectDevice(config->device_type, config->device_id);
      context.log = config->log;
      context.log_context = config->log_context;
      DeviceScope device(context.device);
      ConfigureThreads(config->num_threads);
      KeepLargeBuffersInHeap();
      context.data = ResolveData(Traits::Accepts(), HostDataOf<kAbi>(*config, &context));
      if (context.precision == DPL_PRECISION_BF16 && context.device.is_cpu() &&
          !CpuHasBfloat16Instructions()) {
        context.Log(DPL_LOG_WARNING,
                    "this CPU has no bfloat16 instructions (AVX512-BF16, AMX-BF16): the bf16 "
                    "forward pass is emulated and likely slower than fp32");
      }
      typename Traits::Options options(config->options, context);
      torch::manual_seed(config->seed);
      NetworkSpec spec = Traits::Build(options, context);
      InstanceSettings settings;
      settings.model_name = Traits::kName;
      settings.model_version = Traits::kVersion;
      settings.device = context.device;
      settings.precision = context.precision;
      // The helper's own option, after the network's (so the known-options list names those
      // first); model ABI v1/v2 hosts have no buffers to broadcast.
      settings.broadcast_buffers = kAbi >= 3 && options.GetBool("broadcast_buffers", true);
      // An older host reads zeros after zero_gradients (Note [Replaced gradients]).
      settings.replace_gradients = kAbi >= 4 && config->struct_size >= sizeof(dpl_model_config_v4);
      settings.log = config->log;
      settings.log_context = config->log_context;
      options.CheckAllKnown();
      DataShape data = context.data;
      data.input_shape = spec.input_shape;
      data.num_classes = spec.num_classes;
      auto instance = std::make_unique<Instance>(std::move(settings), std::move(spec),
                                                 std::move(data), std::move(warnings));
      instance->Log(DPL_LOG_INFO, instance->Summary());
      *out = reinterpret_cast<dpl_model*>(instance.release());
    });
  }

  static void Destroy(dpl_model* model) {
    if (model == nullptr) return;
    try {
      auto* instance = reinterpret_cast<Instance*>(model);
      DeviceScope device(instance->device());
      WarningHandlerScope warnings(instance->warnings());
      delete instance;
    } catch (...) {
      // A destructor that throws has nowhere to report; never let it cross the edge.
    }
  }

  static void RequireStructSize(uint32_t given, size_t needed, const char* what) {
    if (given < needed) {
      throw InvalidArgument(std::string(what) + " struct_size " + std::to_string(given) +
                            " is smaller than " + std::to_string(needed));
    }
  }

  static dpl_status DescribeV1(dpl_model* model, dpl_model_info_v1* info) {
    return OnInstance(model, "describe", [&](Instance& instance) {
      RequireNotNull(info, "info");
      RequireStructSize(info->struct_size, sizeof(dpl_model_info_v1), "info");
      instance.FillInfo(info);
    });
  }

  static dpl_status DescribeV3(dpl_model* model, dpl_model_info_v3* info) {
    return OnInstance(model, "describe", [&](Instance& instance) {
      RequireNotNull(info, "info");
      RequireStructSize(info->struct_size, sizeof(dpl_model_info_v1), "info");
      instance.FillInfo(reinterpret_cast<dpl_model_info_v1*>(info));
      if (info->struct_size >= sizeof(dpl_model_info_v3)) instance.FillInfoV3(info);
    });
  }

  static dpl_status DescribeV4(dpl_model* model, dpl_model_info_v4* info) {
    return OnInstance(model, "describe", [&](Instance& instance) {
      RequireNotNull(info, "info");
      RequireStructSize(info->struct_size, sizeof(dpl_model_info_v1), "info");
      instance.FillInfo(reinterpret_cast<dpl_model_info_v1*>(info));
      if (info->struct_size >= sizeof(dpl_model_info_v3)) {
        instance.FillInfoV3(reinterpret_cast<dpl_model_info_v3*>(info));
      }
      if (info->struct_size >= sizeof(dpl_model_info_v4)) instance.FillInfoV4(info);
    });
  }

  static dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
    return OnInstance(model, "parameter", [&](Instance& instance) {
      RequireNotNull(parameter, "parameter");
      RequireStructSize(parameter->struct_size, sizeof(dpl_parameter_v1), "parameter");
      instance.FillParameter(index, parameter);
    });
  }

  static dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                             void* user_context) {
    return Guarded(Traits::kName, "set_gradient_ready_callback",
                   [&] { Get(model).SetGradientReadyCallback(callback, user_context); });
  }

  static dpl_status SetMode(dpl_model* model, dpl_model_mode mode) {
    return OnInstance(model, "set_mode", [&](Instance& instance) { instance.SetMode(mode); });
  }

  static dpl_status ZeroGradients(dpl_model* model) {
    return OnInstance(model, "zero_gradients",
                      [&](Instance& instance) { instance.ZeroGradients(); });
  }

  static dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                              float* loss) {
    return OnInstance(model, "train_step", [&](Instance& instance) {
      RequireNotNull(loss, "loss");
      LargeBlockStep step;
      *loss = instance.TrainStep(input, labels);
    });
  }

  static dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                             double* loss_sum, int64_t* correct) {
    return OnInstance(model, "eval_step", [&](Instance& instance) {
      RequireNotNull(loss_sum, "loss_sum");
      RequireNotNull(correct, "correct");
      LargeBlockStep step;
      const Evaluation evaluation = instance.EvalStep(input, labels);
      *loss_sum = evaluation.loss_sum;
      *correct = evaluation.correct;
    });
  }

  static dpl_status EvalStepV4(dpl_model* model, const DLTensor* input, const DLTensor* target,
                               dpl_eval_result_v4* result) {
    return OnInstance(model, "eval_step", [&](Instance& instance) {
      RequireNotNull(result, "result");
      RequireStructSize(result->struct_size, sizeof(dpl_eval_result_v4), "result");
      LargeBlockStep step;
      const Evaluation evaluation = instance.EvalStep(input, target);
      result->loss_sum = evaluation.loss_sum;
      result->elements = evaluation.elements;
      result->correct = evaluation.correct;
    });
  }

  template <uint32_t kAbi>
  static dpl_status SaveState(dpl_model* model, const char* path) {
    return OnInstance(model, "save_state", [&](Instance& instance) {
      RequireNotNull(path, "path");
      instance.SaveState(path, kAbi);
    });
  }

  static dpl_status LoadState(dpl_model* model, const char* path) {
    return OnInstance(model, "load_state", [&](Instance& instance) {
      RequireNotNull(path, "path");
      instance.LoadState(path);
    });
  }

  static const char* LastError() { return support::LastError(); }

  static dpl_status HostBatch(dpl_model* model, int64_t capacity, DLTensor* input,
                              DLTensor* labels) {
    return OnInstance(model, "host_batch",
                      [&](Instance& instance) { instance.HostBatch(0, capacity, input, labels); });
  }

  static dpl_status ReadTensors(dpl_model* model, dpl_model_tensors which, float* host,
                                uint64_t count) {
    return OnInstance(model, "read_tensors",
                      [&](Instance& instance) { instance.ReadTensors(which, host, count); });
  }

  static dpl_status WriteTensors(dpl_model* model, dpl_model_tensors which, const float* host,
                                 uint64_t count) {
    return OnInstance(model, "write_tensors",
                      [&](Instance& instance) { instance.WriteTensors(which, host, count); });
  }

  static dpl_status Buffer(dpl_model* model, uint32_t index, dpl_buffer_v3* buffer) {
    return OnInstance(model, "buffer", [&](Instance& instance) {
      RequireNotNull(buffer, "buffer");
      RequireStructSize(buffer->struct_size, sizeof(dpl_buffer_v3), "buffer");
      instance.FillBuffer(index, buffer);
    });
  }

  static dpl_status ReadBuffers(dpl_model* model, void* host, uint64_t bytes) {
    return OnInstance(model, "read_buffers",
                      [&](Instance& instance) { instance.ReadBuffers(host, bytes); });
  }

  static dpl_status WriteBuffers(dpl_model* model, const void* host, uint64_t bytes) {
    return OnInstance(model, "write_buffers",
                      [&](Instance& instance) { instance.WriteBuffers(host, bytes); });
  }

  static dpl_status RngState(dpl_model* model, void* state, uint64_t capacity, uint64_t* size) {
    return OnInstance(model, "rng_state",
                      [&](Instance& instance) { instance.RngState(state, capacity, size); });
  }

  static dpl_status SetRngState(dpl_model* model, const void* state, uint64_t size) {
    return OnInstance(model, "set_rng_state",
                      [&](Instance& instance) { instance.SetRngState(state, size); });
  }

  static dpl_status HostBatchSlot(dpl_model* model, uint32_t slot, int64_t capacity,
                                  DLTensor* input, DLTensor* labels) {
    return OnInstance(model, "host_batch_slot", [&](Instance& instance) {
      instance.HostBatch(slot, capacity, input, labels);
    });
  }

  static dpl_status SetLossScale(dpl_model* model, float scale) {
    return OnInstance(model, "set_loss_scale",
                      [&](Instance& instance) { instance.SetLossScale(scale); });
  }

  static dpl_status SetOptimizer(dpl_model* model, const dpl_optimizer_config_v4* config) {
    return OnInstance(model, "set_optimizer", [&](Instance& instance) {
      RequireNotNull(config, "config");
      RequireStructSize(config->struct_size, sizeof(dpl_optimizer_config_v4), "config");
      instance.SetOptimizer(*config);
    });
  }

  static dpl_status GradientStatistics(dpl_model* model, dpl_gradient_statistics_v4* statistics) {
    return OnInstance(model, "gradient_statistics", [&](Instance& instance) {
      RequireNotNull(statistics, "statistics");
      RequireStructSize(statistics->struct_size, sizeof(dpl_gradient_statistics_v4), "statistics");
      instance.GradientStatistics(statistics);
    });
  }

  static dpl_status ApplyUpdate(dpl_model* model, const dpl_update_v4* update) {
    return OnInstance(model, "apply_update", [&](Instance& instance) {
      RequireNotNull(update, "update");
      RequireStructSize(update->struct_size, sizeof(dpl_update_v4), "update");
      instance.ApplyUpdate(*update);
    });
  }

  static dpl_status ShareParameters(dpl_model* model, float* values, uint64_t count) {
    return OnInstance(model, "share_parameters",
                      [&](Instance& instance) { instance.ShareParameters(values, count); });
  }

  static dpl_status ShareGradients(dpl_model* model, float* gradients, uint64_t count) {
    return OnInstance(model, "share_gradients",
                      [&](Instance& instance) { instance.ShareGradients(gradients, count); });
  }

  static constexpr dpl_plugin_header Header(size_t size, uint32_t abi_version) {
    return dpl_plugin_header{static_cast<uint32_t>(size),
                             DPL_PLUGIN_MAGIC,
                             DPL_PLUGIN_KIND_MODEL,
                             abi_version,
                             Traits::kName,
                             Traits::kVersion,
                             Traits::kDescription};
  }

  static constexpr dpl_model_plugin_v1 TableV1() {
    return dpl_model_plugin_v1{Header(sizeof(dpl_model_plugin_v1), DPL_MODEL_ABI_VERSION_1),
                               &Create<1, dpl_model_config_v1>,
                               &Destroy,
                               &DescribeV1,
                               &Parameter,
                               &SetGradientReadyCallback,
                               &SetMode,
                               &ZeroGradients,
                               &TrainStep,
                               &EvalStep,
                               &SaveState<1>,
                               &LoadState,
                               &LastError};
  }

  static constexpr dpl_model_plugin_v2 TableV2() {
    return dpl_model_plugin_v2{Header(sizeof(dpl_model_plugin_v2), DPL_MODEL_ABI_VERSION_2),
                               &Create<2, dpl_model_config_v1>,
                               &Destroy,
                               &DescribeV1,
                               &Parameter,
                               &SetGradientReadyCallback,
                               &SetMode,
                               &ZeroGradients,
                               &TrainStep,
                               &EvalStep,
                               &SaveState<2>,
                               &LoadState,
                               &LastError,
                               &HostBatch,
                               &ReadTensors,
                               &WriteTensors};
  }

  static constexpr dpl_model_plugin_v3 TableV3() {
    return dpl_model_plugin_v3{Header(sizeof(dpl_model_plugin_v3), DPL_MODEL_ABI_VERSION_3),
                               &Create<3, dpl_model_config_v3>,
                               &Destroy,
                               &DescribeV3,
                               &Parameter,
                               &SetGradientReadyCallback,
                               &SetMode,
                               &ZeroGradients,
                               &TrainStep,
                               &EvalStep,
                               &SaveState<3>,
                               &LoadState,
                               &LastError,
                               &HostBatch,
                               &ReadTensors,
                               &WriteTensors,
                               &Buffer,
                               &ReadBuffers,
                               &WriteBuffers,
                               &RngState,
                               &SetRngState,
                               &HostBatchSlot,
                               &SetLossScale};
  }

  static constexpr dpl_model_plugin_v4 TableV4() {
    return dpl_model_plugin_v4{Header(sizeof(dpl_model_plugin_v4), DPL_MODEL_ABI_VERSION_4),
                               &Create<4, dpl_model_config_v4>,
                               &Destroy,
                               &DescribeV4,
                               &Parameter,
                               &SetGradientReadyCallback,
                               &SetMode,
                               &ZeroGradients,
                               &TrainStep,
                               &EvalStepV4,
                               &SaveState<4>,
                               &LoadState,
                               &LastError,
                               &HostBatch,
                               &ReadTensors,
                               &WriteTensors,
                               &Buffer,
                               &ReadBuffers,
                               &WriteBuffers,
                               &RngState,
                               &SetRngState,
                               &HostBatchSlot,
                               &SetLossScale,
                               &SetOptimizer,
                               &GradientStatistics,
                               &ApplyUpdate,
                               &ShareParameters,
                               &ShareGradients};
  }
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_PLUGIN_HPP
