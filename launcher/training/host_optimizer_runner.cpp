// The optimizer in host memory (optimizer.hpp) on the runs of an update share (update_share.hpp).
#include <algorithm>
#include <map>

#include "common/log.hpp"
#include "training/gradient_clipping.hpp"
#include "training/optimizer_runner.hpp"

namespace dpl::training {
namespace {

// Pieces a thread sums at least.
constexpr size_t kPiecesPerThread = 16;

std::vector<FloatSpan> GradientsOf(const std::vector<HostRun>& runs) {
  std::vector<FloatSpan> gradients;
  gradients.reserve(runs.size());
  for (const HostRun& run : runs) gradients.push_back({run.gradient, run.run.elements});
  return gradients;
}

// The scaled runs' piece sums of squares into `sums` at their places (Note [Pieces]); the others
// stay.
void SumPieces(const UpdateShare& share, ThreadPool* pool, std::vector<double>* sums) {
  const std::vector<HostRun>& runs = share.scaled();
  std::vector<size_t> first;  // of each run's pieces among the runs', and their total last
  size_t total = 0;
  for (const HostRun& run : runs) {
    first.push_back(total);
    total += PiecesOf(run.run.elements);
  }
  auto sum = [&](size_t begin, size_t end) {
    for (size_t r = 0; r < runs.size(); ++r) {
      const ParameterRun& run = runs[r].run;
      const size_t home = share.first_piece()[run.parameter] + run.offset / kPieceElements;
      for (size_t k = 0; k < PiecesOf(run.elements); ++k) {
        if (first[r] + k < begin || first[r] + k >= end) continue;
        const size_t from = k * kPieceElements;
        PieceSumsOfSquares(runs[r].gradient + from, std::min(kPieceElements, run.elements - from),
                           sums->data() + home + k);
      }
    }
  };
  if (pool == nullptr) return sum(0, total);
  pool->ParallelFor(total, kPiecesPerThread, sum);
}

class HostRunner final : public OptimizerRunner {
 public:
  HostRunner(const TrainingConfig& config, StepRules rules, std::unique_ptr<Optimizer> optimizer,
             UpdateShare& share, ThreadPool* pool, std::unique_ptr<PartCopy> copy,
             std::unique_ptr<PartSnapshot> snapshot)
      : OptimizerRunner(config, std::move(rules)),
        optimizer_(std::move(optimizer)),
        share_(share),
        pool_(pool),
        copy_(std::move(copy)),
        snapshot_(std::move(snapshot)) {
    UseRate(rules_.learning_rate());
    optimizer_->set_threads(pool);
    for (const HostRun& run : share_.updated()) {
      values_.push_back(run.value);
      gradients_.push_back(run.gradient);
    }
  }

  Result<StepDecision> Step(int64_t global_step, float factor) override;
  int64_t optimizer_steps() const override { return optimizer_->steps(); }
  void set_optimizer_steps(int64_t steps) override {
    optimizer_->set_steps(steps);
    if (copy_) copy_->optimizer().set_steps(steps);
  }
  Status WholeState(const std::vector<size_t>& sizes, bool whole, OptimizerState* state) override;
  Status RestoreState(const OptimizerState& state) override;
  bool sharded() const override { return share_.sharded(); }
  std::vector<ShardRun> Shard() const override;
  int part() const override { return share_.part(); }
  std::optional<KeptParts> KeepParts(int64_t committed_step) override;

 private:
  void UseRate(double learning_rate) override {
    optimizer_->set_learning_rate(learning_rate);
    if (copy_) copy_->optimizer().set_learning_rate(learning_rate);
  }
  // The update of this rank's part and of its copy of another's (Note [A copy of each part]).
  Status Update(int64_t global_step);
  // Unscales the scaled runs' gradients (fp16) and shares the step's global quantities with the
  // ranks that share the parts; true when a gradient of any rank is inf or NaN. Fills
  // `piece_sums` when clipping.
  Result<bool> CheckGradients(std::vector<double>* piece_sums);
  Status Clip(const std::vector<double>& piece_sums);

