#include "training/trainer.hpp"

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>

#include "common/log.hpp"
#include "observability/tracer.hpp"
#include "training/batch_buffer.hpp"
#include "training/buffers.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/model_export.hpp"
#include "training/model_setup.hpp"
#include "training/parameter_update.hpp"
#include "training/placement.hpp"
#include "training/precision.hpp"
#include "training/prefetch.hpp"
#include "training/replica_check.hpp"
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
          const LocalGroup& local, PreemptionCheck preemption)
      : config_(config),
        identity_(identity),
        backend_(identity.world_size > 1 ? backend : nullptr),
        model_plugin_(model_plugin),
        data_(std::move(data)),
        sum_across_ranks_(std::move(sum_across_ranks)),
        preemption_(std::move(preemption)),
        local_(local),
        checkpoints_(config, identity.rank) {}

  Status Run();

 private:
  Status Setup();
  // How the parameters are placed and summed: the flags, and this machine's workers.
  PlacementSettings ChoosePlacement() const;
  void SayWhatAutoChose(const PlacementSettings& settings) const;
  Status TrainEpoch(int64_t epoch);
  Status TrainBatch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices);
  Status StopIfPreempted(int64_t epoch);
  void Prefetch(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices);
  Status Evaluate();
  Status ValidateIfDue(int64_t epoch, int64_t batch);
  Status ExportBest();
  TrainingPosition EndPosition() const;
  EvaluationSetup Evaluation() const;
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
  PreemptionCheck preemption_;
  bool preempted_ = false;  // the run stops at this step boundary
  LocalGroup local_;
  std::unique_ptr<ThreadPool> threads_;  // the worker's, for the optimizer
  CheckpointPolicy checkpoints_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParameterPlacement> placement_;
  std::unique_ptr<ParameterUpdate> update_;  // loss scaling, clipping, schedule, optimizer
  std::unique_ptr<ReplicaCheck> replicas_;   // --check-replicas
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
  ValidationState validation_;  // --eval-every; carried by checkpoints
  // Where --early-stop-patience ended the run, once it has.
  std::optional<TrainingPosition> stopped_at_;
};

Status Trainer::Run() {
  DPL_RETURN_IF_ERROR(Setup());
  DPL_RETURN_IF_ERROR(InitFrom());
  DPL_RETURN_IF_ERROR(placement_->BroadcastInitialState());
  checkpoints_.TrackValidation(&validation_);
  DPL_ASSIGN_OR_RETURN(TrainingPosition start, checkpoints_.Resume(*model_, *placement_, *update_));
  DPL_RETURN_IF_ERROR(placement_->SettleSharedValues());
  position_ = start;
  plan_ = StepPlan(config_, plan_.batches_per_epoch(), start);
  // A run resumed after its patience ran out ends where the straight run did.
  if (PatienceRunOut(validation_, config_.early_stop_patience)) stopped_at_ = start;
  reporter_->OnRunStart(plan_);
  for (int64_t epoch = plan_.start().epoch; epoch < plan_.EndEpoch() && !stopped_at_; ++epoch) {
    DPL_RETURN_IF_ERROR(TrainEpoch(epoch));
    if (preempted_) return Status::Ok();
  }
  // The last forward pass updated each rank's buffers from its own batch: rank 0's, the ones
  // checkpointed and exported, go to every rank, so all evaluate and end with the same model.
  DPL_RETURN_IF_ERROR(placement_->BeforeForward());
  DPL_RETURN_IF_ERROR(checkpoints_.Save(EndPosition(), *model_, *placement_, *update_));
  reporter_->OnTrainingEnd(position_.global_step, samples_done_, last_loss_, profile_);
  update_->LogSummary(position_.global_step);
  if (config_.evaluate) DPL_RETURN_IF_ERROR(Evaluate());
  DPL_RETURN_IF_ERROR(placement_->Detach());
  DPL_RETURN_IF_ERROR(Export());
  return DumpParameters();
}

