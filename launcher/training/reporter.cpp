#include "training/reporter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/log.hpp"
#include "observability/activity.hpp"
#include "observability/json.hpp"
#include "protocol/progress_record.hpp"

namespace dpl::training {
namespace {

using observability::JsonObject;

// The bar needs no more: its records are cheap, but a fast model makes thousands of steps a second.
constexpr std::chrono::milliseconds kProgressInterval{100};

double SecondsBetween(Reporter::Clock::time_point from, Reporter::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

Reporter::Reporter(const TrainingConfig& config, int rank) : config_(config), rank_(rank) {
  run_.last_logged.time = run_.start;
}

Result<std::unique_ptr<Reporter>> Reporter::Create(const TrainingConfig& config, int rank) {
  std::unique_ptr<Reporter> reporter(new Reporter(config, rank));
  if (!reporter->rank0()) return reporter;
  if (!config.metrics_file.empty()) {
    reporter->metrics_ = std::make_unique<std::ofstream>(
        config.metrics_file, config.resume ? std::ios::app : std::ios::trunc);
    if (!*reporter->metrics_) {
      return Status::Io("--metrics: cannot write " + config.metrics_file);
    }
  }
  if (!config.tensorboard_dir.empty()) {
    auto writer = observability::TensorBoardWriter::Open(config.tensorboard_dir, "");
    if (!writer.ok()) return writer.status().WithContext("--tensorboard");
    reporter->tensorboard_ = std::move(*writer);
  }
  return reporter;
}

double Reporter::SecondsSinceStart() const {
  return SecondsBetween(run_.start, Clock::now());
}

void Reporter::OnRunStart(const StepPlan& plan) {
  plan_ = plan;
  run_.steps = plan.start().global_step;
  epoch_.number = plan.start().epoch - 1;
  run_.start = Clock::now();
  run_.last_logged = Snapshot{};
  run_.last_logged.time = run_.start;
  run_.last_logged.steps = run_.steps;
  observability::SetCurrentStep(run_.steps);
  SendProgress(run_.steps, 0.0f, false);
}

void Reporter::StartEpoch() {
  epoch_.start = Clock::now();
  ++epoch_.number;
  epoch_.samples_seen = 0;
  epoch_.loss_sum = 0.0;
  epoch_.loss_batches = 0;
  epoch_.batches = plan_.EndBatch(epoch_.number);
}

void Reporter::StartBatch(int64_t global_step) {
  observability::SetCurrentStep(global_step);
}

void Reporter::OnBatch(const BatchReport& report, const StepProfile& profile) {
  run_.samples += report.epoch_samples - epoch_.samples_seen;
  epoch_.samples_seen = report.epoch_samples;
  epoch_.loss_sum += double(report.loss);
  ++epoch_.loss_batches;
  const bool stepped = report.global_step != run_.steps;
  run_.steps = report.global_step;
  if (!rank0()) return;
  if (!std::isfinite(report.loss) && !run_.said_not_finite) {
    run_.said_not_finite = true;  // once: every later step of a diverged run is the same
    log::Warning("the training loss is " +
                 std::string(std::isnan(report.loss) ? "NaN" : "infinite") + " at step " +
                 std::to_string(report.global_step) +
                 ": the training diverged (a lower --lr helps) or the data holds NaN or "
                 "infinite values; the run goes on");
  }
  run_.step_loss_sum += double(report.loss);
  ++run_.step_loss_batches;
  if (config_.grad_accum <= 1) {
    if (config_.log_interval > 0 && report.batch % config_.log_interval == 0) {
      LogBatch(report, profile);
    }
  } else if (stepped) {
    // With --grad-accum a line is an optimizer step's: the batch that ends the step whose
    // micro-batches hold every N-th batch, with the mean loss of those micro-batches and the
    // step's rate (not one line per micro-batch, with the next step's rate on some).
    BatchReport step = report;
    step.loss = float(run_.step_loss_sum / double(run_.step_loss_batches));
    if (config_.log_interval > 0 && report.batch % config_.log_interval < config_.grad_accum) {
      LogBatch(step, profile);
    }
  }
  if (stepped) {
    run_.step_loss_sum = 0.0;
    run_.step_loss_batches = 0;
  }
  const Clock::time_point now = Clock::now();
  if (stepped &&
      (now - run_.last_progress >= kProgressInterval || run_.steps == plan_.TotalSteps())) {
    SendProgress(run_.steps, report.loss, false);
  }
}

void Reporter::LogBatch(const BatchReport& report, const StepProfile& profile) {
  // Until OnRunStart, or past the planned end, the plain count of batches.
  const int64_t batches = epoch_.batches >= report.batch ? epoch_.batches : report.batches;
  char line[160];
  std::snprintf(line, sizeof line, "epoch: %lld [%lld/%lld] training loss: %.6f",
                static_cast<long long>(report.epoch), static_cast<long long>(report.batch),
                static_cast<long long>(batches), double(report.loss));
  log::Info(line);

  Snapshot now;
  now.time = Clock::now();
  now.samples = run_.samples;
  now.steps = profile.steps();
  for (int phase = 0; phase < kStepPhaseCount; ++phase) {
    now.phase_seconds[phase] = profile.seconds(static_cast<StepPhase>(phase));
  }
  const double interval = SecondsBetween(run_.last_logged.time, now.time);
  const double rate =
      interval > 0 ? double(now.samples - run_.last_logged.samples) / interval : 0.0;
  const int64_t steps = std::max<int64_t>(1, now.steps - run_.last_logged.steps);
  double phase_ms[kStepPhaseCount];
  JsonObject phases;
  for (int phase = 0; phase < kStepPhaseCount; ++phase) {
    phase_ms[phase] =
        (now.phase_seconds[phase] - run_.last_logged.phase_seconds[phase]) * 1000.0 / double(steps);
    phases.Add(StepProfile::PhaseName(static_cast<StepPhase>(phase)), phase_ms[phase], 3);
  }
  run_.last_logged = now;
  WriteMetrics(JsonObject()
                   .Add("kind", "step")
                   .Add("epoch", report.epoch)
                   .Add("step", report.global_step)
                   .Add("batch", report.batch)
                   .Add("loss", double(report.loss), 6)
                   .Add("lr", report.learning_rate, 9)
                   .Add("samples_per_s", rate, 1)
                   .Add("time_s", SecondsSinceStart(), 3)
                   .AddRaw("phase_ms", phases.str())
                   .str());
  AddScalar("train/loss", report.global_step, report.loss);
  AddScalar("train/lr", report.global_step, report.learning_rate);
  AddScalar("train/samples_per_s", report.global_step, rate);
  for (int phase = 0; phase < kStepPhaseCount; ++phase) {
    AddScalar(
        std::string("train/phase_ms/") + StepProfile::PhaseName(static_cast<StepPhase>(phase)),
        report.global_step, phase_ms[phase]);
  }
  FlushScalars();
}

void Reporter::SendProgress(int64_t step, float loss, bool done) {
  if (!rank0() || !config_.progress) return;
  protocol::ProgressRecord record;
  record.step = step;
  record.total = done ? step : std::max(plan_.TotalSteps(), step);
  record.start_step = plan_.start().global_step;
  record.epoch = std::max<int64_t>(0, epoch_.number);
  record.epochs = config_.epochs;
  record.seconds = SecondsSinceStart();
  record.samples_per_s = record.seconds > 0 ? double(run_.samples) / record.seconds : 0.0;
  record.loss = loss;
  record.done = done;
  log::WriteRecord(protocol::EncodeProgress(record));
  run_.last_progress = Clock::now();
}

std::vector<double> Reporter::EpochLossTotals() const {
  return {epoch_.loss_sum, double(epoch_.loss_batches)};
}

void Reporter::OnEpochEnd(int64_t epoch, int64_t samples, const std::vector<double>& loss_totals) {
  if (!rank0()) return;
  const double seconds = SecondsBetween(epoch_.start, Clock::now());
  const double rate = seconds > 0 ? double(samples) / seconds : 0.0;
  const int64_t batch_losses = std::llround(loss_totals.at(1));
  const double loss = batch_losses > 0 ? loss_totals.at(0) / double(batch_losses) : std::nan("");
  const int64_t ranks = epoch_.loss_batches > 0 ? batch_losses / epoch_.loss_batches : 0;
  char line[240];
  std::snprintf(
      line, sizeof line,
      "epoch %lld done in %.2f s, %.1f samples/s, mean loss %.6f over %lld batches x %lld "
      "ranks",
      static_cast<long long>(epoch), seconds, rate, loss,
      static_cast<long long>(epoch_.loss_batches), static_cast<long long>(ranks));
  log::Info(line);
  WriteMetrics(JsonObject()
                   .Add("kind", "epoch")
                   .Add("epoch", epoch)
                   .Add("step", run_.steps)
                   .Add("loss", loss, 6)
                   .Add("loss_batches", batch_losses)
                   .Add("seconds", seconds, 3)
                   .Add("samples", samples)
                   .Add("samples_per_s", rate, 1)
                   .Add("time_s", SecondsSinceStart(), 3)
                   .str());
  AddScalar("train/epoch_loss", run_.steps, loss);
  AddScalar("train/epoch_samples_per_s", run_.steps, rate);
  FlushScalars();
}

void Reporter::OnTrainingEnd(int64_t steps, int64_t samples, float loss,
                             const StepProfile& profile) {
  SendProgress(steps, loss, true);
  if (!rank0()) return;
  const double total = SecondsSinceStart();
  if (samples == 0) {  // resumed at its end: there is no loss of this run to report
    const bool past = config_.max_steps > 0 && steps > config_.max_steps;
    log::Info("training done: nothing was left to train (the run resumed at step " +
              std::to_string(steps) +
              (past ? ", past --max-steps " + std::to_string(config_.max_steps) +
                          "; give a larger --max-steps to train on)"
                    : ", its end)"));
    return;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "training done: %lld steps, %.2f s, %.1f samples/s, final loss %.6f",
                static_cast<long long>(steps), total, total > 0 ? double(samples) / total : 0.0,
                double(loss));
  log::Info(line);
  log::Info(profile.Describe());
}

void Reporter::SayWhereRecordsAre() const {
  if (!rank0()) return;
  if (metrics_) log::Info("the metrics are in " + config_.metrics_file);
  if (tensorboard_) log::Info("TensorBoard's events are in " + config_.tensorboard_dir);
}

void Reporter::OnEvaluation(const EvaluationReport& report) {
  if (!rank0()) return;
  const double count = report.elements;
  const double loss = count > 0 ? report.loss_sum / count : 0.0;
  const double accuracy = count > 0 ? report.correct / count : 0.0;
  const double perplexity = std::exp(loss);
  const int64_t step = report.step >= 0 ? report.step : run_.steps;
  const std::string what =
      report.validation ? "validation at step " + std::to_string(step) : std::string("test set");
  char line[320];
  if (report.per_position) {
    std::snprintf(line, sizeof line,
                  "%s: loss per token: %.4f, perplexity: %.3f, accuracy: %.0f/%.0f tokens "
                  "(%.2f%%)",
                  what.c_str(), loss, perplexity, report.correct, count, 100.0 * accuracy);
  } else {
    std::snprintf(line, sizeof line, "%s: average loss: %.4f, accuracy: %.0f/%.0f (%.2f%%)",
                  what.c_str(), loss, report.correct, count, 100.0 * accuracy);
  }
  log::Info(line);
  JsonObject json;
  json.Add("kind", report.validation ? "validation" : "eval")
      .Add("epoch", std::max<int64_t>(0, epoch_.number))
      .Add("step", step)
      .Add("loss", loss, 6)
      .Add("accuracy", accuracy, 6)
      .Add("correct", int64_t(std::llround(report.correct)))
      .Add("count", int64_t(std::llround(count)));
  if (report.per_position) {
    json.Add("perplexity", perplexity, 6).Add("tokens", int64_t(std::llround(count)));
  }
  if (report.validation) json.Add("best_loss", report.best_loss, 6);
  WriteMetrics(json.Add("time_s", SecondsSinceStart(), 3).str());
  const std::string group = report.validation ? "validation/" : "eval/";
  AddScalar(group + "loss", step, loss);
  AddScalar(group + "accuracy", step, accuracy);
  if (report.per_position) AddScalar(group + "perplexity", step, perplexity);
  FlushScalars();
}

void Reporter::OnStraggler(int64_t step, const StragglerEvent& event) {
  if (!rank0()) return;
  const std::string line = DescribeStraggler(event, config_.stragglers.factor);
  if (event.straggling) {
    log::Warning(line);
  } else {
    log::Info(line);
  }
  const double slowdown = event.seconds / std::max(event.median_seconds, 1e-9);
  WriteMetrics(JsonObject()
                   .Add("kind", "straggler")
                   .Add("step", step)
                   .Add("rank", int64_t(event.rank))
                   .Add("machine", int64_t(event.machine))
                   .Add("host", event.host)
                   .AddRaw("straggling", event.straggling ? "true" : "false")
                   .Add("compute_ms", event.seconds * 1e3, 3)
                   .Add("median_ms", event.median_seconds * 1e3, 3)
                   .Add("slowdown", slowdown, 3)
                   .Add("first_step", event.first_step)
                   .Add("last_step", event.last_step)
                   .Add("time_s", SecondsSinceStart(), 3)
                   .str());
  AddScalar("stragglers/rank_" + std::to_string(event.rank), step, slowdown);
  FlushScalars();
}

void Reporter::WriteMetrics(const std::string& json_line) {
  if (!metrics_) return;
  *metrics_ << json_line << '\n' << std::flush;
  if (!*metrics_) {
    log::Warning("--metrics: writing " + config_.metrics_file +
                 " failed (a full disk?); no more metrics are written there");
    metrics_.reset();
  }
}

void Reporter::AddScalar(const std::string& tag, int64_t step, double value) {
  if (!tensorboard_) return;
  const Status added = tensorboard_->AddScalar(tag, step, value, observability::WallTimeNow());
  if (!added.ok()) {
    log::Warning("--tensorboard: " + added.message() + "; no more scalars are written there");
    tensorboard_.reset();
  }
}

void Reporter::FlushScalars() {
  if (!tensorboard_) return;
  const Status flushed = tensorboard_->Flush();
  if (!flushed.ok()) {
    log::Warning("--tensorboard: " + flushed.message() + "; no more scalars are written there");
    tensorboard_.reset();
  }
}

}  // namespace dpl::training