  std::unique_ptr<Optimizer> optimizer_;
  UpdateShare& share_;
  ThreadPool* pool_;
  std::vector<float*> values_;  // of the updated runs, as Optimizer::Step takes them
  std::vector<const float*> gradients_;
  std::unique_ptr<PartCopy> copy_;          // NULL: no copy of another rank's part
  std::unique_ptr<PartSnapshot> snapshot_;  // NULL: nothing kept for a regroup in place
};

Result<bool> HostRunner::CheckGradients(std::vector<double>* piece_sums) {
  // Note [Same skip decision on every rank]: unshared, every rank checks the same gradients.
  const std::optional<LossScaler>& scaler = rules_.scaler();
  const bool non_finite = scaler && scaler->Unscale(GradientsOf(share_.scaled()));
  if (clip_grad_norm_ > 0.0) {
    piece_sums->assign(share_.pieces(), 0.0);
    SumPieces(share_, pool_, piece_sums);
  }
  if (!scaler && clip_grad_norm_ <= 0.0) return non_finite;
  // Each part's overflow flag, then the piece sums, added up over the ranks that share the parts.
  const size_t parts = size_t(share_.parts());
  std::vector<double> entries(parts, 0.0);
  entries[size_t(share_.part())] = non_finite ? 1.0 : 0.0;
  entries.insert(entries.end(), piece_sums->begin(), piece_sums->end());
  DPL_RETURN_IF_ERROR(share_.ShareEntries(&entries));
  std::copy(entries.begin() + std::ptrdiff_t(parts), entries.end(), piece_sums->begin());
  bool any = false;
  for (size_t part = 0; part < parts; ++part) any = any || entries[part] != 0.0;
  return any;
}

Status HostRunner::Clip(const std::vector<double>& piece_sums) {
  const float coefficient =
      ClipCoefficient(NormOfPieces(piece_sums, share_.first_piece()), clip_grad_norm_);
  if (coefficient == 1.0f) return Status::Ok();  // changes no bit (ClipGradNorm)
  for (const HostRun& run : share_.scaled()) {
    float* __restrict values = run.gradient;
    for (size_t i = 0; i < run.run.elements; ++i) values[i] *= coefficient;
  }
  return share_.AfterClip();
}

// The placement applied the gradients' factor already (its TakeGradients).
Result<StepDecision> HostRunner::Step(int64_t global_step, float /*factor*/) {
  if (copy_) copy_->CatchUp();
  if (snapshot_) snapshot_->BeganStep(global_step, optimizer_->steps(), rules_.loss_scaling());
  DPL_RETURN_IF_ERROR(FollowSchedule(global_step));
  std::vector<double> piece_sums;
  DPL_ASSIGN_OR_RETURN(const bool non_finite, CheckGradients(&piece_sums));
  const StepDecision decision = rules_.Decide(non_finite, global_step);
  if (decision == StepDecision::kApply) {
    if (clip_grad_norm_ > 0.0) DPL_RETURN_IF_ERROR(Clip(piece_sums));
    DPL_RETURN_IF_ERROR(Update(global_step));
  }
  rules_.Advance();
  return decision;
}

Status HostRunner::Update(int64_t global_step) {
  if (copy_) DPL_RETURN_IF_ERROR(copy_->ExchangeGradients(share_, global_step));
  if (snapshot_) snapshot_->Take(global_step, share_.updated(), *optimizer_);
  optimizer_->Step(values_, gradients_);
  return Status::Ok();
}

std::optional<KeptParts> HostRunner::KeepParts(int64_t committed_step) {
  const ShardLayout* layout = share_.own_part_layout();
  if (!snapshot_ || layout == nullptr) return std::nullopt;
  KeptParts kept = snapshot_->Keep(*layout, committed_step, share_.updated(), *optimizer_,
                                   share_.part(), optimizer_->steps(), rules_.loss_scaling());
  if (copy_) kept.held.push_back(copy_->Keep(committed_step));
  return kept;
}

Status HostRunner::WholeState(const std::vector<size_t>& sizes, bool whole, OptimizerState* state) {
  std::vector<std::vector<float>*> buffers = optimizer_->StateBuffers();
  const std::vector<HostRun>& runs = share_.updated();
  const size_t names = optimizer_->StateNames().size();
  state->assign(whole ? names : 0, {});
  for (auto& parameters : *state) {
    for (size_t n : sizes) parameters.emplace_back(n, 0.0f);
  }
  for (size_t k = 0; k < state->size(); ++k) {
    for (size_t r = 0; r < runs.size(); ++r) {
      const ParameterRun& run = runs[r].run;
      std::copy(buffers[k * runs.size() + r]->begin(), buffers[k * runs.size() + r]->end(),
                (*state)[k][run.parameter].begin() + std::ptrdiff_t(run.offset));
    }
  }
  std::map<std::pair<uint32_t, size_t>, size_t> run_at;
  for (size_t r = 0; r < runs.size(); ++r) run_at[{runs[r].run.parameter, runs[r].run.offset}] = r;
  auto source = [&](size_t k, const ParameterRun& run) -> const float* {
    return buffers[k * runs.size() + run_at.at({run.parameter, run.offset})]->data();
  };
  auto destination = [&](size_t k, const ParameterRun& run) -> float* {
    return whole ? (*state)[k][run.parameter].data() + run.offset : nullptr;
  };
  return share_.GatherState(names, source, destination);
}

Status HostRunner::RestoreState(const OptimizerState& state) {
  TakeRuns(state, share_.updated(), *optimizer_);
  if (copy_) copy_->Restore(state);
  return Status::Ok();
}

std::vector<ShardRun> HostRunner::Shard() const {
  if (!share_.sharded()) return {};
  const std::vector<std::vector<float>*> buffers = optimizer_->StateBuffers();
  const std::vector<HostRun>& runs = share_.updated();
  std::vector<ShardRun> shard;
  for (size_t r = 0; r < runs.size(); ++r) {
    ShardRun run{runs[r].run, {}};
    // An optimizer without state (sgd without momentum) has no buffers.
    for (size_t k = 0; (k + 1) * runs.size() <= buffers.size(); ++k) {
      run.state.push_back(buffers[k * runs.size() + r]);
    }
    shard.push_back(std::move(run));
  }
  return shard;
}

// Rank 0 says how much of the optimizer's state it keeps (Note [Sharded optimizer]).
void LogStateShare(const UpdateShare& share, Optimizer& optimizer) {
  size_t owned = 0, bytes = 0;
  for (const HostRun& run : share.updated()) owned += run.run.elements;
  for (const std::vector<float>* buffer : optimizer.StateBuffers()) {
    bytes += buffer->size() * sizeof(float);
  }
  log::Info("the optimizer's state on rank 0: " + std::to_string(owned) + " parameters' worth, " +
            log::Bytes(uint64_t(bytes)) + " (its part)");
}

// Note [A copy of each part]: the copy of part `keeping.copied_part` (-1: none), where the state
// is sharded.
Result<std::unique_ptr<PartCopy>> CopyOfPart(const TrainingConfig& config,
                                             const std::vector<HostParameter>& parameters,
                                             const UpdateShare& share, const PartKeeping& keeping,
                                             const std::vector<OptimizedTensor>& tensors,
                                             int rank) {
  const int part = keeping.copied_part;
  const ShardLayout* layout = share.own_part_layout();
  if (part < 0 || layout == nullptr) return std::unique_ptr<PartCopy>();
  std::vector<OptimizedTensor> runs;
  for (const ParameterRun& run : layout->PartOfEveryBucket(part)) {
    runs.push_back({run.elements, tensors[run.parameter].decayed});
  }
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                       CreateOptimizer(config.optimizer, std::move(runs)));
  if (rank == 0) {
    log::Info(
        "each rank also keeps a copy of the optimizer's state of the part of the rank one "
        "machine on, so a lost machine loses none of it (--shard-copy off: none)");
  }
  return std::make_unique<PartCopy>(parameters, *layout, part, keeping.copy_holder,
                                    std::move(optimizer));
}

}  // namespace