PlacementSettings Trainer::ChoosePlacement() const {
  PlacementSettings settings;
  settings.rank = identity_.rank;
  settings.world_size = identity_.world_size;
  settings.mirror_parameters = config_.mirror_parameters;
  settings.wire = ResolveGradientWire(config_.precision, config_.grad_compression,
                                      /*across_machines=*/local_.machines > 1);
  settings.bucket_cap_bytes = config_.bucket_cap_bytes;
  settings.device = config_.device;
  settings.local_reduce = config_.local_reduce;
  settings.offload_optimizer = config_.offload_optimizer;
  settings.local = local_;
  settings.shard_optimizer = ParameterPlacement::ShardsOptimizer(config_.shard_optimizer, settings);
  if (identity_.rank == 0) SayWhatAutoChose(settings);
  return settings;
}

// Rank 0's word on the choices of `auto` flags that differ from what the flag's name suggests.
void Trainer::SayWhatAutoChose(const PlacementSettings& settings) const {
  if (settings.shard_optimizer && config_.shard_optimizer == OptimizerSharding::kAuto) {
    log::Info("each of this machine's " + std::to_string(local_.local_world_size) +
              " workers keeps the optimizer state of its part of the parameters (--shard-optimizer "
              "auto; off keeps the whole state in each)");
  }
  if (settings.wire.float32_on_one_machine) {
    const std::string precision = NameOf(PrecisionNames(), config_.precision);
    log::Info(
        "the gradients are summed in float32 on this one machine (--grad-compression auto "
        "sends " +
        precision + " buckets only between machines; with --local-reduce backend, " +
        "--grad-compression " + precision + " sends them here too)");
  }
}

Status Trainer::Setup() {
  DPL_ASSIGN_OR_RETURN(local_batch_, PerRankBatchSize(config_.batch_size, identity_.world_size));
  const PlacementSettings settings = ChoosePlacement();
  DPL_RETURN_IF_ERROR(ParameterPlacement::CheckSupported(model_plugin_, settings));
  DPL_RETURN_IF_ERROR(CheckPrecisionSupported(model_plugin_, config_.precision));

  DPL_ASSIGN_OR_RETURN(model_, CreateModelForData(model_plugin_, config_, identity_, data_));
  const dpl_model_info& info = model_->info();
  DPL_ASSIGN_OR_RETURN(placement_, ParameterPlacement::Create(*model_, backend_, settings));
  for (uint32_t slot = 0; slot < 2; ++slot) {
    DPL_RETURN_IF_ERROR(
        buffers_[slot].Allocate(*model_, slot, local_batch_, info.input, info.target));
  }
  prefetcher_ = std::make_unique<BatchPrefetcher>(*data_.train);

  DPL_ASSIGN_OR_RETURN(reporter_, Reporter::Create(config_, identity_.rank));
  sampler_ = std::make_unique<DistributedSampler>(
      data_.train->count(), identity_.world_size, identity_.rank, config_.seed,
      ShuffleMode::kShuffle, config_.drop_last ? RemainderMode::kDrop : RemainderMode::kPad);
  plan_ = StepPlan(config_, StepPlan::BatchesPerEpoch(sampler_->samples_per_rank(), local_batch_));

  threads_ = std::make_unique<ThreadPool>(identity_.threads);
  DPL_ASSIGN_OR_RETURN(
      update_, ParameterUpdate::Create(config_, placement_->parameters(), placement_->update_view(),
                                       plan_, identity_.rank, threads_.get()));
  replicas_ =
      std::make_unique<ReplicaCheck>(config_.check_replicas, identity_.world_size,
                                     ReplicaGather(backend_, placement_.get(), sum_across_ranks_,
                                                   identity_.rank, identity_.world_size));
  if (config_.check_replicas > 0 && placement_->SharesValues() && identity_.rank == 0) {
    log::Info(
        "--check-replicas compares the machines' copies of the parameters: the workers of a "
        "machine compute with one copy (--shard-optimizer off gives each its own)");
  }
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
  for (int64_t batch = plan_.FirstBatch(epoch);
       batch < end_batch && trained.ok() && !stopped_at_ && !preempted_; ++batch) {
    trained = TrainBatch(epoch, batch, indices);
  }
  const Status prefetched = prefetcher_->Wait();  // none may outlive the epoch's indices
  DPL_RETURN_IF_ERROR(trained);
  DPL_RETURN_IF_ERROR(prefetched);
  if (preempted_) return Status::Ok();
  std::vector<double> losses = reporter_->EpochLossTotals();  // Note [Epoch loss]
  if (identity_.world_size > 1) {
    DPL_RETURN_IF_ERROR(sum_across_ranks_("epoch-loss-" + std::to_string(epoch), &losses));
  }
  reporter_->OnEpochEnd(epoch, epoch_samples_, losses);
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
  const Status step = model_->TrainStep(buffer.Input(n), buffer.Target(n), &loss);
  profile_.Lap(StepPhase::kCompute);
  DPL_RETURN_IF_ERROR(optimizer_step ? placement_->FinishGradients(step, scale, &profile_) : step);
  last_loss_ = loss;
  epoch_samples_ += n * identity_.world_size;
  samples_done_ += n * identity_.world_size;
  position_.step_in_epoch = batch + 1;
  if (optimizer_step) {
    DPL_RETURN_IF_ERROR(update_->Step(position_.global_step, placement_->update_view()).status());
    profile_.Lap(StepPhase::kOptimizer);
    DPL_RETURN_IF_ERROR(placement_->PublishValues(&profile_));
    ++position_.global_step;
    profile_.CountStep();
    if (replicas_->DueAfter(position_.global_step)) {
      DPL_RETURN_IF_ERROR(placement_->RefreshHostValues());
      DPL_RETURN_IF_ERROR(replicas_->AfterStep(position_.global_step, placement_->parameters()));
    }
    DPL_RETURN_IF_ERROR(ValidateIfDue(epoch, batch));
    if (checkpoints_.DueAfter(position_.global_step)) {
      TrainingPosition next = position_;
      next.epoch = epoch;
      DPL_RETURN_IF_ERROR(checkpoints_.Save(next, *model_, *placement_, *update_));
    }
    DPL_RETURN_IF_ERROR(StopIfPreempted(epoch));
  }
  reporter_->OnBatch({epoch, batch + 1, plan_.batches_per_epoch(), position_.global_step, loss,
                      epoch_samples_, update_->learning_rate()},
                     profile_);
  return Status::Ok();
}

