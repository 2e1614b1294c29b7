#include "training/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/log.hpp"
#include "training/checkpoint.hpp"
#include "training/gradient_sync.hpp"
#include "training/host_tensor.hpp"
#include "training/idx_dataset.hpp"
#include "training/optimizer.hpp"
#include "training/sampler.hpp"

namespace dpl::training {
namespace {

using Clock = std::chrono::steady_clock;

// Model calls fail with a status and a per-thread message; this joins them into one Status.
Status ModelCall(const dpl_model_plugin_v2& plugin, const char* function, dpl_status status) {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure({"model", plugin.header.name, ""}, function, status,
                           plugin.last_error ? plugin.last_error() : nullptr);
}

struct ModelDeleter {
  const dpl_model_plugin_v2* plugin;
  void operator()(dpl_model* model) const { plugin->destroy(model); }
};

// One parameter as the optimizer sees it (host memory: the model's own, or the host copy of Note
// [Host copy of the parameters]) and as the model holds it (its DLTensors, maybe on a device).
struct Parameter {
  std::string name;
  float* value = nullptr;
  float* gradient = nullptr;
  size_t elements = 0;
  DLTensor model_value{};
  DLTensor model_gradient{};
};

std::string Fingerprint(const cli::Options& o, int world_size) {
  std::ostringstream s;
  s << "model=" << o.model << ";model_options=" << o.model_options << ";optimizer=" << o.optimizer
    << ";lr=" << o.learning_rate << ";momentum=" << o.momentum << ";batch_size=" << o.batch_size
    << ";world_size=" << world_size << ";seed=" << o.seed << ";grad_accum=" << o.grad_accum
    << ";drop_last=" << (o.drop_last ? 1 : 0);
  return s.str();
}

// Where a step's time goes, summed over the run: the numbers performance work starts from.
struct StepProfile {
  double data_s = 0;       // gathering and normalising the batch
  double compute_s = 0;    // the model's train_step: forward, loss, backward (communication of
                           // ready buckets overlaps it on the communication thread)
  double comm_wait_s = 0;  // waiting after backward for the last buckets' allreduce
  double optimizer_s = 0;  // optimizer step and zeroing the gradients
  double copies_s = 0;     // host copy <-> model (Note [Host copy of the parameters])
  int64_t steps = 0;

  static double Since(Clock::time_point& mark) {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return seconds;
  }
  std::string Describe() const {
    const double per_step_ms = steps > 0 ? 1000.0 / double(steps) : 0.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "time per step: data %.2f ms, forward+backward %.2f ms, communication wait "
                  "%.2f ms, optimizer %.2f ms",
                  data_s * per_step_ms, compute_s * per_step_ms, comm_wait_s * per_step_ms,
                  optimizer_s * per_step_ms);
    std::string text = line;
    if (copies_s > 0) {
      std::snprintf(line, sizeof line, ", host copies %.2f ms", copies_s * per_step_ms);
      text += line;
    }
    return text;
  }
};

// Note [Host copy of the parameters]: the optimizer runs in the host, on float32 host memory. A
// CPU model's parameters and gradients ARE host memory and are updated in place. A model on a
// device the host cannot address (CUDA) gets a host copy instead, the way ZeRO-Offload runs a CPU
// optimizer for a GPU model: each optimizer step reads the summed gradients into the copy
// (read_tensors), scales them, updates the copy of the parameters and writes it back
// (write_tensors). Checkpoints, --resume and --dump-parameters use the copy. Gradients are summed
// where the backend reaches them: on the device by a device backend (nccl), bucket by bucket
// while backward runs; by a host backend (gloo, tcp) in the host copy, after backward.
// --mirror-parameters takes the same path for a CPU model, so it is tested without a GPU.
class Trainer {
 public:
  Trainer(const cli::Options& options, const WorkerIdentity& identity,
          const TrainingBackend& backend, const dpl_model_plugin_v2& model_plugin,
          std::future<Result<TrainingData>> data, SumAcrossRanks sum_across_ranks)
      : options_(options),
        identity_(identity),
        backend_{backend.plugin, backend.backend},
        backend_device_type_(backend.device_type),
        model_plugin_(model_plugin),
        model_(nullptr, ModelDeleter{&model_plugin}),
        data_(std::move(data)),
        sum_across_ranks_(std::move(sum_across_ranks)) {}

