#include "training/trainer.hpp"

#include <algorithm>
#include <fstream>
#include <memory>

#include "common/log.hpp"
#include "observability/tracer.hpp"
#include "training/batch_buffer.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/optimizer.hpp"
#include "training/placement.hpp"
#include "training/reporter.hpp"
#include "training/sampler.hpp"

namespace dpl::training {
namespace {

// Moderate evaluation chunks: very large batches make the convolutions' scratch memory the
// bottleneck.
constexpr int64_t kEvaluationChunk = 128;

class Trainer {
 public:
  Trainer(const TrainingConfig& config, const WorkerIdentity& identity, Backend* backend,
          const ModelPlugin& model_plugin, std::future<Result<TrainingData>> data,
          SumAcrossRanks sum_across_ranks)
      : config_(config),
        identity_(identity),
        backend_(identity.world_size > 1 ? backend : nullptr),
        model_plugin_(model_plugin),
        data_(std::move(data)),
        sum_across_ranks_(std::move(sum_across_ranks)),
        checkpoints_(config, identity.rank, identity.world_size) {}

  Status Run();

 private:
  Status Setup();
  Status CreateModel();
  Status TrainEpoch(int64_t epoch);
  Status TrainBatch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices);
  Status OptimizerStep(float scale);
  Status Evaluate();
  Status DumpParameters() const;
  bool StepLimitReached() const {
    return config_.max_steps > 0 && position_.global_step >= config_.max_steps;
  }

  const TrainingConfig& config_;
  WorkerIdentity identity_;
  Backend* backend_;  // NULL at world size 1: nothing to average
  const ModelPlugin& model_plugin_;
  std::future<Result<TrainingData>> data_;
  SumAcrossRanks sum_across_ranks_;
  CheckpointPolicy checkpoints_;
  Dataset train_, test_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParameterPlacement> placement_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<DistributedSampler> sampler_;
  BatchBuffer batch_;
  StepProfile profile_;
  int local_batch_ = 0;
  int64_t batches_ = 0;  // per epoch and rank
  TrainingPosition start_, position_;
  int micro_steps_ = 0;        // of the optimizer step under way
  int64_t epoch_samples_ = 0;  // global samples of the epoch under way
  int64_t samples_done_ = 0;   // global samples, this run
  float last_loss_ = 0.0f;
  bool stopped_ = false;  // --max-steps reached
};

Status Trainer::Run() {
  DPL_RETURN_IF_ERROR(Setup());
  DPL_RETURN_IF_ERROR(placement_->BroadcastInitialValues());
  Result<TrainingPosition> start = checkpoints_.Resume(*placement_, *optimizer_);
  if (!start.ok()) return start.status();
  start_ = position_ = *start;
  reporter_->OnRunStart({batches_, start_.epoch, start_.step_in_epoch, start_.global_step});
  stopped_ = StepLimitReached();  // a run resumed at its last step has nothing left to train
  int64_t epoch = start_.epoch;
  for (; epoch < config_.epochs && !stopped_; ++epoch) DPL_RETURN_IF_ERROR(TrainEpoch(epoch));
  // Where to continue from: the epoch in progress when --max-steps stopped it, else the end.
  TrainingPosition end = position_;
  const bool mid_epoch = stopped_ && position_.step_in_epoch < batches_ && epoch > start_.epoch;
  end.epoch = mid_epoch ? epoch - 1 : epoch;
  if (!mid_epoch) end.step_in_epoch = 0;
  if (stopped_ && epoch == start_.epoch) end = start_;  // nothing trained: keep the position
  DPL_RETURN_IF_ERROR(checkpoints_.Save(end, *placement_, *optimizer_));
  reporter_->OnTrainingEnd(position_.global_step, samples_done_, last_loss_, profile_);
  if (config_.evaluate) DPL_RETURN_IF_ERROR(Evaluate());
  DPL_RETURN_IF_ERROR(placement_->Detach());
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
  settings.compression = config_.grad_compression;
  settings.bucket_cap_bytes = config_.bucket_cap_bytes;
  settings.device = config_.device;
  DPL_RETURN_IF_ERROR(ParameterPlacement::CheckSupported(model_plugin_.label.name,
                                                         model_plugin_.abi_version, settings));

  Result<TrainingData> data = data_.get();
  if (!data.ok()) return data.status();
  train_ = std::move(data->train);
  test_ = std::move(data->test);
  DPL_RETURN_IF_ERROR(CreateModel());
  const dpl_model_info_v3& info = model_->info();
  DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(train_, info));
  if (config_.evaluate) DPL_RETURN_IF_ERROR(CheckDatasetMatchesModel(test_, info));

