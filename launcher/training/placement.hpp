// Where the optimizer's parameters live and where their gradients are summed: the placement
// strategy of a run, chosen once from the model's memory, the backend's and the options.
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
// Note [Shared parameters]: with --shard-optimizer and the shared-memory sums, a CPU model that
// has share_parameters computes with the machine's one copy of the values in the shared mapping
// (local rank 0 copies its values in; every worker then hands the model that memory). Each worker
// updates its part there in place, so the parts need no gathering, only a barrier before any
// worker's next forward pass; no worker updates before every backward of the step is done, since
// the sums it waits for need them all. A machine holds one copy of the parameters instead of one
// per worker. Broadcasts and checkpoint loads write the same bytes from each worker.
//
// So there are four strategies (placement.cpp): kInPlace (host model, host backend: the model's
// own memory, summed in buckets while backward runs), kHostCopy (summed in the host copy after
// backward: a device model with a host backend), kModelCollectives (summed in the model's own
// tensors while backward runs, then read into the host copy: a device model with a device
// backend) and kDeviceOptimizer (summed likewise, then the model's own optimizer updates its
// parameters where they are: the default where the model has one, Note [Device optimizer
// placement]; --offload-optimizer takes kModelCollectives instead). No other part of training
// asks which one it got.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "observability/activity.hpp"
#include "training/backend.hpp"
#include "training/buffers.hpp"
#include "training/config.hpp"
#include "training/gradient_sync.hpp"
#include "training/local_reduce.hpp"
#include "training/model.hpp"
#include "training/precision.hpp"
#include "training/step_profile.hpp"

namespace dpl::training {

// One parameter tensor as the optimizer sees it (host memory) and as the model holds it.
struct HostParameter {
  std::string name;
  size_t elements = 0;
  float* value = nullptr;
  float* gradient = nullptr;
  DLTensor model_value{};
  DLTensor model_gradient{};
};

class ShardExchange;

// A run of one parameter's elements that this rank's optimizer updates: [offset, offset +
// elements) of parameter `parameter`, its values and averaged gradients in host memory.
struct UpdateRun {
  uint32_t parameter = 0;
  size_t offset = 0;
  size_t elements = 0;
  float* value = nullptr;
  float* gradient = nullptr;
};

// What this rank's optimizer updates: every parameter whole, or with --shard-optimizer its part
// (Note [Sharded optimizer] in shard.hpp), and the exchange that shares the step's global
// quantities then.
//
// Note [Scaling shared gradients]: unsharded, the workers of a machine read every averaged
// gradient where they summed them, in the memory they share; so each worker unscales (fp16) and
// clips only the part it summed (`scaled`), the flags and the norm's piece sums are shared as the
// sharded optimizer shares them, and all wait until every part is clipped before the optimizer
// reads the gradients.
struct UpdateView {
  std::vector<UpdateRun> runs;      // the optimizer's
  std::vector<UpdateRun> scaled;    // whose gradients this rank unscales and clips
  std::vector<size_t> first_piece;  // of each parameter (Note [Pieces] in shard_layout.hpp)
  size_t pieces = 0;
  ShardExchange* exchange = nullptr;  // NULL: every rank scales all its runs alone
  bool shared_gradients = false;      // Note [Scaling shared gradients]
  // The model whose own optimizer updates its parameters (Note [Device optimizer placement] in
  // parameter_update.hpp), with the factor its summed gradients still need (the average's);
  // NULL: the host's optimizer updates the runs.
  Model* device_model = nullptr;
  float gradient_scale = 1.0f;
  // Whether the optimizer updates a part only (--shard-optimizer).
  bool sharded() const { return exchange != nullptr && !shared_gradients; }
};

struct PlacementSettings {
  int rank = 0;
  int world_size = 1;
  bool mirror_parameters = false;
  LocalReduce local_reduce = LocalReduce::kSharedMemory;
  bool shard_optimizer = false;
  bool offload_optimizer = false;  // a device model's optimizer in host memory all the same
  LocalGroup local;                // the machine's workers and their shared memory
  GradientWire wire;               // the gradients' format in the collectives (precision.hpp)
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  Device device = Device::kCpu;  // for messages
};

// Whether the optimizer works on a host copy of the values (a device model, --mirror-parameters)
// rather than updating a CPU model's memory in place.
inline bool UsesHostCopy(const PlacementSettings& settings) {
  return settings.device != Device::kCpu || settings.mirror_parameters;
}

// Whether a machine's workers are to sum in its shared memory (whether its loader could make that
// memory is ParameterPlacement::UsesSharedMemory's to say).
inline bool AsksSharedMemorySums(const PlacementSettings& settings) {
  return settings.local_reduce == LocalReduce::kSharedMemory &&
         settings.local.local_world_size >= 2;
}

class ParameterPlacement {
 public:
  // Chooses and sets up the strategy for `model`'s parameters. `backend` is NULL at world size 1.
  static Result<std::unique_ptr<ParameterPlacement>> Create(Model& model, Backend* backend,
                                                            const PlacementSettings& settings);
  // Whether `plugin` can train with these settings: a host copy (a device model,
  // --mirror-parameters) needs ModelCapability::kHostCopy. Asked before the model is created.
  static Status CheckSupported(const ModelPlugin& plugin, const PlacementSettings& settings);
  // Whether the optimizer is sharded (--shard-optimizer): as asked, or under kAuto where sharding
  // was measured faster and lighter (Note [Sharding by default]). Reads only what every rank of
  // the job shares, so that all decide alike.
  static bool ShardsOptimizer(OptimizerSharding sharding, const PlacementSettings& settings);
  ParameterPlacement(Model& model, Backend* backend, const PlacementSettings& settings);
  virtual ~ParameterPlacement();