  Status Run();

 private:
  Status Setup();
  Status CreateModel();
  Status SetupParameters();
  Status SetupGradientSync(GradientCompression compression);
  Status Broadcast();
  Status Resume();
  Status CopyFromModel(dpl_model_tensors which);
  Status CopyValuesToModel();
  Status SetupBatchBuffers(int64_t capacity);
  DLTensor Batch(const DLTensor& buffer, int64_t n, int64_t* shape) const;
  Status OptimizerStep(float scale, StepProfile* profile, Clock::time_point* mark);
  Status SaveCheckpoint(int64_t epoch, int64_t step_in_epoch);
  Status Evaluate();
  Status DumpParameters();
  void Progress(int64_t epoch, int64_t batch, int64_t batches, double samples_per_s, double eta_s);

  const cli::Options& options_;
  WorkerIdentity identity_;
  BackendHandle backend_;
  int32_t backend_device_type_;
  const dpl_model_plugin_v2& model_plugin_;
  std::unique_ptr<dpl_model, ModelDeleter> model_;
  dpl_model_info_v1 info_{};
  std::future<Result<TrainingData>> data_;
  SumAcrossRanks sum_across_ranks_;
  Dataset train_, test_;
  std::vector<Parameter> parameters_;
  bool host_copy_ = false;            // Note [Host copy of the parameters]
  bool collectives_on_model_ = true;  // gradients are summed in the model's own tensors
  std::vector<float> host_values_, host_gradients_;  // the host copy, parameters back to back
  std::vector<int64_t> host_gradient_shapes_;        // of the host copy's DLTensors in sync_
  // Batch memory the host fills: the model's own (host_batch; page-locked for a GPU model) or,
  // for a model of ABI v1, ours.
  DLTensor input_buffer_{}, label_buffer_{};
  std::vector<float> own_input_;
  std::vector<int64_t> own_labels_;
  std::vector<int64_t> own_input_shape_, own_label_shape_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float*> optimizer_values_;  // parameters_' host memory, as Optimizer::Step takes it
  std::vector<const float*> optimizer_gradients_;
  std::unique_ptr<CommunicationThread> comm_;
  std::unique_ptr<GradientSynchronizer> sync_;
  int local_batch_ = 0;
  int64_t start_epoch_ = 0, start_step_in_epoch_ = 0, global_step_ = 0;
  float last_loss_ = 0.0f;
  bool rank0() const { return identity_.rank == 0; }
  bool cuda() const { return options_.device == "cuda"; }
};

Status Trainer::Setup() {
  Result<int> local_batch = PerRankBatchSize(options_.batch_size, identity_.world_size);
  if (!local_batch.ok()) return local_batch.status();
  local_batch_ = *local_batch;
  if (options_.grad_accum < 1) {
    return Status::Error("--grad-accum " + std::to_string(options_.grad_accum) +
                         " must be at least 1");
  }
  Result<GradientCompression> compression = ParseGradientCompression(options_.grad_compression);
  if (!compression.ok()) return compression.status();
  const bool model_abi_v1 = model_plugin_.host_batch == nullptr;
  if (model_abi_v1 && (cuda() || options_.mirror_parameters)) {
    return Status::Error(std::string("model '") + model_plugin_.header.name +
                         "' is a model ABI v1 plugin, which trains on the CPU with its parameters "
                         "updated in place; rebuild it against the dpl SDK (model ABI v2) for " +
                         (cuda() ? "--device cuda" : "--mirror-parameters"));
  }

  Result<TrainingData> data = data_.get();
  if (!data.ok()) return data.status();
  train_ = std::move(data->train);
  test_ = std::move(data->test);

  DPL_RETURN_IF_ERROR(CreateModel());
  DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(train_, info_));
  if (options_.evaluate) DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(test_, info_));
  DPL_RETURN_IF_ERROR(SetupParameters());
  DPL_RETURN_IF_ERROR(SetupBatchBuffers(local_batch_));

  OptimizerOptions optimizer_options;
  optimizer_options.name = options_.optimizer;
  optimizer_options.learning_rate = options_.learning_rate;
  optimizer_options.momentum = options_.momentum;
  std::vector<size_t> sizes;
  for (const Parameter& p : parameters_) {
    sizes.push_back(p.elements);
    optimizer_values_.push_back(p.value);
    optimizer_gradients_.push_back(p.gradient);
  }
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(optimizer_options, sizes);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);

  if (identity_.world_size > 1) DPL_RETURN_IF_ERROR(SetupGradientSync(*compression));
  return Status::Ok();
}

