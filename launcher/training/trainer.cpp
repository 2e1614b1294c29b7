#include "training/trainer.hpp"

#include <fstream>
#include <memory>
#include <optional>

#include "common/log.hpp"
#include "training/batch_feed.hpp"
#include "training/buffers.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/evaluation.hpp"
#include "training/live_state.hpp"
#include "training/model_export.hpp"
#include "training/model_setup.hpp"
#include "training/placement_choice.hpp"
#include "training/precision.hpp"
#include "training/replica_check.hpp"
#include "training/reporter.hpp"
#include "training/state_dict.hpp"
#include "training/step_parts.hpp"
#include "training/step_plan.hpp"
#include "training/stragglers.hpp"

namespace dpl::training {
namespace {

// Moderate evaluation batches: very large ones make the convolutions' scratch memory the
// bottleneck.
constexpr int64_t kEvaluationBatch = 128;

// What a run writes and checks besides its steps.
struct RunRecords {
  std::unique_ptr<Reporter> reporter;
  std::unique_ptr<CheckpointPolicy> checkpoints;
  std::unique_ptr<ReplicaCheck> replicas;  // --check-replicas
  std::unique_ptr<StragglerCheck> stragglers;
  ValidationState validation;  // --eval-every; carried by checkpoints
};

// Where the run is.
struct RunProgress {
  StepPlan plan;  // from the start of the run, once known
  TrainingPosition position;
  int64_t epoch_samples = 0;  // global samples of the epoch under way
  int64_t samples_done = 0;   // global samples, this run
  float last_loss = 0.0f;
  StepProfile profile;
  // Where the last optimizer step left the run: what a live state holds (Note [Shrink in place]).
  TrainingPosition committed;
  bool started = false;  // Start is done: the model holds the run's state
  // Where --early-stop-patience ended the run, once it has.
  std::optional<TrainingPosition> stopped_at;
  bool preempted = false;  // the run stops at this step boundary
};

class Trainer {
 public:
  Trainer(const TrainingConfig& config, const WorkerIdentity& identity, TrainingData& data,
          Collectives& collectives, TrainingHooks hooks)
      : config_(config),
        identity_(identity),
        data_(data),
        collectives_(collectives),
        preemption_(std::move(hooks.preemption)),
        step_times_(hooks.step_times),
        live_(hooks.live_state) {}

  Status Run(const ModelPlugin& model_plugin, const LocalGroup& local);

 private:
  // How the parameters are placed and summed: the flags, and this machine's workers.
  Status Setup(const ModelPlugin& model_plugin, const LocalGroup& local);
  Status CreateRecords();
  Status Start();
  // The position to start from: a live state's (Note [Shrink in place]), else --resume's.
  Result<TrainingPosition> StartPosition();
  // After a failure: this rank's state of its last committed step into *live_, where the state
  // is whole here and the run had started.
  void KeepLiveState();
  LiveRun Live() {
    return {collectives_, *records_.checkpoints, *model_, step_, config_.bucket_cap_bytes};
  }
  Status TrainEpochs();
  Status TrainEpoch(int64_t epoch);
  Status TrainBatch(int64_t epoch, int64_t batch);
  Status Publish();
  void Commit(int64_t epoch, int64_t batch);
  Status AfterStep(int64_t epoch, int64_t batch);
  Status StopIfPreempted(int64_t epoch);
  Status Finish();
  Status Evaluate();
  Status ValidateIfDue(int64_t epoch, int64_t batch);
  Status ExportBest();
  TrainingPosition EndPosition() const;
  // Where a run continues after batch `batch` of `epoch`, which made `global_step` steps: the
  // next batch, or the next epoch's first after the last.
  TrainingPosition PositionAfter(int64_t epoch, int64_t batch, int64_t global_step) const;
  Status InitFrom();
  Status Export() const;
  Status DumpParameters() const;

