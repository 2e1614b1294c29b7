// Where the optimizer's parameters live: the placement of a run, one of the three parts of a step
// (docs/architecture.md: the placement, the reducer and the optimizer runner, composed by
// step_parts.hpp), chosen once from the model's memory, the backend's and the options.
//
// Note [Host copy of the parameters]: the host's optimizer runs on float32 host memory. A CPU
// model's parameters and gradients ARE host memory and are updated in place. A model on a device
// the host cannot address (CUDA) gets a host copy instead, the way ZeRO-Offload runs a CPU
// optimizer for a GPU model: each optimizer step reads the summed gradients into the copy
// (read_tensors), scales them, updates the copy of the parameters and writes it back
// (write_tensors). Checkpoints, --resume and --dump-parameters use the copy. Gradients are summed
// where the backend reaches them: on the device by a device backend (nccl), bucket by bucket
// while backward runs; by a host backend (gloo, tcp) in the host copy, after backward.
// --mirror-parameters treats a CPU model as such a device model, so it is tested without a GPU.
//
// Note [Shared parameters]: with --shard-optimizer and the shared-memory sums, in a run that does
// not regroup in place (ReduceInPlace in reducer.cpp says why), a CPU model that can share its
// parameters (ModelCapability::kShareParameters) computes with the machine's one copy of the
// values in the shared mapping (local rank 0 copies its values in; every worker then hands the
// model that memory). Each worker updates its part there in place, so the parts need no
// gathering, only a barrier before any worker's next forward pass; no worker updates before every
// backward of the step is done, since the sums it waits for need them all. A machine holds one
// copy of the parameters instead of one per worker. Broadcasts and checkpoint loads write the same
// bytes from each worker.
//
// So there are four placements (placement.cpp): in place (a host model: the model's own memory),
// a host copy (a device model or --mirror-parameters, whose gradients are summed on the model's
// tensors and then read), a host copy summed in host memory (a device model with a host backend:
// the copy is read after backward and summed there), and the values on the device (the model's
// own optimizer updates them, Note [Device optimizer placement] in optimizer_runner.hpp; host
// values are read only when something reads them). No other part of training asks which one it
// got.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/buffers.hpp"
#include "training/collectives/collectives.hpp"
#include "training/config.hpp"
#include "training/float_span.hpp"
#include "training/model.hpp"
#include "training/precision.hpp"
#include "training/step_profile.hpp"

namespace dpl::training {

// One parameter tensor as the optimizer sees it (host memory) and as the model holds it.
struct HostParameter {
  std::string name;
  size_t elements = 0;
  float* value = nullptr;
  float* gradient = nullptr;  // NULL where the gradients stay on the model's device
  DLTensor model_value{};
  DLTensor model_gradient{};
};

struct PlacementSettings {
  int rank = 0;
  int world_size = 1;
  bool mirror_parameters = false;
  LocalReduce local_reduce = LocalReduce::kSharedMemory;
  bool shard_optimizer = false;
  bool offload_optimizer = false;  // a device model's optimizer in host memory all the same
  LocalGroup local;                // the machine's workers
  GradientWire wire;               // the gradients' format in the collectives (precision.hpp)
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  Device device = Device::kCpu;  // for messages
  OptimizerKind optimizer = OptimizerKind::kAdadelta;
  // The workers regroup in place (an elastic job: Note [Shrink in place] in live_state.hpp).
  bool keeps_live_state = false;
};

// Whether the optimizer works on a host copy of the values (a device model, --mirror-parameters)
// rather than updating a CPU model's memory in place.
inline bool UsesHostCopy(const PlacementSettings& settings) {
  return settings.device != Device::kCpu || settings.mirror_parameters;
}

// Whether a machine's workers are to sum in its shared memory (whether its loader could make that
// memory is the front's to say: collectives.hpp).
inline bool AsksSharedMemorySums(const PlacementSettings& settings) {
  return settings.local_reduce == LocalReduce::kSharedMemory &&
         settings.local.local_world_size >= 2;
}

class ParameterPlacement {
 public:
  // Whether `plugin` can train with these settings: a host copy (a device model,
  // --mirror-parameters) needs ModelCapability::kHostCopy. Asked before the model is created.
  static Status CheckSupported(const ModelPlugin& plugin, const PlacementSettings& settings);
  // Whether the optimizer is sharded (--shard-optimizer): as asked, or under kAuto where sharding
  // was measured faster and lighter (Note [Sharding by default]). Reads only what every rank of
  // the job shares, so that all decide alike.
  static bool ShardsOptimizer(OptimizerSharding sharding, const PlacementSettings& settings);

  virtual ~ParameterPlacement() = default;
  ParameterPlacement(const ParameterPlacement&) = delete;
  ParameterPlacement& operator=(const ParameterPlacement&) = delete;

  const std::vector<HostParameter>& parameters() const { return parameters_; }
  // The gradients a reduction sums, by parameter index: the model's own tensors, or the host copy
  // where the sums are made there.
  virtual std::vector<DLTensor> SummedGradients() const;