Status Trainer::CreateModel() {
  dpl_model_config_v2 config{};
  config.struct_size = sizeof config;
  config.version = model_plugin_.header.abi_version;
  config.options = options_.model_options.c_str();
  // The recipe's GPU part: one GPU per worker, the one numbered like its local rank.
  config.device_type = cuda() ? kDLCUDA : kDLCPU;
  config.device_id = cuda() ? identity_.local_rank : 0;
  config.seed = options_.seed;
  config.num_threads = std::max(1, identity_.threads);
  config.log = log::PluginLogCallback;
  config.log_context = nullptr;
  dpl_model* raw = nullptr;
  DPL_RETURN_IF_ERROR(ModelCall(model_plugin_, "create", model_plugin_.create(&config, &raw)));
  model_.reset(raw);
  info_.struct_size = sizeof info_;
  return ModelCall(model_plugin_, "describe", model_plugin_.describe(model_.get(), &info_));
}

Status Trainer::SetupParameters() {
  size_t total = 0;
  for (uint32_t i = 0; i < info_.parameter_count; ++i) {
    dpl_parameter_v2 p{};
    p.struct_size = sizeof p;
    DPL_RETURN_IF_ERROR(
        ModelCall(model_plugin_, "parameter", model_plugin_.parameter(model_.get(), i, &p)));
    const bool float32 = p.value.dtype.code == kDLFloat && p.value.dtype.bits == 32 &&
                         p.gradient.dtype.code == kDLFloat && p.gradient.dtype.bits == 32;
    const bool same_place = p.value.device.device_type == p.gradient.device.device_type &&
                            p.value.device.device_id == p.gradient.device.device_id;
    if (!float32 || !same_place || ElementCount(p.value) != ElementCount(p.gradient)) {
      return Status::Error(std::string("model '") + model_plugin_.header.name + "': parameter " +
                           std::to_string(i) + " (" + (p.name ? p.name : "?") +
                           ") is not a float32 tensor with a gradient of the same size and place");
    }
    Parameter param;
    param.name = p.name ? p.name : "";
    param.elements = ElementCount(p.value);
    param.model_value = p.value;
    param.model_gradient = p.gradient;
    host_copy_ = host_copy_ || !InHostMemory(p.value.device);
    total += param.elements;
    parameters_.push_back(param);
  }
  host_copy_ = host_copy_ || options_.mirror_parameters;
  if (!host_copy_) {
    for (Parameter& p : parameters_) {
      p.value = HostData<float>(p.model_value);
      p.gradient = HostData<float>(p.model_gradient);
    }
    return Status::Ok();
  }
  host_values_.assign(total, 0.0f);
  host_gradients_.assign(total, 0.0f);
  size_t offset = 0;
  for (Parameter& p : parameters_) {
    p.value = host_values_.data() + offset;
    p.gradient = host_gradients_.data() + offset;
    offset += p.elements;
  }
  if (rank0()) {
    log::Info("the optimizer updates a host copy of the " + std::to_string(total) +
              " parameters and writes it to the model every step");
  }
  return Status::Ok();
}