  const TrainingConfig& config_;
  WorkerIdentity identity_;
  TrainingData& data_;
  Collectives& collectives_;
  PreemptionCheck preemption_;
  StepTimeSharing* step_times_;     // NULL: not compared
  std::optional<LiveState>* live_;  // NULL: no live state is kept or taken
  std::unique_ptr<Model> model_;
  StepParts step_;  // the placement, the reducer, the optimizer runner
  std::unique_ptr<BatchFeed> feed_;
  RunRecords records_;
  RunProgress progress_;
};

Status Trainer::Run(const ModelPlugin& model_plugin, const LocalGroup& local) {
  DPL_RETURN_IF_ERROR(Setup(model_plugin, local));
  DPL_RETURN_IF_ERROR(Start());
  Status trained = TrainEpochs();
  if (trained.ok() && !progress_.preempted) trained = Finish();
  if (!trained.ok()) KeepLiveState();
  return trained;
}

Status Trainer::TrainEpochs() {
  for (int64_t epoch = progress_.plan.start().epoch;
       epoch < progress_.plan.EndEpoch() && !progress_.stopped_at; ++epoch) {
    DPL_RETURN_IF_ERROR(TrainEpoch(epoch));
    if (progress_.preempted) return Status::Ok();
  }
  return Status::Ok();
}

void Trainer::KeepLiveState() {
  if (live_ == nullptr || !progress_.started) return;
  KeepLiveStateOf(Live(), progress_.committed, live_);
}

Status Trainer::Setup(const ModelPlugin& model_plugin, const LocalGroup& local) {
  DPL_ASSIGN_OR_RETURN(const int local_batch,
                       PerRankBatchSize(config_.batch_size, identity_.world_size));
  const PlacementSettings settings =
      ChoosePlacement(config_, identity_, local, /*keeps_live_state=*/live_ != nullptr);
  DPL_RETURN_IF_ERROR(ParameterPlacement::CheckSupported(model_plugin, settings));
  DPL_RETURN_IF_ERROR(CheckPrecisionSupported(model_plugin, config_.precision));
  DPL_ASSIGN_OR_RETURN(model_, CreateModelForData(model_plugin, config_, identity_, data_));
  DPL_ASSIGN_OR_RETURN(step_, PlaceParameters(*model_, collectives_, settings));
  DPL_ASSIGN_OR_RETURN(feed_,
                       BatchFeed::Create(*model_, *data_.train, config_, identity_, local_batch));
  progress_.plan =
      StepPlan(config_, StepPlan::BatchesPerEpoch(feed_->samples_per_rank(), local_batch));
  DPL_RETURN_IF_ERROR(CreateRecords());
  DPL_RETURN_IF_ERROR(AddOptimizer(
      config_, progress_.plan, *model_, identity_.rank, identity_.threads, &step_,
      PartKeepingOf(config_, step_, local.local_world_size, settings.keeps_live_state)));
  records_.replicas = std::make_unique<ReplicaCheck>(
      config_.check_replicas, identity_.world_size,
      [this](const std::vector<uint64_t>& mine, const std::string& name) {
        return collectives_.GatherWords(mine, name);
      });
  if (config_.check_replicas > 0 && step_.reducer->SharesValues() && identity_.rank == 0) {
    log::Info(
        "--check-replicas compares the machines' copies of the parameters: the workers of a "
        "machine compute with one copy (--shard-optimizer off gives each its own)");
  }
  return Status::Ok();
}

Status Trainer::CreateRecords() {
  DPL_ASSIGN_OR_RETURN(records_.reporter, Reporter::Create(config_, identity_.rank));
  records_.checkpoints = std::make_unique<CheckpointPolicy>(
      config_, identity_.rank, identity_.world_size, records_.validation, data_.train->count(),
      progress_.plan.RunSteps());
  records_.stragglers = std::make_unique<StragglerCheck>(step_times_, identity_.rank,
                                                         identity_.world_size, config_.stragglers);
  return Status::Ok();
}

// Every rank from rank 0's parameters and buffers (or a checkpoint's, or a live rank's), at the
// plan's start.
Status Trainer::Start() {
  DPL_ASSIGN_OR_RETURN(const TrainingPosition start, StartPosition());
  DPL_RETURN_IF_ERROR(step_.reducer->SettleSharedValues());
  progress_.position = start;
  progress_.committed = start;
  progress_.started = true;
  progress_.plan = StepPlan(config_, progress_.plan.batches_per_epoch(), start);
  // A run resumed after its patience ran out ends where the straight run did.
  if (PatienceRunOut(records_.validation, config_.early_stop_patience)) {
    progress_.stopped_at = start;
  }
  records_.reporter->OnRunStart(progress_.plan);
  return Status::Ok();
}

Result<TrainingPosition> Trainer::StartPosition() {
  LivePlan plan;
  if (live_ != nullptr) {
    DPL_ASSIGN_OR_RETURN(plan, ChooseLiveSource(collectives_, *live_));
  }
  if (plan.source >= 0) return TakeLiveState(Live(), identity_.rank, plan, live_);
  DPL_RETURN_IF_ERROR(InitFrom());
  DPL_RETURN_IF_ERROR(step_.placement->BroadcastValues(collectives_));
  DPL_RETURN_IF_ERROR(step_.placement->BroadcastBuffers(collectives_));
  return records_.checkpoints->Resume(*model_, *step_.placement, *step_.optimizer);
}

// Before each forward pass of training, and once after the last: rank 0's buffers to every rank,
// when the model asks for it (DDP's broadcast_buffers=True).
Status BroadcastBuffersIfAsked(Model& model, ParameterPlacement& placement,
                               Collectives& collectives) {
  if (!model.Has(ModelCapability::kBroadcastBuffers)) return Status::Ok();
  return placement.BroadcastBuffers(collectives);
}

// The last forward pass updated each rank's buffers from its own batch: rank 0's, the ones
// checkpointed and exported, go to every rank, so all evaluate and end with the same model.
Status Trainer::Finish() {
  DPL_RETURN_IF_ERROR(BroadcastBuffersIfAsked(*model_, *step_.placement, collectives_));
  DPL_RETURN_IF_ERROR(
      records_.checkpoints->Save(EndPosition(), *model_, *step_.placement, *step_.optimizer));
  DPL_RETURN_IF_ERROR(records_.checkpoints->Finish());
  records_.reporter->OnTrainingEnd(progress_.position.global_step, progress_.samples_done,
                                   progress_.last_loss, progress_.profile);
  step_.optimizer->LogSummary(progress_.position.global_step);
  if (config_.evaluate) DPL_RETURN_IF_ERROR(Evaluate());
  DPL_RETURN_IF_ERROR(step_.reducer->Detach());
  DPL_RETURN_IF_ERROR(Export());
  records_.reporter->SayWhereRecordsAre();
  return DumpParameters();
}

Status Trainer::TrainEpoch(int64_t epoch) {
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_TRAIN));
  DPL_RETURN_IF_ERROR(model_->ZeroGradients());
  records_.reporter->StartEpoch();
  progress_.epoch_samples = 0;
  const StepPlan& plan = progress_.plan;
  feed_->StartEpoch(epoch, plan.FirstBatch(epoch), plan.EndBatch(epoch));
  Status trained = Status::Ok();
  for (int64_t batch = plan.FirstBatch(epoch); batch < plan.EndBatch(epoch) && trained.ok() &&
                                               !progress_.stopped_at && !progress_.preempted;
       ++batch) {
    trained = TrainBatch(epoch, batch);
  }
  const Status fed = feed_->EndEpoch();
  DPL_RETURN_IF_ERROR(trained);
  DPL_RETURN_IF_ERROR(fed);
  if (progress_.preempted) return Status::Ok();
  std::vector<double> losses = records_.reporter->EpochLossTotals();  // Note [Epoch loss]
  DPL_RETURN_IF_ERROR(collectives_.SumScalars("epoch-loss-" + std::to_string(epoch), &losses));
  records_.reporter->OnEpochEnd(epoch, progress_.epoch_samples, losses);
  return Status::Ok();
}

