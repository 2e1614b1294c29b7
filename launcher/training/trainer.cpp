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
#include "training/idx_dataset.hpp"
#include "training/optimizer.hpp"
#include "training/sampler.hpp"

namespace dpl::training {
namespace {

using Clock = std::chrono::steady_clock;

// Model calls fail with a status and a per-thread message; this joins them into one Status.
Status ModelCall(const dpl_model_plugin_v1& plugin, const char* function, dpl_status status) {
  if (status == DPL_OK) return Status::Ok();
  const char* detail = plugin.last_error ? plugin.last_error() : "";
  return Status::Error(std::string("model '") + plugin.header.name + "': " + function +
                       " failed with " + StatusName(status) +
                       (detail && *detail ? std::string(": ") + detail : std::string()));
}

struct ModelDeleter {
  const dpl_model_plugin_v1* plugin;
  void operator()(dpl_model* model) const { plugin->destroy(model); }
};

struct Parameter {
  std::string name;
  float* value = nullptr;
  float* gradient = nullptr;
  size_t elements = 0;
};

size_t Elements(const DLTensor& t) {
  size_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= size_t(t.shape[d]);
  return n;
}

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
    return line;
  }
};

DLTensor CpuTensor(void* data, DLDataType dtype, int ndim, int64_t* shape) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

class Trainer {
 public:
  Trainer(const cli::Options& options, const WorkerIdentity& identity,
          const dpl_backend_plugin_v1& backend_plugin, dpl_backend* backend,
          const dpl_model_plugin_v1& model_plugin, std::future<Result<TrainingData>> data)
      : options_(options),
        identity_(identity),
        backend_{&backend_plugin, backend},
        model_plugin_(model_plugin),
        model_(nullptr, ModelDeleter{&model_plugin}),
        data_(std::move(data)) {}

  Status Run();

 private:
  Status Setup();
  Status Broadcast();
  Status Resume();
  Status SaveCheckpoint(int64_t epoch, int64_t step_in_epoch);
  Status Evaluate();
  Status DumpParameters();
  void Progress(int64_t epoch, int64_t batch, int64_t batches, double samples_per_s, double eta_s);

  const cli::Options& options_;
  WorkerIdentity identity_;
  BackendHandle backend_;
  const dpl_model_plugin_v1& model_plugin_;
  std::unique_ptr<dpl_model, ModelDeleter> model_;
  dpl_model_info_v1 info_{};
  std::future<Result<TrainingData>> data_;
  Dataset train_, test_;
  std::vector<Parameter> parameters_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<CommunicationThread> comm_;
  std::unique_ptr<GradientSynchronizer> sync_;
  int local_batch_ = 0;
  int64_t start_epoch_ = 0, start_step_in_epoch_ = 0, global_step_ = 0;
  float last_loss_ = 0.0f;
  bool rank0() const { return identity_.rank == 0; }
};