EvaluationSetup Trainer::Evaluation() const {
  return EvaluationSetup{identity_.rank, identity_.world_size, sum_across_ranks_};
}

// Note [Preemption] in preemption.cpp: the checkpoint of this step (unless it was due anyway), on
// disk before any rank stops.
Status Trainer::StopIfPreempted(int64_t epoch) {
  if (!preemption_) return Status::Ok();
  DPL_ASSIGN_OR_RETURN(bool stop, preemption_(position_.global_step));
  if (!stop) return Status::Ok();
  preempted_ = true;
  if (!checkpoints_.DueAfter(position_.global_step)) {
    TrainingPosition here = position_;
    here.epoch = epoch;
    DPL_RETURN_IF_ERROR(checkpoints_.Save(here, *model_, *placement_, *update_));
  }
  if (backend_ != nullptr) DPL_RETURN_IF_ERROR(backend_->Barrier());
  const std::string step = std::to_string(position_.global_step);
  log::Info(identity_.rank == 0
                ? "preempted: every rank stops after step " + step + "; its checkpoint is " +
                      config_.checkpoint_dir + "/" + CheckpointFileName(position_.global_step)
                : "preempted: stopping after step " + step + ", whose checkpoint rank 0 wrote");
  return Status::Ok();
}

// The test set, each rank a contiguous shard (Note [Evaluation totals]).
Status Trainer::Evaluate() {
  DataSplit& test = *data_.test;
  const dpl_model_info& info = model_->info();
  BatchBuffer& buffer = buffers_[0];
  DPL_RETURN_IF_ERROR(buffer.Allocate(*model_, 0, kEvaluationChunk, info.input, info.target));
  DPL_ASSIGN_OR_RETURN(EvaluationTotals totals,
                       EvaluateSplit(*model_, test, test.count(), buffer, kEvaluationChunk,
                                     Evaluation(), "test-set"));
  reporter_->OnEvaluation(
      {false, info.target.ndim > 0, totals.loss_sum, totals.elements, totals.correct, 0.0});
  return Status::Ok();
}