// One batch: forward and backward, and where it ends an optimizer step, the reduction of the
// gradients, the update and its publication to the model.
Status Trainer::TrainBatch(int64_t epoch, int64_t batch) {
  RunProgress& p = progress_;
  records_.reporter->StartBatch(p.position.global_step + 1);
  p.profile.Restart();
  int64_t n = 0;
  DPL_ASSIGN_OR_RETURN(BatchBuffer * buffer, feed_->Take(batch, &n));
  const bool optimizer_step = p.plan.IsOptimizerStep(epoch, batch);
  const float scale = 1.0f / float(identity_.world_size * p.plan.MicroBatchesSoFar(epoch, batch));
  p.profile.Lap(StepPhase::kData);
  DPL_RETURN_IF_ERROR(BroadcastBuffersIfAsked(*model_, *step_.placement, collectives_));
  DPL_RETURN_IF_ERROR(step_.optimizer->BeforeBatch(p.position.global_step, *model_));
  if (optimizer_step) step_.reducer->BeginStep(scale);
  p.profile.Lap(StepPhase::kCommunicationWait);
  float loss = 0.0f;
  const Status forward_backward = model_->TrainStep(buffer->Input(n), buffer->Target(n), &loss);
  p.profile.Lap(StepPhase::kCompute);
  if (!optimizer_step) DPL_RETURN_IF_ERROR(forward_backward);
  p.last_loss = loss;
  p.epoch_samples += n * identity_.world_size;
  p.samples_done += n * identity_.world_size;
  p.position.step_in_epoch = batch + 1;
  if (optimizer_step) {
    DPL_ASSIGN_OR_RETURN(const float factor,
                         step_.reducer->Finish(forward_backward, scale, &p.profile));
    DPL_RETURN_IF_ERROR(step_.optimizer->Step(p.position.global_step, factor).status());
    p.profile.Lap(StepPhase::kOptimizer);
    DPL_RETURN_IF_ERROR(Publish());
    Commit(epoch, batch);
  }
  // Reported once committed, before the checks after it, whose collectives a lost peer may fail:
  // a committed step the regroup goes on from is in the log and the metrics.
  records_.reporter->OnBatch({epoch, batch + 1, p.plan.batches_per_epoch(), p.position.global_step,
                              loss, p.epoch_samples, step_.optimizer->learning_rate()},
                             p.profile);
  return optimizer_step ? AfterStep(epoch, batch) : Status::Ok();
}