Status Trainer::Setup() {
  if (options_.device != "cpu") {
    return Status::Error("--device " + options_.device +
                         ": the host training loop updates float32 CPU buffers and supports only "
                         "--device cpu so far");
  }
  Result<int> local_batch = PerRankBatchSize(options_.batch_size, identity_.world_size);
  if (!local_batch.ok()) return local_batch.status();
  local_batch_ = *local_batch;
  if (options_.grad_accum < 1) {
    return Status::Error("--grad-accum " + std::to_string(options_.grad_accum) +
                         " must be at least 1");
  }
  Result<GradientCompression> compression = ParseGradientCompression(options_.grad_compression);
  if (!compression.ok()) return compression.status();

  Result<TrainingData> data = data_.get();
  if (!data.ok()) return data.status();
  train_ = std::move(data->train);
  test_ = std::move(data->test);

  dpl_model_config_v1 config{};
  config.struct_size = sizeof config;
  config.version = DPL_MODEL_ABI_VERSION_1;
  config.options = options_.model_options.c_str();
  config.device_type = kDLCPU;
  config.device_id = 0;
  config.seed = options_.seed;
  config.num_threads = std::max(1, identity_.threads);
  config.log = log::PluginLogCallback;
  config.log_context = nullptr;
  dpl_model* raw = nullptr;
  DPL_RETURN_IF_ERROR(ModelCall(model_plugin_, "create", model_plugin_.create(&config, &raw)));
  model_.reset(raw);
  info_.struct_size = sizeof info_;
  DPL_RETURN_IF_ERROR(
      ModelCall(model_plugin_, "describe", model_plugin_.describe(model_.get(), &info_)));
  DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(train_, info_));
  if (options_.evaluate) DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(test_, info_));

  std::vector<size_t> sizes;
  for (uint32_t i = 0; i < info_.parameter_count; ++i) {
    dpl_parameter_v1 p{};
    p.struct_size = sizeof p;
    DPL_RETURN_IF_ERROR(
        ModelCall(model_plugin_, "parameter", model_plugin_.parameter(model_.get(), i, &p)));
    const bool float32 = p.value.dtype.code == kDLFloat && p.value.dtype.bits == 32 &&
                         p.gradient.dtype.code == kDLFloat && p.gradient.dtype.bits == 32;
    if (!float32 || p.value.device.device_type != kDLCPU ||
        Elements(p.value) != Elements(p.gradient)) {
      return Status::Error(std::string("model '") + model_plugin_.header.name + "': parameter " +
                           std::to_string(i) + " (" + (p.name ? p.name : "?") +
                           ") is not a float32 CPU tensor with a gradient of the same size");
    }
    Parameter param;
    param.name = p.name ? p.name : "";
    param.value = reinterpret_cast<float*>(static_cast<char*>(p.value.data) + p.value.byte_offset);
    param.gradient =
        reinterpret_cast<float*>(static_cast<char*>(p.gradient.data) + p.gradient.byte_offset);
    param.elements = Elements(p.value);
    sizes.push_back(param.elements);
    parameters_.push_back(param);
  }

  OptimizerOptions optimizer_options;
  optimizer_options.name = options_.optimizer;
  optimizer_options.learning_rate = options_.learning_rate;
  optimizer_options.momentum = options_.momentum;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(optimizer_options, sizes);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);

  if (identity_.world_size > 1) {
    comm_ = std::make_unique<CommunicationThread>();
    std::vector<GradientTensor> gradients;
    for (const Parameter& p : parameters_) gradients.push_back({p.gradient, p.elements});
    std::vector<Bucket> buckets = AssignBuckets(sizes, options_.bucket_cap_bytes);
    if (rank0()) {
      log::Info("gradients of " + std::to_string(parameters_.size()) + " parameters in " +
                std::to_string(buckets.size()) + " bucket(s) of at most " +
                std::to_string(options_.bucket_cap_bytes) + " bytes");
    }
    sync_ = std::make_unique<GradientSynchronizer>(backend_, comm_.get(), identity_.world_size,
                                                   std::move(gradients), std::move(buckets),
                                                   *compression);
    DPL_RETURN_IF_ERROR(
        ModelCall(model_plugin_, "set_gradient_ready_callback",
                  model_plugin_.set_gradient_ready_callback(
                      model_.get(), GradientSynchronizer::GradientReadyTrampoline, sync_.get())));
  }
  return Status::Ok();
}