// --eval-every: after the optimizer step that made position_.global_step steps (batch `batch` of
// `epoch`), the first --eval-batches global batches of the validation split, through the slot
// the step has just used; then --export-best and --early-stop-patience. Before the step's
// checkpoint, so that it carries the evaluation.
Status Trainer::ValidateIfDue(int64_t epoch, int64_t batch) {
  const int64_t step = position_.global_step;
  if (config_.eval_every <= 0 || step % config_.eval_every != 0) return Status::Ok();
  DataSplit& validation = *data_.validation;
  const int64_t batches = config_.eval_batches;  // 0: the whole split
  const bool part = batches > 0 && batches <= validation.count() / config_.batch_size;
  const int64_t count = part ? batches * config_.batch_size : validation.count();
  DPL_RETURN_IF_ERROR(placement_->BeforeForward());  // every rank evaluates rank 0's buffers
  DPL_ASSIGN_OR_RETURN(EvaluationTotals totals,
                       EvaluateSplit(*model_, validation, count, buffers_[batch % 2], local_batch_,
                                     Evaluation(), "validation-step-" + std::to_string(step)));
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_TRAIN));
  const bool improved = RecordValidationLoss(totals.MeanLoss(), &validation_);
  reporter_->OnEvaluation({true, model_->info().target.ndim > 0, totals.loss_sum, totals.elements,
                           totals.correct, validation_.best_loss, step});
  if (improved) DPL_RETURN_IF_ERROR(ExportBest());
  if (PatienceRunOut(validation_, config_.early_stop_patience)) {
    stopped_at_ = TrainingPosition{epoch, batch + 1, step};
    if (batch + 1 == plan_.batches_per_epoch()) stopped_at_ = TrainingPosition{epoch + 1, 0, step};
    if (identity_.rank == 0) {
      log::Info("early stop after step " + std::to_string(step) +
                ": the validation loss has not "
                "improved for " +
                std::to_string(validation_.without_improvement) +
                " evaluations (--early-stop-patience)");
    }
  }
  return Status::Ok();
}

// --export-best: rank 0 writes the model of the new lowest validation loss.
Status Trainer::ExportBest() {
  if (config_.export_best_file.empty() || identity_.rank != 0) return Status::Ok();
  return ExportModel(*model_, *placement_, config_.export_best_file).WithContext("--export-best");
}

// Where the run ends: where --early-stop-patience stopped it, else the plan's end.
TrainingPosition Trainer::EndPosition() const {
  return stopped_at_ ? *stopped_at_ : plan_.EndPosition();
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

// --export: rank 0 writes the trained model (model_export.hpp).
Status Trainer::Export() const {
  if (config_.export_file.empty() || identity_.rank != 0) return Status::Ok();
  DPL_RETURN_IF_ERROR(
      ExportModel(*model_, *placement_, config_.export_file).WithContext("--export"));
  log::Info("the trained model is in " + config_.export_file);
  return Status::Ok();
}

Status Trainer::DumpParameters() const {
  if (config_.dump_parameters_dir.empty()) return Status::Ok();
  DPL_RETURN_IF_ERROR(placement_->RefreshHostValues());
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
  DPL_ASSIGN_OR_RETURN(std::vector<BufferInfo> buffers, ListBuffers(*model_));
  size_t total = 0;
  for (const BufferInfo& buffer : buffers) total += buffer.bytes;
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
                   SumAcrossRanks sum_across_ranks, const LocalGroup& local,
                   PreemptionCheck preemption) {
  Trainer trainer(config, identity, backend, model_plugin, std::move(data),
                  std::move(sum_across_ranks), local, std::move(preemption));
  return trainer.Run();
}

}  // namespace dpl::training
