// Named capabilities: what a loaded plugin can do beyond the first ABI version of its kind.
//
// Note [Capabilities, not versions]: the host outside plugin_host/ never asks which ABI version a
// plugin was built for; it asks whether the plugin has a capability (ModelCapability::kBuffers,
// BackendCapability::kSynchronize, ...). Each adapter (plugin_host/adapters/<kind>_vN.cpp) declares
// the capabilities of its version in the adapter registry, so a new ABI version adds its
// capabilities there and the code that uses them asks for them by name. Capabilities are only
// appended, each a bit of its own: an enumerator's value never changes.
//
// Note [Capabilities of an instance]: some capabilities depend on more than the version: a
// table's struct_size and its entries (an entry a version gained after it was released, read
// only where the table reaches it), or what an instance says in its info.flags. The adapter of
// such a version counts them among its version's capabilities, marks them per-instance
// (ModelInterface::per_instance), and turns the table and the described info into those the
// instance has (ModelInterface::described_capabilities); training::Model answers Has for its
// instance. So the host asks capabilities only: never a version, never info.flags, never whether
// an entry is empty.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace dpl::plugin_host {

// A set of the capabilities of one plugin kind (Capability: one of the enums below).
template <typename Capability>
class CapabilitySet {
 public:
  constexpr CapabilitySet() = default;
  constexpr CapabilitySet(std::initializer_list<Capability> capabilities) {
    for (Capability capability : capabilities) bits_ |= Bit(capability);
  }
  static constexpr CapabilitySet FromBits(uint64_t bits) {
    CapabilitySet set;
    set.bits_ = bits;
    return set;
  }

  constexpr bool Has(Capability capability) const { return (bits_ & Bit(capability)) != 0; }
  // This set and `more` (a later ABI version's set: the earlier one's and its own).
  constexpr CapabilitySet With(std::initializer_list<Capability> more) const {
    CapabilitySet set = *this;
    for (Capability capability : more) set.bits_ |= Bit(capability);
    return set;
  }
  // This set and `more`, or without `other`'s.
  constexpr CapabilitySet With(CapabilitySet more) const { return FromBits(bits_ | more.bits_); }
  constexpr CapabilitySet Without(CapabilitySet other) const {
    return FromBits(bits_ & ~other.bits_);
  }
  constexpr uint64_t bits() const { return bits_; }

  static constexpr uint64_t Bit(Capability capability) {
    return uint64_t{1} << static_cast<uint32_t>(capability);
  }

 private:
  uint64_t bits_ = 0;
};

// What a model plugin can do beyond model ABI v1 (dpl/model.h names the entries). Where a
// capability is missing, the adapter leaves its entries empty and says so in messages
// (ModelInterface::abi, FirstAbiWith).
enum class ModelCapability : uint32_t {
  // host_batch (one host batch buffer, slot 0), read_tensors, write_tensors: the host can keep a
  // host copy of the parameters (a device model, --mirror-parameters). Without it the model trains
  // on the CPU with its parameters updated in place and the host owns the batch memory.
  kHostCopy = 0,
  // host_batch_slot: DPL_MODEL_HOST_BATCH_SLOTS host batch buffers, so the host fills the next
  // batch while the model works on the current one.
  kHostBatchSlots = 1,
  // buffer, read_buffers, write_buffers; info.buffer_count and the DPL_MODEL_BROADCAST_BUFFERS
  // flag. Without it the adapter describes no buffers and no flags.
  kBuffers = 2,
  // rng_state, set_rng_state: checkpoints carry the model's random state.
  kRngState = 3,
  // config.precision is honoured (autocast); without it the model computes in float32 only.
  kAutocast = 4,
  // set_loss_scale: fp16's loss scaling.
  kLossScale = 5,
  // info.stream names the stream the model computes on; without it the adapter describes NULL
  // (the legacy default stream), where an older device model computes.
  kDeviceStream = 6,
  // save_state writes what Python reads (torch.load / torch.jit.load) and load_state reads a
  // state dict: --export and --init-from go through the model. Without it the host writes and
  // reads a state dict of its own copy of the parameters.
  kStateFiles = 7,
  // config.input_shape and config.num_classes: the model is told the data's shape. Without it
  // the model keeps its own and the host checks that the data fits.
  kDataShape = 8,
  // Typed samples (model ABI v4): config.input / config.target and info.input / info.target say
  // the dtypes and shapes of a sample's input and target, train_step's loss is the mean over every
  // target element and eval_step reports (loss sum, elements, correct) per element. Without it
  // the model takes float32 input of info.input_shape and one int64 class label per sample (the
  // adapter describes exactly that), and the host refuses other data.
  kTypedSamples = 9,
  // Per instance: set_optimizer, gradient_statistics, apply_update, and the instance's info says
  // DPL_MODEL_DEVICE_OPTIMIZER: the optimizer runs where the parameters are.
  kDeviceOptimizer = 10,
  // Per instance: info.flags says DPL_MODEL_BROADCAST_BUFFERS: rank 0's buffers go to every rank
  // before each forward pass (DDP's broadcast_buffers=True).
  kBroadcastBuffers = 11,
  // Per instance: info.flags says DPL_MODEL_REPLACED_GRADIENTS: zero_gradients writes nothing, the
  // next backward replaces the gradients (the host then needs no zeroing pass of its own).
  kReplacedGradients = 12,
  // Per table: share_parameters, in a table that reaches it (v4 gained it after its release): the
  // model computes with parameter values in the host's memory.
  kShareParameters = 13,
  // Per table: share_gradients, likewise: the model keeps its gradients in the host's memory.
  kShareGradients = 14,
};

// What a backend plugin can do beyond backend ABI v1 (dpl/backend.h).
enum class BackendCapability : uint32_t {
  // A device collective is ordered after the work on the stream it is given and may run on the
  // backend's own stream; synchronize waits for it. Without it the adapter's synchronize returns
  // at once: the collectives are complete in stream order when they return.
  kSynchronize = 0,
  // config.local_address: the backend binds and advertises the address the host found. Without
  // it the backend finds its own.
  kLocalAddress = 1,
  // reduce_scatter and in-place allgather are the plugin's own. Without it the adapter makes
  // them of allreduce and allgather: the same results, with the traffic of an allreduce and a
  // scratch copy.
  kReduceScatter = 2,
  // abort: from any thread, the instance's call under way and every later one fail at once
  // (dpl/backend_v4.h). Without it a collective blocked on a lost peer returns only at the
  // plugin's timeout (--backend-timeout), and the adapter leaves abort empty.
  kAbort = 3,
  // send_receive: one rank's bytes to one other rank, ordered as a collective
  // (dpl/backend_v5.h). Without it the adapter leaves send_receive empty, and the host moves
  // such bytes with an allgather (GradientReduction::ExchangeParts).
  kSendReceive = 4,
};

// What a dataset plugin can do beyond dataset ABI v1 (dpl/dataset.h): nothing a host must ask
// for. Version 2's typed samples and validation split are adapted whole for a v1 plugin (float32
// input, an int64 target of shape (), its test split for validation: Note [Adapting dataset ABI
// v1]); a later version appends its capabilities here.
enum class DatasetCapability : uint32_t {};

}  // namespace dpl::plugin_host
