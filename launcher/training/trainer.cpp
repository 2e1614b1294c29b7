#include "training/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/log.hpp"
#include "observability/tracer.hpp"
#include "training/batch_buffer.hpp"
#include "training/buffers.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/model_setup.hpp"
#include "training/parameter_update.hpp"
#include "training/placement.hpp"
#include "training/precision.hpp"
#include "training/prefetch.hpp"
#include "training/reporter.hpp"
#include "training/sampler.hpp"
#include "training/state_dict.hpp"
#include "training/step_plan.hpp"
#include "training/thread_pool.hpp"

namespace dpl::training {
namespace {

// Moderate evaluation chunks: very large batches make the convolutions' scratch memory the
// bottleneck.
constexpr int64_t kEvaluationChunk = 128;

class Trainer {
 public:
  Trainer(const TrainingConfig& config, const WorkerIdentity& identity, Backend* backend,
          const ModelPlugin& model_plugin, TrainingData data, SumAcrossRanks sum_across_ranks,
          const LocalGroup& local)
      : config_(config),
        identity_(identity),
        backend_(identity.world_size > 1 ? backend : nullptr),
        model_plugin_(model_plugin),
        data_(std::move(data)),
        sum_across_ranks_(std::move(sum_across_ranks)),
        local_(local),
        checkpoints_(config, identity.rank) {}

  Status Run();

 private:
  Status Setup();
  Status TrainEpoch(int64_t epoch);
  Status TrainBatch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices);
  void Prefetch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices);
  Status Evaluate();
  Status InitFrom();
  Status Export() const;
  Status DumpParameters() const;
  Status DumpBuffers() const;

  const TrainingConfig& config_;
  WorkerIdentity identity_;
  Backend* backend_;  // NULL at world size 1: nothing to average
  const ModelPlugin& model_plugin_;
  TrainingData data_;
  SumAcrossRanks sum_across_ranks_;
  LocalGroup local_;
  std::unique_ptr<ThreadPool> threads_;  // the worker's, for the optimizer
  CheckpointPolicy checkpoints_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParameterPlacement> placement_;
  std::unique_ptr<ParameterUpdate> update_;  // loss scaling, clipping, schedule, optimizer
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<DistributedSampler> sampler_;
  BatchBuffer buffers_[2];                       // the step's and the next one's (slots 0 and 1)
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // after the buffers: it must stop first
  StepProfile profile_;
  int local_batch_ = 0;
  StepPlan plan_;  // from the start of the run, once known
  TrainingPosition position_;
  int64_t epoch_samples_ = 0;  // global samples of the epoch under way
  int64_t samples_done_ = 0;   // global samples, this run
  float last_loss_ = 0.0f;
};

Status Trainer::Run() {
  DPL_RETURN_IF_ERROR(Setup());
  DPL_RETURN_IF_ERROR(InitFrom());
  DPL_RETURN_IF_ERROR(placement_->BroadcastInitialState());
  Result<TrainingPosition> start = checkpoints_.Resume(*model_, *placement_, *update_);
  if (!start.ok()) return start.status();
  position_ = *start;
  plan_ = StepPlan(config_, plan_.batches_per_epoch(), *start);
  reporter_->OnRunStart(plan_);
  for (int64_t epoch = plan_.start().epoch; epoch < plan_.EndEpoch(); ++epoch) {
    DPL_RETURN_IF_ERROR(TrainEpoch(epoch));
  }
  // The last forward pass updated each rank's buffers from its own batch: rank 0's, the ones
  // checkpointed and exported, go to every rank, so all evaluate and end with the same model.
  DPL_RETURN_IF_ERROR(placement_->BeforeForward());
  DPL_RETURN_IF_ERROR(checkpoints_.Save(plan_.EndPosition(), *model_, *placement_, *update_));
  reporter_->OnTrainingEnd(position_.global_step, samples_done_, last_loss_, profile_);
  update_->LogSummary(position_.global_step);
  if (config_.evaluate) DPL_RETURN_IF_ERROR(Evaluate());
  DPL_RETURN_IF_ERROR(placement_->Detach());
  DPL_RETURN_IF_ERROR(Export());
  return DumpParameters();
}