// The optimizer step of batch `batch` of `epoch` is done on this rank: the run's position moves.
void Trainer::Commit(int64_t epoch, int64_t batch) {
  TrainingPosition& position = progress_.position;
  ++position.global_step;
  progress_.committed = PositionAfter(epoch, batch, position.global_step);
  progress_.profile.CountStep();
}

// The model computes with the updated values, every rank's part of them, its gradients zeroed.
Status Trainer::Publish() {
  DPL_RETURN_IF_ERROR(step_.reducer->PublishParts(&progress_.profile));
  DPL_RETURN_IF_ERROR(step_.placement->Publish(&progress_.profile));
  return step_.reducer->ResetGradients(&progress_.profile);
}

// After the optimizer step of batch `batch` of `epoch`: the checks, the validation and the
// checkpoint it is due, and a preemption.
Status Trainer::AfterStep(int64_t epoch, int64_t batch) {
  TrainingPosition& position = progress_.position;
  // Note [Stragglers]: this rank's compute is its batches read and their forward+backward.
  const StepProfile& profile = progress_.profile;
  for (const StragglerEvent& event : records_.stragglers->AfterStep(
           position.global_step,
           profile.seconds(StepPhase::kData) + profile.seconds(StepPhase::kCompute))) {
    records_.reporter->OnStraggler(position.global_step, event);
  }
  if (records_.replicas->DueAfter(position.global_step)) {
    DPL_RETURN_IF_ERROR(step_.placement->RefreshHostValues());
    DPL_RETURN_IF_ERROR(
        records_.replicas->AfterStep(position.global_step, step_.placement->parameters()));
  }
  DPL_RETURN_IF_ERROR(ValidateIfDue(epoch, batch));
  if (records_.checkpoints->DueAfter(position.global_step)) {
    TrainingPosition next = position;
    next.epoch = epoch;
    DPL_RETURN_IF_ERROR(
        records_.checkpoints->Save(next, *model_, *step_.placement, *step_.optimizer));
  }
  return StopIfPreempted(epoch);
}