Result<std::unique_ptr<OptimizerRunner>> HostOptimizerRunner(
    const TrainingConfig& config, const std::vector<HostParameter>& parameters, UpdateShare& share,
    const StepPlan& plan, int rank, ThreadPool* pool, PartKeeping keeping) {
  const std::vector<OptimizedTensor> tensors = OptimizedTensors(config, parameters, rank);
  std::vector<OptimizedTensor> runs;
  for (const HostRun& run : share.updated()) {
    runs.push_back({run.run.elements, tensors[run.run.parameter].decayed});
  }
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                       CreateOptimizer(config.optimizer, std::move(runs)));
  if (share.sharded() && rank == 0) LogStateShare(share, *optimizer);
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<PartCopy> copy,
                       CopyOfPart(config, parameters, share, keeping, tensors, rank));
  if (copy) copy->optimizer().set_threads(pool);
  std::unique_ptr<PartSnapshot> snapshot;
  if (share.sharded() && (keeping.snapshot || copy)) snapshot = std::make_unique<PartSnapshot>();
  DPL_ASSIGN_OR_RETURN(StepRules rules, StepRules::Create(config, plan, rank));
  return std::unique_ptr<OptimizerRunner>(new HostRunner(config, std::move(rules),
                                                         std::move(optimizer), share, pool,
                                                         std::move(copy), std::move(snapshot)));
}

}  // namespace dpl::training