  // Rank 0's parameters (and the host copy) to every rank, as DDP does when it wraps a module.
  virtual Status BroadcastValues(Collectives& collectives) = 0;
  // Rank 0's buffers to every rank: on the model's own tensors, or through host memory where the
  // backend cannot reach them.
  virtual Status BroadcastBuffers(Collectives& collectives);
  // After a step's reduction, whose sums still need `factor`: the averaged gradients where the
  // optimizer reads them (read into the host copy, scaled). Returns the factor still left for the
  // optimizer: 1, or `factor` where the gradients stay on the model's device.
  virtual Result<float> TakeGradients(float factor, StepProfile* profile) = 0;
  // After the optimizer updated the host values: the model computes with them.
  virtual Status Publish(StepProfile* /*profile*/) { return Status::Ok(); }
  // The host values were overwritten (a checkpoint, a state dict): the model gets them.
  virtual Status ValuesChanged() = 0;
  // Before the host values are read (a checkpoint, an export, a replica check): they are made the
  // model's current ones where the model's own optimizer updates them.
  virtual Status RefreshHostValues() { return Status::Ok(); }

 protected:
  explicit ParameterPlacement(Model& model) : model_(model) {}
  // The model's parameters (float32, each with a gradient of its size and place) and buffers.
  Status ListParameters();
  // Rank 0's parameters go to every rank on the model's own tensors.
  Status BroadcastOnModel(Collectives& collectives);
  // Multiplies every host gradient by `factor`.
  void ScaleGradients(float factor);
  size_t total_elements() const;

  Model& model_;
  std::vector<HostParameter> parameters_;
  std::vector<BufferInfo> buffers_;  // the model's (kBuffers)
};

// A CPU model with no mirror: the optimizer updates the model's own memory, which the machine's
// shared memory may take over (Note [Shared parameters], Note [Gradients in shared memory]).
class InPlacePlacement final : public ParameterPlacement {
 public:
  static Result<std::unique_ptr<InPlacePlacement>> Create(Model& model);

  Status BroadcastValues(Collectives& collectives) override {
    return BroadcastOnModel(collectives);
  }
  Result<float> TakeGradients(float factor, StepProfile* profile) override;
  Status ValuesChanged() override { return Status::Ok(); }

  // From now on the parameters' values, and the model's, are `values` (read_tensors' layout:
  // parameters in index order, back to back).
  void MoveValuesTo(float* values);
  // Likewise the gradients.
  void MoveGradientsTo(float* gradients);

 private:
  using ParameterPlacement::ParameterPlacement;
};

// A device model, or --mirror-parameters, with the optimizer in host memory: the model's
// gradients are summed on its own tensors while backward runs, then read into the host copy and
// scaled there (the host never touches device memory); the new values are written back.
class HostCopyPlacement : public ParameterPlacement {
 public:
  // Rank `rank` says so in the log.
  static Result<std::unique_ptr<HostCopyPlacement>> Create(Model& model, int rank);

  Status BroadcastValues(Collectives& collectives) override;
  Result<float> TakeGradients(float factor, StepProfile* profile) override;
  // The host copy's new values to the model.
  Status Publish(StepProfile* profile) override;
  Status ValuesChanged() override { return WriteValues(); }

 protected:
  using ParameterPlacement::ParameterPlacement;
  Status Setup(int rank);
  Status ReadFromModel(dpl_model_tensors which);
  Status WriteValues();

  std::vector<float> host_values_, host_gradients_;  // the host copy, parameters back to back
};

// A device model whose memory the backend cannot reach (a host backend): the host copy is read
// after backward (ReadGradients) and summed in host memory; broadcasts go through host memory.
class HostSumsPlacement final : public HostCopyPlacement {
 public:
  static Result<std::unique_ptr<HostSumsPlacement>> Create(Model& model, int rank);

  std::vector<DLTensor> SummedGradients() const override;
  Status BroadcastValues(Collectives& collectives) override;
  Status BroadcastBuffers(Collectives& collectives) override;
  // The sums are made in the copy, read before them (ReadGradients) and scaled there.
  Result<float> TakeGradients(float /*factor*/, StepProfile*) override { return 1.0f; }
  // After backward: the model's gradients into the host copy.
  Status ReadGradients() { return ReadFromModel(DPL_MODEL_TENSORS_GRADIENTS); }

 private:
  using HostCopyPlacement::HostCopyPlacement;
  std::vector<int64_t> shapes_;  // of SummedGradients' tensors
};

// The model's own optimizer updates its parameters where they are (Note [Device optimizer
// placement] in optimizer_runner.hpp): nothing is copied to the host per step; the host values
// are read from the model only when something reads them.
class DeviceValuesPlacement final : public ParameterPlacement {
 public:
  static Result<std::unique_ptr<DeviceValuesPlacement>> Create(Model& model);

  Status BroadcastValues(Collectives& collectives) override {
    return BroadcastOnModel(collectives);
  }
  // The model's update applies the factor.
  Result<float> TakeGradients(float factor, StepProfile*) override { return factor; }
  Status ValuesChanged() override;
  Status RefreshHostValues() override;

 private:
  using ParameterPlacement::ParameterPlacement;
  std::vector<float> host_values_;  // read on demand
};

}  // namespace dpl::training