Status Trainer::SetupGradientSync(GradientCompression compression) {
  // A host model's gradients are always within the backend's reach; a device model's only when
  // the backend moves device memory (Note [Host copy of the parameters]).
  const DLDevice model_device =
      parameters_.empty() ? DLDevice{kDLCPU, 0} : parameters_.front().model_gradient.device;
  collectives_on_model_ = InHostMemory(model_device)
                              ? backend_device_type_ == kDLCPU
                              : model_device.device_type == backend_device_type_;
  // In the model's tensors under a host copy, the host never touches the model's memory: the sum
  // is scaled once read, and 16-bit compression would need device kernels.
  const bool untouchable = host_copy_ && collectives_on_model_;
  if (untouchable && compression != GradientCompression::kNone) {
    return Status::Error("--grad-compression " + options_.grad_compression +
                         " converts gradients in host memory, but with --device " +
                         options_.device + " and the '" + backend_.plugin->header.name +
                         "' backend they are summed on the device; use --grad-compression none");
  }
  comm_ = std::make_unique<CommunicationThread>();
  std::vector<DLTensor> gradients;
  std::vector<size_t> sizes;
  host_gradient_shapes_.resize(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Parameter& p = parameters_[i];
    sizes.push_back(p.elements);
    if (collectives_on_model_) {
      gradients.push_back(p.model_gradient);
    } else {
      host_gradient_shapes_[i] = int64_t(p.elements);
      gradients.push_back(
          HostTensor(p.gradient, DLDataType{kDLFloat, 32, 1}, 1, &host_gradient_shapes_[i]));
    }
  }
  std::vector<Bucket> buckets = AssignBuckets(sizes, options_.bucket_cap_bytes);
  if (rank0()) {
    log::Info("gradients of " + std::to_string(parameters_.size()) + " parameters in " +
              std::to_string(buckets.size()) + " bucket(s) of at most " +
              std::to_string(options_.bucket_cap_bytes) + " bytes, summed " +
              (collectives_on_model_ ? "in the model's memory" : "in the host copy"));
  }
  sync_ = std::make_unique<GradientSynchronizer>(
      backend_, comm_.get(), identity_.world_size, std::move(gradients), std::move(buckets),
      compression, untouchable ? GradientScaling::kByCaller : GradientScaling::kInBucket);
  if (!collectives_on_model_) return Status::Ok();  // the host copy is filled after backward
  return ModelCall(model_plugin_, "set_gradient_ready_callback",
                   model_plugin_.set_gradient_ready_callback(
                       model_.get(), GradientSynchronizer::GradientReadyTrampoline, sync_.get()));
}

Status Trainer::CopyFromModel(dpl_model_tensors which) {
  std::vector<float>& host = which == DPL_MODEL_TENSORS_VALUES ? host_values_ : host_gradients_;
  return ModelCall(
      model_plugin_, "read_tensors",
      model_plugin_.read_tensors(model_.get(), which, host.data(), uint64_t(host.size())));
}

Status Trainer::CopyValuesToModel() {
  return ModelCall(model_plugin_, "write_tensors",
                   model_plugin_.write_tensors(model_.get(), DPL_MODEL_TENSORS_VALUES,
                                               host_values_.data(), uint64_t(host_values_.size())));
}

// Rank 0's parameters go to every rank, on the model's tensors when the backend reaches them,
// else through the host copy.
Status Trainer::Broadcast() {
  if (comm_ && collectives_on_model_) {
    DPL_RETURN_IF_ERROR(
        comm_
            ->Submit([this] {
              for (Parameter& p : parameters_) {
                DPL_RETURN_IF_ERROR(backend_.Describe(
                    "broadcast",
                    backend_.plugin->broadcast(backend_.backend, &p.model_value, 0, nullptr)));
              }
              return Status::Ok();
            })
            .get());
  }
  if (!host_copy_) return Status::Ok();
  DPL_RETURN_IF_ERROR(CopyFromModel(DPL_MODEL_TENSORS_VALUES));
  if (!comm_ || collectives_on_model_) return Status::Ok();
  DPL_RETURN_IF_ERROR(
      comm_
          ->Submit([this] {
            int64_t shape[1] = {int64_t(host_values_.size())};
            DLTensor t = HostTensor(host_values_.data(), DLDataType{kDLFloat, 32, 1}, 1, shape);
            return backend_.Describe("broadcast",
                                     backend_.plugin->broadcast(backend_.backend, &t, 0, nullptr));
          })
          .get());
  return CopyValuesToModel();
}

Status Trainer::SetupBatchBuffers(int64_t capacity) {
  if (model_plugin_.host_batch != nullptr) {
    return ModelCall(
        model_plugin_, "host_batch",
        model_plugin_.host_batch(model_.get(), capacity, &input_buffer_, &label_buffer_));
  }
  const int64_t sample = train_.SampleElements();
  own_input_.assign(size_t(capacity * sample), 0.0f);
  own_labels_.assign(size_t(capacity), 0);
  own_input_shape_.assign(1, capacity);
  for (uint32_t d = 0; d < info_.input_ndim; ++d) own_input_shape_.push_back(info_.input_shape[d]);
  own_label_shape_.assign(1, capacity);
  input_buffer_ = HostTensor(own_input_.data(), DLDataType{kDLFloat, 32, 1},
                             int(own_input_shape_.size()), own_input_shape_.data());
  label_buffer_ =
      HostTensor(own_labels_.data(), DLDataType{kDLInt, 64, 1}, 1, own_label_shape_.data());
  return Status::Ok();
}