  Result<std::unique_ptr<ParameterPlacement>> placement =
      ParameterPlacement::Create(*model_, backend_, settings);
  if (!placement.ok()) return placement.status();
  placement_ = std::move(*placement);
  const std::vector<int64_t> sample_shape(info.input_shape, info.input_shape + info.input_ndim);
  DPL_RETURN_IF_ERROR(batch_.Allocate(*model_, 0, local_batch_, sample_shape));

  OptimizerOptions optimizer_options;
  optimizer_options.kind = config_.optimizer;
  optimizer_options.learning_rate = config_.learning_rate;
  optimizer_options.momentum = config_.momentum;
  std::vector<size_t> sizes;
  for (const HostParameter& p : placement_->parameters()) sizes.push_back(p.elements);
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(optimizer_options, sizes);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);

  Result<std::unique_ptr<Reporter>> reporter = Reporter::Create(config_, identity_.rank);
  if (!reporter.ok()) return reporter.status();
  reporter_ = std::move(*reporter);
  sampler_ = std::make_unique<DistributedSampler>(
      train_.count, identity_.world_size, identity_.rank, config_.seed, ShuffleMode::kShuffle,
      config_.drop_last ? RemainderMode::kDrop : RemainderMode::kPad);
  batches_ = (sampler_->samples_per_rank() + local_batch_ - 1) / local_batch_;
  return Status::Ok();
}

Status Trainer::CreateModel() {
  dpl_model_config_v3 model_config{};
  model_config.struct_size = sizeof model_config;
  model_config.version = model_plugin_.abi_version;
  model_config.options = config_.model_options.c_str();
  model_config.device_type = identity_.device_type;
  model_config.device_id = identity_.device_id;
  model_config.seed = config_.seed;
  model_config.num_threads = std::max(1, identity_.threads);
  model_config.rank = identity_.rank;
  model_config.log = log::PluginLogCallback;
  model_config.log_context = nullptr;
  model_config.precision = DPL_PRECISION_FP32;
  Result<std::unique_ptr<Model>> model = Model::Create(model_plugin_, model_config);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  return Status::Ok();
}

Status Trainer::TrainEpoch(int64_t epoch) {
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_TRAIN));
  DPL_RETURN_IF_ERROR(model_->ZeroGradients());
  const std::vector<int64_t> indices = sampler_->EpochIndices(epoch);
  reporter_->StartEpoch();
  epoch_samples_ = 0;
  micro_steps_ = 0;
  const int64_t first_batch = epoch == start_.epoch ? start_.step_in_epoch : 0;
  for (int64_t batch = first_batch; batch < batches_ && !stopped_; ++batch) {
    DPL_RETURN_IF_ERROR(TrainBatch(epoch, batch, indices));
  }
  reporter_->OnEpochEnd(epoch, epoch_samples_, last_loss_);
  return Status::Ok();
}