Status Trainer::Broadcast() {
  if (!comm_) return Status::Ok();
  return comm_
      ->Submit([this] {
        for (Parameter& p : parameters_) {
          int64_t shape[1] = {int64_t(p.elements)};
          DLTensor t = CpuTensor(p.value, DLDataType{kDLFloat, 32, 1}, 1, shape);
          DPL_RETURN_IF_ERROR(backend_.Describe(
              "broadcast", backend_.plugin->broadcast(backend_.backend, &t, 0, nullptr)));
        }
        return Status::Ok();
      })
      .get();
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
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t sample = test_.SampleElements();
  std::vector<float> eval_input(size_t(chunk * sample));
  for (int64_t first = begin; first < end; first += chunk) {
    const int64_t n = std::min(chunk, end - first);
    int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS + 1] = {n};
    for (uint32_t d = 0; d < info_.input_ndim; ++d) input_shape[d + 1] = info_.input_shape[d];
    int64_t label_shape[1] = {n};
    for (int64_t i = 0; i < n; ++i)
      test_.NormalisedSample(first + i, eval_input.data() + i * sample);
    DLTensor input = CpuTensor(eval_input.data(), DLDataType{kDLFloat, 32, 1},
                               int(info_.input_ndim) + 1, input_shape);
    DLTensor labels =
        CpuTensor(test_.labels.data() + first, DLDataType{kDLInt, 64, 1}, 1, label_shape);
    double batch_loss = 0.0;
    int64_t batch_correct = 0;
    DPL_RETURN_IF_ERROR(ModelCall(
        model_plugin_, "eval_step",
        model_plugin_.eval_step(model_.get(), &input, &labels, &batch_loss, &batch_correct)));
    loss_sum += batch_loss;
    correct += batch_correct;
  }
  float totals[3] = {float(loss_sum), float(correct), float(end - begin)};
  if (comm_) {
    DPL_RETURN_IF_ERROR(comm_
                            ->Submit([this, &totals] {
                              int64_t shape[1] = {3};
                              DLTensor t = CpuTensor(totals, DLDataType{kDLFloat, 32, 1}, 1, shape);
                              return backend_.Describe(
                                  "allreduce", backend_.plugin->allreduce(backend_.backend, &t,
                                                                          DPL_REDUCE_SUM, nullptr));
                            })
                            .get());
  }
  if (rank0()) {
    char line[256];
    std::snprintf(line, sizeof line, "test set: average loss: %.4f, accuracy: %.0f/%.0f (%.2f%%)",
                  totals[2] > 0 ? totals[0] / totals[2] : 0.0, double(totals[1]), double(totals[2]),
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
  std::vector<float> input_buffer(size_t(local_batch_) * sample);
  std::vector<int64_t> label_buffer(local_batch_);
  std::vector<float*> values;
  std::vector<const float*> gradients;
  for (Parameter& p : parameters_) {
    values.push_back(p.value);
    gradients.push_back(p.gradient);
  }
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
        train_.NormalisedSample(index, input_buffer.data() + i * sample);
        label_buffer[i] = train_.labels[index];
      }
      int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS + 1] = {n};
      for (uint32_t d = 0; d < info_.input_ndim; ++d) input_shape[d + 1] = info_.input_shape[d];
      int64_t label_shape[1] = {n};
      DLTensor input = CpuTensor(input_buffer.data(), DLDataType{kDLFloat, 32, 1},
                                 int(info_.input_ndim) + 1, input_shape);
      DLTensor labels = CpuTensor(label_buffer.data(), DLDataType{kDLInt, 64, 1}, 1, label_shape);

      ++micro_steps;
      const bool optimizer_step = micro_steps == options_.grad_accum || batch + 1 == batches;
      const float scale = 1.0f / float(identity_.world_size * micro_steps);
      if (sync_ && optimizer_step) sync_->BeginStep(scale);
      profile.data_s += StepProfile::Since(mark);
      float loss = 0.0f;
      Status step = ModelCall(model_plugin_, "train_step",
                              model_plugin_.train_step(model_.get(), &input, &labels, &loss));
      profile.compute_s += StepProfile::Since(mark);
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
        if (!sync_ && micro_steps > 1) {
          for (Parameter& p : parameters_) {
            for (size_t i = 0; i < p.elements; ++i) p.gradient[i] *= scale;
          }
        }
        optimizer_->Step(values, gradients);
        DPL_RETURN_IF_ERROR(
            ModelCall(model_plugin_, "zero_gradients", model_plugin_.zero_gradients(model_.get())));
        micro_steps = 0;
        ++global_step_;
        profile.optimizer_s += StepProfile::Since(mark);
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
    Result<Dataset> train = LoadIdxDataset(options.data_dir, DatasetSplit::kTrain);
    if (!train.ok()) return train.status().WithContext("loading the training set");
    data.train = std::move(*train);
    if (options.evaluate) {
      Result<Dataset> test = LoadIdxDataset(options.data_dir, DatasetSplit::kTest);
      if (!test.ok()) return test.status().WithContext("loading the test set");
      data.test = std::move(*test);
    }
    return data;
  });
}

Status RunTraining(const cli::Options& options, const WorkerIdentity& identity,
                   const dpl_backend_plugin_v1& backend_plugin, dpl_backend* backend,
                   const dpl_model_plugin_v1& model_plugin,
                   std::future<Result<TrainingData>> data) {
  Trainer trainer(options, identity, backend_plugin, backend, model_plugin, std::move(data));
  return trainer.Run();
}

}  // namespace dpl::training