// The first n samples of a batch buffer, with `shape` (room for ndim entries) as its shape.
DLTensor Trainer::Batch(const DLTensor& buffer, int64_t n, int64_t* shape) const {
  DLTensor batch = buffer;
  std::copy(buffer.shape, buffer.shape + buffer.ndim, shape);
  shape[0] = n;
  batch.shape = shape;
  return batch;
}

// Averages (when not done yet), applies the optimizer and zeroes the gradients: in place for a
// host model, through the host copy otherwise (Note [Host copy of the parameters]).
Status Trainer::OptimizerStep(float scale, StepProfile* profile, Clock::time_point* mark) {
  if (host_copy_ && collectives_on_model_) {
    DPL_RETURN_IF_ERROR(CopyFromModel(DPL_MODEL_TENSORS_GRADIENTS));
    profile->copies_s += StepProfile::Since(*mark);
  }
  const bool scaled = sync_ && sync_->scaling() == GradientScaling::kInBucket;
  if (!scaled && scale != 1.0f) {
    for (Parameter& p : parameters_) {
      for (size_t i = 0; i < p.elements; ++i) p.gradient[i] *= scale;
    }
  }
  optimizer_->Step(optimizer_values_, optimizer_gradients_);
  profile->optimizer_s += StepProfile::Since(*mark);
  if (host_copy_) {
    DPL_RETURN_IF_ERROR(CopyValuesToModel());
    profile->copies_s += StepProfile::Since(*mark);
  }
  DPL_RETURN_IF_ERROR(
      ModelCall(model_plugin_, "zero_gradients", model_plugin_.zero_gradients(model_.get())));
  profile->optimizer_s += StepProfile::Since(*mark);
  return Status::Ok();
}

Status Trainer::Resume() {
  if (!options_.resume) return Status::Ok();
  if (options_.checkpoint_dir.empty()) {
    return Status::Error("--resume needs --checkpoint-dir (the folder to resume from)");
  }
  Result<std::string> newest = NewestCheckpoint(options_.checkpoint_dir);
  if (!newest.ok()) return newest.status();
  if (newest->empty()) {
    if (rank0())
      log::Info("--resume: no checkpoint in " + options_.checkpoint_dir + ", starting fresh");
    return Status::Ok();
  }
  Result<CheckpointState> state = ReadCheckpoint(*newest);
  if (!state.ok()) return state.status();
  const std::string expected = Fingerprint(options_, identity_.world_size);
  if (state->fingerprint != expected) {
    return Status::Error("checkpoint " + *newest + " was written with options '" +
                         state->fingerprint + "' but this run has '" + expected +
                         "'; resume with the same options or use another --checkpoint-dir");
  }
  std::vector<std::vector<float>*> buffers = optimizer_->StateBuffers();
  bool shapes_match = state->parameters.size() == parameters_.size() &&
                      state->optimizer_state.size() == buffers.size();
  for (size_t i = 0; shapes_match && i < parameters_.size(); ++i) {
    shapes_match = state->parameters[i].size() == parameters_[i].elements;
  }
  for (size_t i = 0; shapes_match && i < buffers.size(); ++i) {
    shapes_match = state->optimizer_state[i].size() == buffers[i]->size();
  }
  if (!shapes_match) {
    return Status::Error("checkpoint " + *newest +
                         " holds parameters or optimizer state of other shapes than this model");
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::memcpy(parameters_[i].value, state->parameters[i].data(),
                parameters_[i].elements * sizeof(float));
  }
  if (host_copy_) DPL_RETURN_IF_ERROR(CopyValuesToModel());
  for (size_t i = 0; i < buffers.size(); ++i) *buffers[i] = state->optimizer_state[i];
  optimizer_->set_steps(state->optimizer_steps);
  start_epoch_ = state->epoch;
  start_step_in_epoch_ = state->step_in_epoch;
  global_step_ = state->global_step;
  if (rank0()) {
    log::Info("resumed from " + *newest + " at epoch " + std::to_string(start_epoch_) + ", batch " +
              std::to_string(start_step_in_epoch_) + " (step " + std::to_string(global_step_) +
              ")");
  }
  return Status::Ok();
}