Status Trainer::Setup() {
  Result<int> local_batch = PerRankBatchSize(config_.batch_size, identity_.world_size);
  if (!local_batch.ok()) return local_batch.status();
  local_batch_ = *local_batch;
  PlacementSettings settings;
  settings.rank = identity_.rank;
  settings.world_size = identity_.world_size;
  settings.mirror_parameters = config_.mirror_parameters;
  settings.wire = ResolveGradientWire(config_.precision, config_.grad_compression);
  settings.bucket_cap_bytes = config_.bucket_cap_bytes;
  settings.device = config_.device;
  settings.local_reduce = config_.local_reduce;
  settings.shard_optimizer = config_.shard_optimizer;
  settings.local = local_;
  DPL_RETURN_IF_ERROR(ParameterPlacement::CheckSupported(model_plugin_, settings));
  DPL_RETURN_IF_ERROR(CheckPrecisionSupported(model_plugin_, config_.precision));

  Result<std::unique_ptr<Model>> model =
      CreateModelForData(model_plugin_, config_, identity_, data_);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  const dpl_model_info& info = model_->info();
  Result<std::unique_ptr<ParameterPlacement>> placement =
      ParameterPlacement::Create(*model_, backend_, settings);
  if (!placement.ok()) return placement.status();
  placement_ = std::move(*placement);
  const std::vector<int64_t> sample_shape(info.input_shape, info.input_shape + info.input_ndim);
  for (uint32_t slot = 0; slot < 2; ++slot) {
    DPL_RETURN_IF_ERROR(buffers_[slot].Allocate(*model_, slot, local_batch_, sample_shape));
  }
  prefetcher_ = std::make_unique<BatchPrefetcher>(*data_.train);

  Result<std::unique_ptr<Reporter>> reporter = Reporter::Create(config_, identity_.rank);
  if (!reporter.ok()) return reporter.status();
  reporter_ = std::move(*reporter);
  sampler_ = std::make_unique<DistributedSampler>(
      data_.train->count(), identity_.world_size, identity_.rank, config_.seed,
      ShuffleMode::kShuffle, config_.drop_last ? RemainderMode::kDrop : RemainderMode::kPad);
  plan_ = StepPlan(config_, StepPlan::BatchesPerEpoch(sampler_->samples_per_rank(), local_batch_));

  threads_ = std::make_unique<ThreadPool>(identity_.threads);
  Result<std::unique_ptr<ParameterUpdate>> update = ParameterUpdate::Create(
      config_, placement_->update_view(), plan_, identity_.rank, threads_.get());
  if (!update.ok()) return update.status();
  update_ = std::move(*update);
  return Status::Ok();
}

Status Trainer::TrainEpoch(int64_t epoch) {
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_TRAIN));
  DPL_RETURN_IF_ERROR(model_->ZeroGradients());
  const std::vector<int64_t> indices = sampler_->EpochIndices(epoch);
  reporter_->StartEpoch();
  epoch_samples_ = 0;
  Prefetch(epoch, plan_.FirstBatch(epoch), indices);
  Status trained = Status::Ok();
  const int64_t end_batch = plan_.EndBatch(epoch);
  for (int64_t batch = plan_.FirstBatch(epoch); batch < end_batch && trained.ok(); ++batch) {
    trained = TrainBatch(epoch, batch, indices);
  }
  const Status prefetched = prefetcher_->Wait();  // none may outlive the epoch's indices
  DPL_RETURN_IF_ERROR(trained);
  DPL_RETURN_IF_ERROR(prefetched);
  reporter_->OnEpochEnd(epoch, epoch_samples_, last_loss_);
  return Status::Ok();
}