// Note [Preemption] in preemption.cpp: the checkpoint of this step (unless it was due anyway), on
// disk before any rank stops.
Status Trainer::StopIfPreempted(int64_t epoch) {
  const int64_t step = progress_.position.global_step;
  DPL_ASSIGN_OR_RETURN(const bool stop, preemption_(step));
  if (!stop) return Status::Ok();
  progress_.preempted = true;
  if (!records_.checkpoints->DueAfter(step)) {
    TrainingPosition here = progress_.position;
    here.epoch = epoch;
    DPL_RETURN_IF_ERROR(
        records_.checkpoints->Save(here, *model_, *step_.placement, *step_.optimizer));
  }
  DPL_RETURN_IF_ERROR(records_.checkpoints->Finish());
  DPL_RETURN_IF_ERROR(collectives_.Barrier("the preemption's checkpoint"));
  const bool parts = records_.checkpoints->WritesParts(*step_.optimizer);
  log::Info(identity_.rank == 0
                ? "preempted: every rank stops after step " + std::to_string(step) +
                      "; its checkpoint is " + records_.checkpoints->PathOf(step, *step_.optimizer)
                : "preempted: stopping after step " + std::to_string(step) + ", whose checkpoint " +
                      (parts ? "every rank wrote its part of" : "rank 0 wrote"));
  return Status::Ok();
}

// The test set, each rank a contiguous share (Note [Evaluation totals]).
Status Trainer::Evaluate() {
  DataSplit& test = *data_.test;
  const dpl_model_info& info = model_->info();
  BatchBuffer& buffer = feed_->buffer(0);
  DPL_RETURN_IF_ERROR(buffer.Allocate(*model_, 0, kEvaluationBatch, info.input, info.target));
  DPL_ASSIGN_OR_RETURN(EvaluationTotals totals,
                       EvaluateSplit(*model_, test, test.count(), buffer, kEvaluationBatch,
                                     collectives_, "test-set"));
  records_.reporter->OnEvaluation(
      {false, info.target.ndim > 0, totals.loss_sum, totals.elements, totals.correct, 0.0});
  return Status::Ok();
}

// --eval-every: after the optimizer step that made the global step (batch `batch` of `epoch`),
// the first --eval-batches global batches of the validation split, through the buffer the step
// has just used; then --export-best and --early-stop-patience. Before the step's checkpoint, so
// that it carries the evaluation.
Status Trainer::ValidateIfDue(int64_t epoch, int64_t batch) {
  const int64_t step = progress_.position.global_step;
  if (config_.eval_every <= 0 || step % config_.eval_every != 0) return Status::Ok();
  DataSplit& validation = *data_.validation;
  const int64_t batches = config_.eval_batches;  // 0: the whole split
  const bool part = batches > 0 && batches <= validation.count() / config_.batch_size;
  const int64_t count = part ? batches * config_.batch_size : validation.count();
  // Every rank evaluates rank 0's buffers.
  DPL_RETURN_IF_ERROR(BroadcastBuffersIfAsked(*model_, *step_.placement, collectives_));
  DPL_ASSIGN_OR_RETURN(
      EvaluationTotals totals,
      EvaluateSplit(*model_, validation, count, feed_->buffer(batch), feed_->local_batch(),
                    collectives_, "validation-step-" + std::to_string(step)));
  DPL_RETURN_IF_ERROR(model_->SetMode(DPL_MODEL_MODE_TRAIN));
  ValidationState& state = records_.validation;
  const bool improved = RecordValidationLoss(totals.MeanLoss(), &state);
  records_.reporter->OnEvaluation({true, model_->info().target.ndim > 0, totals.loss_sum,
                                   totals.elements, totals.correct, state.best_loss, step});
  if (improved) DPL_RETURN_IF_ERROR(ExportBest());
  if (!PatienceRunOut(state, config_.early_stop_patience)) return Status::Ok();
  progress_.stopped_at = PositionAfter(epoch, batch, step);
  if (identity_.rank == 0) {
    log::Info("early stop after step " + std::to_string(step) +
              ": the validation loss has not improved for " +
              std::to_string(state.without_improvement) + " evaluations (--early-stop-patience)");
  }
  return Status::Ok();
}

