// The one in-process interface of a model plugin, whatever model ABI version it was built for.
//
// A model plugin's table is turned into this by the adapter of its version
// (plugin_host/adapters/model_vN.cpp): the entries of the newest table (dpl/model.h's
// dpl_model_plugin), in its order, with its types and contracts, so the host is written against
// one ABI only. An adapter hands an older plugin the config it knows (the prefix of the newest
// config, with its own struct_size and version) and fills what the older info lacks with zeros.
// The entries of a capability the plugin lacks are empty (callers ask Has first).
#pragma once

#include <functional>
#include <string>

#include "common/status.hpp"
#include "dpl/model.h"
#include "plugin_host/capabilities.hpp"

namespace dpl::plugin_host {

struct ModelInterface {
  // What the table's version can do (the registry sets them: Adapter::capabilities). Of those,
  // `per_instance` may be lacking in one table or one instance (Note [Capabilities of an
  // instance]): training::Model answers for its instance.
  CapabilitySet<ModelCapability> capabilities;
  CapabilitySet<ModelCapability> per_instance;
  // Of `per_instance`, those of an instance that described itself as `info`, or what is wrong
  // with the plugin (DPL_ERR_INTERNAL: its info says what its table cannot do). Set by the
  // adapter of a version that has per-instance capabilities.
  std::function<Result<CapabilitySet<ModelCapability>>(const dpl_model_info& info)>
      described_capabilities = [](const dpl_model_info&) {
        return Result<CapabilitySet<ModelCapability>>(CapabilitySet<ModelCapability>());
      };
  // The plugin's ABI for messages, e.g. "model ABI v2" (never for decisions: ask Has).
  std::string abi;

  bool Has(ModelCapability capability) const { return capabilities.Has(capability); }

  // Every model has these. The caller fills the newest config; the adapter sets struct_size and
  // version for the plugin. describe fills the newest info whole (struct_size included).
  std::function<dpl_status(const dpl_model_config* config, dpl_model** out)> create;
  std::function<void(dpl_model* model)> destroy;
  std::function<dpl_status(dpl_model* model, dpl_model_info* info)> describe;
  std::function<dpl_status(dpl_model* model, uint32_t index, dpl_parameter* parameter)> parameter;
  std::function<dpl_status(dpl_model* model, dpl_gradient_ready_fn callback, void* context)>
      set_gradient_ready_callback;
  std::function<dpl_status(dpl_model* model, dpl_model_mode mode)> set_mode;
  std::function<dpl_status(dpl_model* model)> zero_gradients;
  // Typed batches of the described input and target (kTypedSamples; else float32 input and int64
  // class labels). *loss is the mean over every target element.
  std::function<dpl_status(dpl_model* model, const DLTensor* input, const DLTensor* target,
                           float* loss)>
      train_step;
  // Fills *result (struct_size set by the caller): an older plugin's (loss_sum, correct) with one
  // element per sample.
  std::function<dpl_status(dpl_model* model, const DLTensor* input, const DLTensor* target,
                           dpl_eval_result* result)>
      eval_step;
  std::function<dpl_status(dpl_model* model, const char* path)> save_state;
  std::function<dpl_status(dpl_model* model, const char* path)> load_state;
  std::function<const char*()> last_error;

  // kHostCopy.
  std::function<dpl_status(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* target)>
      host_batch;
  std::function<dpl_status(dpl_model* model, dpl_model_tensors which, float* host, uint64_t count)>
      read_tensors;
  std::function<dpl_status(dpl_model* model, dpl_model_tensors which, const float* host,
                           uint64_t count)>
      write_tensors;
  // kBuffers.
  std::function<dpl_status(dpl_model* model, uint32_t index, dpl_buffer* buffer)> buffer;
  std::function<dpl_status(dpl_model* model, void* host, uint64_t bytes)> read_buffers;
  std::function<dpl_status(dpl_model* model, const void* host, uint64_t bytes)> write_buffers;
  // kRngState.
  std::function<dpl_status(dpl_model* model, void* state, uint64_t capacity, uint64_t* size)>
      rng_state;
  std::function<dpl_status(dpl_model* model, const void* state, uint64_t size)> set_rng_state;
  // kHostBatchSlots.
  std::function<dpl_status(dpl_model* model, uint32_t slot, int64_t capacity, DLTensor* input,
                           DLTensor* target)>
      host_batch_slot;
  // kLossScale.
  std::function<dpl_status(dpl_model* model, float scale)> set_loss_scale;
  // kDeviceOptimizer (else empty).
  std::function<dpl_status(dpl_model* model, const dpl_optimizer_config* config)> set_optimizer;
  std::function<dpl_status(dpl_model* model, dpl_gradient_statistics* statistics)>
      gradient_statistics;
  std::function<dpl_status(dpl_model* model, const dpl_update* update)> apply_update;
  // kShareParameters (else empty): its parameters' values in the host's memory, one copy for a
  // machine's workers.
  std::function<dpl_status(dpl_model* model, float* values, uint64_t count)> share_parameters;
  // kShareGradients (else empty): its gradients in the host's memory (each worker's own area of
  // the shared memory).
  std::function<dpl_status(dpl_model* model, float* gradients, uint64_t count)> share_gradients;
};

// The oldest model ABI with `capability`, for messages ("model ABI v3"): the version a plugin
// must be rebuilt against to have it.
std::string FirstAbiWith(ModelCapability capability);

}  // namespace dpl::plugin_host