// Starts gathering batch `batch` of the epoch into its slot, when the run trains one.
void Trainer::Prefetch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices) {
  if (batch >= plan_.EndBatch(epoch)) return;
  const int64_t begin = batch * local_batch_;
  const int64_t n = std::min<int64_t>(local_batch_, int64_t(indices.size()) - begin);
  prefetcher_->Start(&buffers_[batch % 2], indices.data() + begin, n, epoch);
}

Status Trainer::TrainBatch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices) {
  reporter_->StartBatch(position_.global_step + 1);
  profile_.Restart();
  const int64_t n = std::min<int64_t>(local_batch_, int64_t(indices.size()) - batch * local_batch_);
  DPL_RETURN_IF_ERROR(prefetcher_->Wait().WithContext("reading the training data"));
  BatchBuffer& buffer = buffers_[batch % 2];
  Prefetch(epoch, batch + 1, indices);  // into the other slot, while this step runs
  const bool optimizer_step = plan_.IsOptimizerStep(epoch, batch);
  const float scale = 1.0f / float(identity_.world_size * plan_.MicroBatchesSoFar(epoch, batch));
  profile_.Lap(StepPhase::kData);
  DPL_RETURN_IF_ERROR(placement_->BeforeForward());
  DPL_RETURN_IF_ERROR(update_->BeforeBatch(position_.global_step, *model_));
  if (optimizer_step) placement_->BeginStep(scale);
  profile_.Lap(StepPhase::kCommunicationWait);
  float loss = 0.0f;
  const Status step = model_->TrainStep(buffer.Input(n), buffer.Labels(n), &loss);
  profile_.Lap(StepPhase::kCompute);
  DPL_RETURN_IF_ERROR(optimizer_step ? placement_->FinishGradients(step, scale, &profile_) : step);
  last_loss_ = loss;
  epoch_samples_ += n * identity_.world_size;
  samples_done_ += n * identity_.world_size;
  position_.step_in_epoch = batch + 1;
  if (optimizer_step) {
    Result<StepDecision> updated = update_->Step(position_.global_step, placement_->update_view());
    if (!updated.ok()) return updated.status();
    profile_.Lap(StepPhase::kOptimizer);
    DPL_RETURN_IF_ERROR(placement_->PublishValues(&profile_));
    ++position_.global_step;
    profile_.CountStep();
    if (checkpoints_.DueAfter(position_.global_step)) {
      TrainingPosition next = position_;
      next.epoch = epoch;
      DPL_RETURN_IF_ERROR(checkpoints_.Save(next, *model_, *placement_, *update_));
    }
  }
  reporter_->OnBatch({epoch, batch + 1, plan_.batches_per_epoch(), position_.global_step, loss,
                      epoch_samples_, update_->learning_rate()},
                     profile_);
  return Status::Ok();
}

// Each rank evaluates a contiguous shard of the test set; the sums go through one allreduce.
Status Trainer::Evaluate() {
  const observability::TraceScope span("eval", "evaluation");
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_EVAL));
  DataSplit& test = *data_.test;
  const int64_t begin = test.count() * identity_.rank / identity_.world_size;
  const int64_t end = test.count() * (identity_.rank + 1) / identity_.world_size;
  const dpl_model_info& info = model_->info();
  const std::vector<int64_t> sample_shape(info.input_shape, info.input_shape + info.input_ndim);
  BatchBuffer& buffer = buffers_[0];
  DPL_RETURN_IF_ERROR(buffer.Allocate(*model_, 0, kEvaluationChunk, sample_shape));
  std::vector<int64_t> indices(static_cast<size_t>(kEvaluationChunk));
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t first = begin; first < end; first += kEvaluationChunk) {
    const int64_t n = std::min(kEvaluationChunk, end - first);
    for (int64_t i = 0; i < n; ++i) indices[size_t(i)] = first + i;
    DPL_RETURN_IF_ERROR(test.Fill(indices.data(), 0, buffer.Input(n), buffer.Labels(n))
                            .WithContext("reading the test data"));
    double batch_loss = 0.0;
    int64_t batch_correct = 0;
    DPL_RETURN_IF_ERROR(
        model_->EvalStep(buffer.Input(n), buffer.Labels(n), &batch_loss, &batch_correct));
    loss_sum += batch_loss;
    correct += batch_correct;
  }
  // Three numbers: through the store, whatever memory the backend moves.
  std::vector<double> totals = {loss_sum, double(correct), double(end - begin)};
  if (identity_.world_size > 1) DPL_RETURN_IF_ERROR(sum_across_ranks_("test-set", &totals));
  reporter_->OnEvaluation(totals[0], totals[1], totals[2]);
  return Status::Ok();
}