Status Trainer::SaveCheckpoint(int64_t epoch, int64_t step_in_epoch) {
  if (options_.checkpoint_dir.empty() || !rank0()) return Status::Ok();
  CheckpointState state;
  state.global_step = global_step_;
  state.epoch = epoch;
  state.step_in_epoch = step_in_epoch;
  state.optimizer_steps = optimizer_->steps();
  state.fingerprint = Fingerprint(options_, identity_.world_size);
  for (const Parameter& p : parameters_)
    state.parameters.emplace_back(p.value, p.value + p.elements);
  for (const std::vector<float>* b : optimizer_->StateBuffers())
    state.optimizer_state.push_back(*b);
  return WriteCheckpoint(options_.checkpoint_dir, state)
      .WithContext("writing a checkpoint to --checkpoint-dir " + options_.checkpoint_dir);
}

// Each rank evaluates a contiguous shard of the test set; the sums go through one allreduce.
Status Trainer::Evaluate() {
  DPL_RETURN_IF_ERROR(ModelCall(model_plugin_, "set_mode",
                                model_plugin_.set_mode(model_.get(), DPL_MODEL_MODE_EVAL)));
  const int64_t begin = test_.count * identity_.rank / identity_.world_size;
  const int64_t end = test_.count * (identity_.rank + 1) / identity_.world_size;
  // Moderate chunks: very large batches make the convolutions' scratch memory the bottleneck.
  const int64_t chunk = 128;
  DPL_RETURN_IF_ERROR(SetupBatchBuffers(chunk));
  float* input_data = HostData<float>(input_buffer_);
  int64_t* label_data = HostData<int64_t>(label_buffer_);
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t sample = test_.SampleElements();
  for (int64_t first = begin; first < end; first += chunk) {
    const int64_t n = std::min(chunk, end - first);
    for (int64_t i = 0; i < n; ++i) {
      test_.NormalisedSample(first + i, input_data + i * sample);
      label_data[i] = test_.labels[first + i];
    }
    int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS + 1], label_shape[1];
    const DLTensor input = Batch(input_buffer_, n, input_shape);
    const DLTensor labels = Batch(label_buffer_, n, label_shape);
    double batch_loss = 0.0;
    int64_t batch_correct = 0;
    DPL_RETURN_IF_ERROR(ModelCall(
        model_plugin_, "eval_step",
        model_plugin_.eval_step(model_.get(), &input, &labels, &batch_loss, &batch_correct)));
    loss_sum += batch_loss;
    correct += batch_correct;
  }
  // Three numbers: through the store, whatever memory the backend moves.
  std::vector<double> totals = {loss_sum, double(correct), double(end - begin)};
  if (identity_.world_size > 1) DPL_RETURN_IF_ERROR(sum_across_ranks_("test-set", &totals));
  if (rank0()) {
    char line[256];
    std::snprintf(line, sizeof line, "test set: average loss: %.4f, accuracy: %.0f/%.0f (%.2f%%)",
                  totals[2] > 0 ? totals[0] / totals[2] : 0.0, totals[1], totals[2],
                  totals[2] > 0 ? 100.0 * totals[1] / totals[2] : 0.0);
    log::Info(line);
  }
  return Status::Ok();
}

Status Trainer::DumpParameters() {
  if (options_.dump_parameters_dir.empty()) return Status::Ok();
  const std::string path =
      options_.dump_parameters_dir + "/rank-" + std::to_string(identity_.rank) + ".bin";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const Parameter& p : parameters_) {
    out.write(reinterpret_cast<const char*>(p.value), std::streamsize(p.elements * sizeof(float)));
  }
  out.close();
  if (!out) {
    return Status::Error("--dump-parameters: cannot write " + path +
                         "; create the folder first and check its permissions");
  }
  return Status::Ok();
}

void Trainer::Progress(int64_t epoch, int64_t batch, int64_t batches, double samples_per_s,
                       double eta_s) {
  const int width = 30;
  const int filled = int(width * batch / std::max<int64_t>(batches, 1));
  std::fprintf(stderr, "\r\033[Kepoch %lld [%.*s%*s] %lld/%lld %.0f samples/s ETA %.0fs",
               static_cast<long long>(epoch), filled,
               "==============================", width - filled, "", static_cast<long long>(batch),
               static_cast<long long>(batches), samples_per_s, eta_s);
  if (batch == batches) std::fputc('\n', stderr);
  std::fflush(stderr);
}