Status Trainer::TrainBatch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices) {
  reporter_->StartBatch(position_.global_step + 1);
  profile_.Restart();
  const int64_t begin = batch * local_batch_;
  const int64_t n = std::min<int64_t>(local_batch_, int64_t(indices.size()) - begin);
  const int64_t sample = train_.SampleElements();
  float* input = batch_.input_data();
  int64_t* labels = batch_.label_data();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = indices[begin + i];
    train_.NormalisedSample(index, input + i * sample);
    labels[i] = train_.labels[index];
  }
  ++micro_steps_;
  const bool optimizer_step = micro_steps_ == config_.grad_accum || batch + 1 == batches_;
  const float scale = 1.0f / float(identity_.world_size * micro_steps_);
  if (optimizer_step) placement_->BeginStep(scale);
  profile_.Lap(StepPhase::kData);
  float loss = 0.0f;
  const Status step = model_->TrainStep(batch_.Input(n), batch_.Labels(n), &loss);
  profile_.Lap(StepPhase::kCompute);
  DPL_RETURN_IF_ERROR(optimizer_step ? placement_->FinishGradients(step, scale, &profile_) : step);
  last_loss_ = loss;
  epoch_samples_ += n * identity_.world_size;
  samples_done_ += n * identity_.world_size;
  position_.step_in_epoch = batch + 1;
  if (optimizer_step) {
    optimizer_->Step(placement_->values(), placement_->gradients());
    profile_.Lap(StepPhase::kOptimizer);
    DPL_RETURN_IF_ERROR(placement_->PublishValues(&profile_));
    micro_steps_ = 0;
    ++position_.global_step;
    profile_.CountStep();
    if (checkpoints_.DueAfter(position_.global_step)) {
      TrainingPosition next = position_;
      next.epoch = epoch;
      DPL_RETURN_IF_ERROR(checkpoints_.Save(next, *placement_, *optimizer_));
    }
    stopped_ = StepLimitReached();
  }
  reporter_->OnBatch({epoch, batch + 1, batches_, position_.global_step, loss, epoch_samples_,
                      optimizer_->learning_rate()},
                     profile_);
  return Status::Ok();
}

// Each rank evaluates a contiguous shard of the test set; the sums go through one allreduce.
Status Trainer::Evaluate() {
  const observability::TraceScope span("eval", "evaluation");
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_EVAL));
  const int64_t begin = test_.count * identity_.rank / identity_.world_size;
  const int64_t end = test_.count * (identity_.rank + 1) / identity_.world_size;
  const dpl_model_info_v3& info = model_->info();
  const std::vector<int64_t> sample_shape(info.input_shape, info.input_shape + info.input_ndim);
  DPL_RETURN_IF_ERROR(batch_.Allocate(*model_, 0, kEvaluationChunk, sample_shape));
  float* input = batch_.input_data();
  int64_t* labels = batch_.label_data();
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t sample = test_.SampleElements();
  for (int64_t first = begin; first < end; first += kEvaluationChunk) {
    const int64_t n = std::min(kEvaluationChunk, end - first);
    for (int64_t i = 0; i < n; ++i) {
      test_.NormalisedSample(first + i, input + i * sample);
      labels[i] = test_.labels[first + i];
    }
    double batch_loss = 0.0;
    int64_t batch_correct = 0;
    DPL_RETURN_IF_ERROR(
        model_->EvalStep(batch_.Input(n), batch_.Labels(n), &batch_loss, &batch_correct));
    loss_sum += batch_loss;
    correct += batch_correct;
  }
  // Three numbers: through the store, whatever memory the backend moves.
  std::vector<double> totals = {loss_sum, double(correct), double(end - begin)};
  if (identity_.world_size > 1) DPL_RETURN_IF_ERROR(sum_across_ranks_("test-set", &totals));
  reporter_->OnEvaluation(totals[0], totals[1], totals[2]);
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
  return Status::Ok();
}

}  // namespace

std::future<Result<TrainingData>> StartLoadingData(const TrainingConfig& config) {
  return std::async(std::launch::async, [&config]() -> Result<TrainingData> {
    TrainingData data;
    Result<Dataset> train =
        LoadIdxDataset(config.data_dir, DatasetSplit::kTrain, config.data_cache_dir);
    if (!train.ok()) return train.status().WithContext("loading the training set");
    data.train = std::move(*train);
    if (config.evaluate) {
      Result<Dataset> test =
          LoadIdxDataset(config.data_dir, DatasetSplit::kTest, config.data_cache_dir);
      if (!test.ok()) return test.status().WithContext("loading the test set");
      data.test = std::move(*test);
    }
    return data;
  });
}

Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity, Backend* backend,
                   const ModelPlugin& model_plugin, std::future<Result<TrainingData>> data,
                   SumAcrossRanks sum_across_ranks) {
  Trainer trainer(config, identity, backend, model_plugin, std::move(data),
                  std::move(sum_across_ranks));
  return trainer.Run();
}

}  // namespace dpl::training