// --export-best: rank 0 writes the model of the new lowest validation loss.
Status Trainer::ExportBest() {
  if (config_.export_best_file.empty() || identity_.rank != 0) return Status::Ok();
  return ExportModel(*model_, *step_.placement, config_.export_best_file)
      .WithContext("--export-best");
}

TrainingPosition Trainer::PositionAfter(int64_t epoch, int64_t batch, int64_t global_step) const {
  if (batch + 1 == progress_.plan.batches_per_epoch()) return {epoch + 1, 0, global_step};
  return {epoch, batch + 1, global_step};
}

// Where the run ends: where --early-stop-patience stopped it, else the plan's end.
TrainingPosition Trainer::EndPosition() const {
  return progress_.stopped_at ? *progress_.stopped_at : progress_.plan.EndPosition();
}

// --init-from: rank 0 reads the state dict; the initial broadcast takes it to every rank.
Status Trainer::InitFrom() {
  if (config_.init_from.empty() || identity_.rank != 0) return Status::Ok();
  const Status loaded = model_->Has(ModelCapability::kStateFiles)
                            ? model_->LoadState(config_.init_from)
                            : ReadParameterStateDict(config_.init_from, *step_.placement);
  DPL_RETURN_IF_ERROR(loaded.WithContext("--init-from " + config_.init_from));
  log::Info("parameters from " + config_.init_from);
  return Status::Ok();
}

// --export: rank 0 writes the trained model (model_export.hpp).
Status Trainer::Export() const {
  if (config_.export_file.empty() || identity_.rank != 0) return Status::Ok();
  DPL_RETURN_IF_ERROR(
      ExportModel(*model_, *step_.placement, config_.export_file).WithContext("--export"));
  log::Info("the trained model is in " + config_.export_file);
  return Status::Ok();
}

Status Trainer::DumpParameters() const {
  if (config_.dump_parameters_dir.empty()) return Status::Ok();
  DPL_RETURN_IF_ERROR(step_.placement->RefreshHostValues());
  const std::string stem = config_.dump_parameters_dir + "/rank-" + std::to_string(identity_.rank);
  const std::string path = stem + ".bin";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const HostParameter& p : step_.placement->parameters()) {
    out.write(reinterpret_cast<const char*>(p.value), std::streamsize(p.elements * sizeof(float)));
  }
  out.close();
  if (!out) {
    return Status::Io("--dump-parameters: cannot write " + path +
                      "; create the folder first and check its permissions");
  }
  return WriteBufferBytes(*model_, stem + ".buffers.bin").WithContext("--dump-parameters");
}

}  // namespace

Status RunTraining(const TrainingConfig& config, const WorkerIdentity& identity,
                   const ModelPlugin& model_plugin, TrainingData& data, Collectives& collectives,
                   const LocalGroup& local, TrainingHooks hooks) {
  Trainer trainer(config, identity, data, collectives, std::move(hooks));
  return trainer.Run(model_plugin, local);
}

}  // namespace dpl::training