  const std::vector<HostParameter>& parameters() const { return parameters_; }
  size_t total_elements() const { return total_elements_; }
  // The optimizer's view: every parameter's host values and gradients, in parameter order.
  const std::vector<float*>& values() const { return values_; }
  const std::vector<const float*>& gradients() const { return gradients_; }
  // What this rank's optimizer updates, after FinishGradients.
  const UpdateView& update_view() const { return view_; }
  // Whether the workers of this machine compute with one copy of the parameters (Note [Shared
  // parameters]).
  bool SharesValues() const { return reducer_ && reducer_->values() != nullptr; }

  // Copies rank 0's parameters and buffers to every rank (and the parameters into the host
  // copy), as DDP does when it wraps a module.
  Status BroadcastInitialState();
  // After the initial values are broadcast and a checkpoint restored: where the workers of a
  // machine share one copy of the values, none trains until all have written theirs.
  Status SettleSharedValues();
  // Before each forward pass of training, and once after the last: rank 0's buffers to every
  // rank, when the model asks for it (DPL_MODEL_BROADCAST_BUFFERS; DDP's broadcast_buffers=True).
  Status BeforeForward();
  // Before the train_step that ends an optimizer step: its gradients may start to be summed.
  void BeginStep(float scale);
  // After that train_step, whose status is `step` (the communication is drained even when it
  // failed): the gradients in host memory hold the sum over ranks times `scale`.
  virtual Status FinishGradients(const Status& step, float scale, StepProfile* profile) = 0;
  // After the optimizer updated the host values: the model computes with them, gradients zeroed.
  virtual Status PublishValues(StepProfile* profile) = 0;
  // The host values were overwritten (a checkpoint, a state dict): the model gets them.
  virtual Status ValuesChanged() = 0;
  // Before the host values are read (a checkpoint, an export, a replica check): they are made the
  // model's current ones where the model's own optimizer updates them.
  virtual Status RefreshHostValues() { return Status::Ok(); }
  // Stops the model from calling back into the gradient synchronizer.
  Status Detach();
  // Runs `call`, a backend call every rank makes, on the thread of the backend's calls (after
  // those queued before it) and waits for it; refused at world size 1, which has no backend.
  Status RunCollective(std::function<Status()> call,
                       const observability::CollectiveActivity& activity);

 protected:
  virtual Status BroadcastInitialValues() = 0;
  // Rank 0's buffers to every rank: on the model's own tensors here; through host memory where
  // the backend cannot reach the model's (HostCopyPlacement).
  virtual Status BroadcastBuffers();
  Status ListParameters();
  void UseModelMemory();
  void UseHostCopy();
  // Host memory for the values only, read from the model on demand (RefreshHostValues).
  void UseHostValues();
  // Sums the model's gradients on its own tensors, in buckets as backward reports them ready.
  Status StartModelSynchronizer();
  // Sums the gradients `tensors` in buckets; with callbacks, as the model reports them ready.
  Status StartSynchronizer(std::vector<DLTensor> tensors, GradientScaling scaling, bool callbacks);
  Status BroadcastOnModel();
  Status ReadFromModel(dpl_model_tensors which);
  Status WriteValuesToModel();
  // The host copy's new values to the model, then its gradients zeroed.
  Status PublishHostCopy(StepProfile* profile);
  void ScaleGradients(float scale);
  Status FinishSynchronizer(const Status& step);
  // ", sent as bf16 (...)" for a 16-bit wire format, else "": for the log.
  std::string WireText() const;
  std::string AcrossMachinesText() const;
  // The in-place strategy's ways to sum (placement_reduce.cpp): through the machine's shared
  // memory, or sharded through the backend; whether the shared memory can be used.
  bool UsesSharedMemory() const;
  Status StartSharedMemory(std::vector<DLTensor> tensors);
  Status StartBackendShard(std::vector<DLTensor> tensors);
  // The view of every parameter whole, or of the exchange's part (as runs, or only to scale).
  void ViewWholeParameters();
  void ViewPart(ShardExchange& exchange, bool runs);
  // With a sharded view: every rank's updated part into every rank's model.
  Status GatherUpdatedParts();
  // Note [Shared parameters]: the model computes with the machine's one copy of the values.
  Status ShareValues();
  // Note [Gradients in shared memory] (local_reduce.hpp): the model keeps its gradients in this
  // worker's input area; `tensors` (the gradients the reduction reads) follow them.
  Status ShareGradients(std::vector<DLTensor>* tensors);
  // Calls `place(i, address)` with each parameter's address in `base`, parameters back to back.
  void PlaceBackToBack(float* base, const std::function<void(size_t, float*)>& place);

  Model& model_;
  Backend* backend_;
  PlacementSettings settings_;
  std::vector<HostParameter> parameters_;
  size_t total_elements_ = 0;
  std::vector<float*> values_;
  std::vector<const float*> gradients_;
  std::vector<float> host_values_, host_gradients_;  // the host copy, parameters back to back
  std::vector<int64_t> host_gradient_shapes_;        // of the host copy's DLTensors
  std::vector<BufferInfo> buffers_;                  // the model's (kBuffers)
  std::unique_ptr<CommunicationThread> comm_;
  std::unique_ptr<LocalReducer> reducer_;
  std::unique_ptr<BucketReduction> reduction_;
  std::unique_ptr<ShardExchange> shared_exchange_;  // the shared memory's, when sharded
  ShardExchange* exchange_ = nullptr;               // NULL: not sharded
  std::unique_ptr<GradientSynchronizer> sync_;
  UpdateView view_;
};

}  // namespace dpl::training
