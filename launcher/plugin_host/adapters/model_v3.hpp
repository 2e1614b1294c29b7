// What the model adapters take from model ABI v3 (model_v3.cpp): the entries v3 added, which
// later versions kept with their types.
#pragma once

#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/model_v1.hpp"
#include "plugin_host/adapters/model_v2.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::plugin_host::adapters {

// Every entry v3 requires, in the order of its checks, of `table` (a model table of ABI v3 or
// later).
template <typename Table>
RequiredEntries RequiredModelV3Entries(const Table* t) {
  return Joined({{DPL_REQUIRED_ENTRY(t, buffer), DPL_REQUIRED_ENTRY(t, read_buffers),
                  DPL_REQUIRED_ENTRY(t, write_buffers), DPL_REQUIRED_ENTRY(t, rng_state),
                  DPL_REQUIRED_ENTRY(t, set_rng_state), DPL_REQUIRED_ENTRY(t, host_batch_slot)},
                 RequiredHostCopyEntries(t),
                 RequiredModelV1Entries(t),
                 {DPL_REQUIRED_ENTRY(t, set_loss_scale)}});
}

// The entries v3 added.
template <typename Table>
void TakeModelV3Entries(const Table& table, ModelInterface* model) {
  model->buffer = table.buffer;
  model->read_buffers = table.read_buffers;
  model->write_buffers = table.write_buffers;
  model->rng_state = table.rng_state;
  model->set_rng_state = table.set_rng_state;
  model->host_batch_slot = table.host_batch_slot;
  model->set_loss_scale = table.set_loss_scale;
}

// What v3 can do; later versions add theirs.
constexpr CapabilitySet<ModelCapability> kModelV3Capabilities = {
    ModelCapability::kHostCopy,     ModelCapability::kHostBatchSlots,
    ModelCapability::kBuffers,      ModelCapability::kRngState,
    ModelCapability::kAutocast,     ModelCapability::kLossScale,
    ModelCapability::kDeviceStream, ModelCapability::kStateFiles,
    ModelCapability::kDataShape,    ModelCapability::kBroadcastBuffers};
// Of those, what an instance says in its info.flags (Note [Capabilities of an instance]).
constexpr CapabilitySet<ModelCapability> kModelV3PerInstance = {ModelCapability::kBroadcastBuffers};

// The per-instance capabilities v3's info.flags give (in the newest info, whose flags keep v3's).
inline CapabilitySet<ModelCapability> ModelV3Described(const dpl_model_info& info) {
  if ((info.flags & DPL_MODEL_BROADCAST_BUFFERS) == 0) return {};
  return {ModelCapability::kBroadcastBuffers};
}

}  // namespace dpl::plugin_host::adapters