Status Trainer::Run() {
  DPL_RETURN_IF_ERROR(Setup());
  DPL_RETURN_IF_ERROR(Broadcast());
  DPL_RETURN_IF_ERROR(Resume());

  std::unique_ptr<std::ofstream> metrics;
  if (rank0() && !options_.metrics_file.empty()) {
    metrics = std::make_unique<std::ofstream>(options_.metrics_file,
                                              options_.resume ? std::ios::app : std::ios::trunc);
    if (!*metrics) return Status::Error("--metrics: cannot write " + options_.metrics_file);
  }
  const bool show_progress = rank0() && options_.progress && ::isatty(STDERR_FILENO);
  const DistributedSampler sampler(train_.count, identity_.world_size, identity_.rank,
                                   options_.seed, ShuffleMode::kShuffle,
                                   options_.drop_last ? RemainderMode::kDrop : RemainderMode::kPad);
  const int64_t batches = (sampler.samples_per_rank() + local_batch_ - 1) / local_batch_;
  const int64_t sample = train_.SampleElements();
  float* input_data = HostData<float>(input_buffer_);
  int64_t* label_data = HostData<int64_t>(label_buffer_);
  const Clock::time_point job_start = Clock::now();
  int64_t samples_done = 0;  // global samples, this run
  bool stop = false;
  int64_t epoch = start_epoch_;
  int64_t next_step_in_epoch = start_step_in_epoch_;
  StepProfile profile;
  for (; epoch < options_.epochs && !stop; ++epoch) {
    DPL_RETURN_IF_ERROR(ModelCall(model_plugin_, "set_mode",
                                  model_plugin_.set_mode(model_.get(), DPL_MODEL_MODE_TRAIN)));
    DPL_RETURN_IF_ERROR(
        ModelCall(model_plugin_, "zero_gradients", model_plugin_.zero_gradients(model_.get())));
    const std::vector<int64_t> indices = sampler.EpochIndices(epoch);
    const Clock::time_point epoch_start = Clock::now();
    int64_t epoch_samples = 0;
    int micro_steps = 0;
    const int64_t first_batch = epoch == start_epoch_ ? start_step_in_epoch_ : 0;
    for (int64_t batch = first_batch; batch < batches && !stop; ++batch) {
      Clock::time_point mark = Clock::now();
      const int64_t begin = batch * local_batch_;
      const int64_t n = std::min<int64_t>(local_batch_, int64_t(indices.size()) - begin);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t index = indices[begin + i];
        train_.NormalisedSample(index, input_data + i * sample);
        label_data[i] = train_.labels[index];
      }
      int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS + 1], label_shape[1];
      const DLTensor input = Batch(input_buffer_, n, input_shape);
      const DLTensor labels = Batch(label_buffer_, n, label_shape);

      ++micro_steps;
      const bool optimizer_step = micro_steps == options_.grad_accum || batch + 1 == batches;
      const float scale = 1.0f / float(identity_.world_size * micro_steps);
      if (sync_ && optimizer_step) sync_->BeginStep(scale);
      profile.data_s += StepProfile::Since(mark);
      float loss = 0.0f;
      Status step = ModelCall(model_plugin_, "train_step",
                              model_plugin_.train_step(model_.get(), &input, &labels, &loss));
      profile.compute_s += StepProfile::Since(mark);
      if (step.ok() && optimizer_step && host_copy_ && !collectives_on_model_) {
        // A host backend sums the host copy (Note [Host copy of the parameters]).
        step = CopyFromModel(DPL_MODEL_TENSORS_GRADIENTS);
        profile.copies_s += StepProfile::Since(mark);
      }
      if (sync_ && optimizer_step) {
        Status reduced = sync_->FinishStep();  // always drain the communication thread
        profile.comm_wait_s += StepProfile::Since(mark);
        DPL_RETURN_IF_ERROR(step);
        DPL_RETURN_IF_ERROR(reduced.WithContext("averaging gradients"));
      }
      DPL_RETURN_IF_ERROR(step);
      last_loss_ = loss;
      epoch_samples += n * identity_.world_size;
      samples_done += n * identity_.world_size;
      if (optimizer_step) {
        DPL_RETURN_IF_ERROR(OptimizerStep(scale, &profile, &mark));
        micro_steps = 0;
        ++global_step_;
        ++profile.steps;
        next_step_in_epoch = batch + 1;
        if (options_.checkpoint_every > 0 && global_step_ % options_.checkpoint_every == 0) {
          DPL_RETURN_IF_ERROR(SaveCheckpoint(epoch, batch + 1));
        }
        if (options_.max_steps > 0 && global_step_ >= options_.max_steps) stop = true;
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      const double rate = elapsed > 0 ? double(epoch_samples) / elapsed : 0.0;
      if (rank0() && options_.log_interval > 0 && (batch + 1) % options_.log_interval == 0) {
        char line[160];
        std::snprintf(line, sizeof line, "epoch: %lld [%lld/%lld] training loss: %.6f",
                      static_cast<long long>(epoch), static_cast<long long>(batch + 1),
                      static_cast<long long>(batches), double(loss));
        if (show_progress) std::fputs("\r\033[K", stderr);
        log::Info(line);
        if (metrics) {
          char json[256];
          std::snprintf(json, sizeof json,
                        "{\"epoch\": %lld, \"step\": %lld, \"loss\": %.6f, \"samples_per_s\": "
                        "%.1f, \"time_s\": %.3f}\n",
                        static_cast<long long>(epoch), static_cast<long long>(global_step_),
                        double(loss), rate,
                        std::chrono::duration<double>(Clock::now() - job_start).count());
          *metrics << json << std::flush;
        }
      }
      if (show_progress) {
        const double eta =
            rate > 0 ? double(batches - batch - 1) * local_batch_ * identity_.world_size / rate
                     : 0.0;
        Progress(epoch, batch + 1, batches, rate, eta);
      }
    }
    const double epoch_time = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    if (rank0()) {
      char line[200];
      std::snprintf(line, sizeof line, "epoch %lld done in %.2f s, %.1f samples/s, loss %.6f",
                    static_cast<long long>(epoch), epoch_time,
                    epoch_time > 0 ? double(epoch_samples) / epoch_time : 0.0, double(last_loss_));
      log::Info(line);
    }
    if (!stop) next_step_in_epoch = 0;
  }
  // Position to continue from: the epoch in progress when stopped by --max-steps, else the end.
  const int64_t resume_epoch = stop && next_step_in_epoch < batches ? epoch - 1 : epoch;
  DPL_RETURN_IF_ERROR(SaveCheckpoint(resume_epoch, resume_epoch == epoch ? 0 : next_step_in_epoch));
  const double total = std::chrono::duration<double>(Clock::now() - job_start).count();
  if (rank0()) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "training done: %lld steps, %.2f s, %.1f samples/s, final loss %.6f",
                  static_cast<long long>(global_step_), total,
                  total > 0 ? double(samples_done) / total : 0.0, double(last_loss_));
    log::Info(line);
    log::Info(profile.Describe());
  }
  if (options_.evaluate) DPL_RETURN_IF_ERROR(Evaluate());
  if (sync_) {
    DPL_RETURN_IF_ERROR(
        ModelCall(model_plugin_, "set_gradient_ready_callback",
                  model_plugin_.set_gradient_ready_callback(model_.get(), nullptr, nullptr)));
  }
  return DumpParameters();
}

}  // namespace

std::future<Result<TrainingData>> StartLoadingData(const cli::Options& options) {
  return std::async(std::launch::async, [&options]() -> Result<TrainingData> {
    TrainingData data;
    Result<Dataset> train =
        LoadIdxDataset(options.data_dir, DatasetSplit::kTrain, options.data_cache_dir);
    if (!train.ok()) return train.status().WithContext("loading the training set");
    data.train = std::move(*train);
    if (options.evaluate) {
      Result<Dataset> test =
          LoadIdxDataset(options.data_dir, DatasetSplit::kTest, options.data_cache_dir);
      if (!test.ok()) return test.status().WithContext("loading the test set");
      data.test = std::move(*test);
    }
    return data;
  });
}

Status RunTraining(const cli::Options& options, const WorkerIdentity& identity,
                   const TrainingBackend& backend, const dpl_model_plugin_v2& model_plugin,
                   std::future<Result<TrainingData>> data, SumAcrossRanks sum_across_ranks) {
  Trainer trainer(options, identity, backend, model_plugin, std::move(data),
                  std::move(sum_across_ranks));
  return trainer.Run();
}

}  // namespace dpl::training