// --init-from: rank 0 reads the state dict; the initial broadcast takes it to every rank.
Status Trainer::InitFrom() {
  if (config_.init_from.empty() || identity_.rank != 0) return Status::Ok();
  const Status loaded = model_->Has(ModelCapability::kStateFiles)
                            ? model_->LoadState(config_.init_from)
                            : ReadParameterStateDict(config_.init_from, *placement_);
  DPL_RETURN_IF_ERROR(loaded.WithContext("--init-from " + config_.init_from));
  log::Info("parameters from " + config_.init_from);
  return Status::Ok();
}

// --export: the model's own export (kStateFiles), written to a temporary name and renamed; for
// other plugins a state dict of the host's parameters.
Status Trainer::Export() const {
  if (config_.export_file.empty() || identity_.rank != 0) return Status::Ok();
  if (!model_->Has(ModelCapability::kStateFiles)) {
    return WriteParameterStateDict(config_.export_file, *placement_).WithContext("--export");
  }
  const std::string temporary = config_.export_file + ".tmp." + std::to_string(::getpid());
  Status saved = model_->SaveState(temporary);
  if (saved.ok() && std::rename(temporary.c_str(), config_.export_file.c_str()) != 0) {
    saved = Status::Io("renaming " + temporary + " to " + config_.export_file +
                       " failed: " + std::strerror(errno));
  }
  if (!saved.ok()) {
    std::remove(temporary.c_str());
    return saved.WithContext("--export");
  }
  log::Info("the trained model is in " + config_.export_file);
  return Status::Ok();
}

Status Trainer::DumpParameters() const {
  if (config_.dump_parameters_dir.empty()) return Status::Ok();
  const std::string path =
      config_.dump_parameters_dir + "/rank-" + std::to_string(identity_.rank) + ".bin";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const HostParameter& p : placement_->parameters()) {
    out.write(reinterpret_cast<const char*>(p.value), std::streamsize(p.elements * sizeof(float)));
  }
  out.close();
  if (!out) {
    return Status::Io("--dump-parameters: cannot write " + path +
                      "; create the folder first and check its permissions");
  }
  return DumpBuffers();
}

// The buffers' bytes back to back, in buffer order, next to the parameters.
Status Trainer::DumpBuffers() const {
  Result<std::vector<BufferInfo>> buffers = ListBuffers(*model_);
  if (!buffers.ok()) return buffers.status();
  size_t total = 0;
  for (const BufferInfo& buffer : *buffers) total += buffer.bytes;
  if (total == 0) return Status::Ok();
  std::vector<uint8_t> bytes(total);
  DPL_RETURN_IF_ERROR(model_->ReadBuffers(bytes.data(), bytes.size()));
  const std::string path =
      config_.dump_parameters_dir + "/rank-" + std::to_string(identity_.rank) + ".buffers.bin";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  out.close();
  if (!out) return Status::Io("--dump-parameters: cannot write " + path);
  return Status::Ok();
}

}  // namespace

Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity, Backend* backend,
                   const ModelPlugin& model_plugin, TrainingData data,
                   SumAcrossRanks sum_across_ranks, const LocalGroup& local) {
  Trainer trainer(config, identity, backend, model_plugin, std::move(data),
                  std::move(sum_across_ranks), local);
  return trainer.Run();
}

}  // namespace dpl::training
