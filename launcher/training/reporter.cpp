#include "training/reporter.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/log.hpp"

namespace dpl::training {
namespace {

double SecondsSince(Reporter::Clock::time_point start) {
  return std::chrono::duration<double>(Reporter::Clock::now() - start).count();
}

}  // namespace

Reporter::Reporter(const TrainingConfig& config, int rank) : config_(config), rank_(rank) {
  show_progress_ = rank0() && config.progress && ::isatty(STDERR_FILENO);
}

Result<std::unique_ptr<Reporter>> Reporter::Create(const TrainingConfig& config, int rank) {
  std::unique_ptr<Reporter> reporter(new Reporter(config, rank));
  if (reporter->rank0() && !config.metrics_file.empty()) {
    reporter->metrics_ = std::make_unique<std::ofstream>(
        config.metrics_file, config.resume ? std::ios::app : std::ios::trunc);
    if (!*reporter->metrics_) {
      return Status::Io("--metrics: cannot write " + config.metrics_file);
    }
  }
  return reporter;
}

void Reporter::StartEpoch() {
  epoch_start_ = Clock::now();
}

void Reporter::OnBatch(const BatchReport& report) {
  const double elapsed = SecondsSince(epoch_start_);
  const double rate = elapsed > 0 ? double(report.epoch_samples) / elapsed : 0.0;
  if (rank0() && config_.log_interval > 0 && report.batch % config_.log_interval == 0) {
    char line[160];
    std::snprintf(line, sizeof line, "epoch: %lld [%lld/%lld] training loss: %.6f",
                  static_cast<long long>(report.epoch), static_cast<long long>(report.batch),
                  static_cast<long long>(report.batches), double(report.loss));
    if (show_progress_) std::fputs("\r\033[K", stderr);
    log::Info(line);
    if (metrics_) {
      char json[256];
      std::snprintf(json, sizeof json,
                    "{\"epoch\": %lld, \"step\": %lld, \"loss\": %.6f, \"samples_per_s\": "
                    "%.1f, \"time_s\": %.3f}\n",
                    static_cast<long long>(report.epoch),
                    static_cast<long long>(report.global_step), double(report.loss), rate,
                    SecondsSince(job_start_));
      *metrics_ << json << std::flush;
    }
  }
  if (show_progress_) Progress(report, rate);
}

void Reporter::Progress(const BatchReport& report, double samples_per_s) {
  const int width = 30;
  const int filled = int(width * report.batch / std::max<int64_t>(report.batches, 1));
  const double eta_s =
      samples_per_s > 0 ? double(report.batches - report.batch) * config_.batch_size / samples_per_s
                        : 0.0;
  std::fprintf(stderr, "\r\033[Kepoch %lld [%.*s%*s] %lld/%lld %.0f samples/s ETA %.0fs",
               static_cast<long long>(report.epoch), filled,
               "==============================", width - filled, "",
               static_cast<long long>(report.batch), static_cast<long long>(report.batches),
               samples_per_s, eta_s);
  if (report.batch == report.batches) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void Reporter::OnEpochEnd(int64_t epoch, int64_t samples, float loss) {
  if (!rank0()) return;
  const double seconds = SecondsSince(epoch_start_);
  char line[200];
  std::snprintf(line, sizeof line, "epoch %lld done in %.2f s, %.1f samples/s, loss %.6f",
                static_cast<long long>(epoch), seconds,
                seconds > 0 ? double(samples) / seconds : 0.0, double(loss));
  log::Info(line);
}

void Reporter::OnTrainingEnd(int64_t steps, int64_t samples, float loss,
                             const StepProfile& profile) {
  if (!rank0()) return;
  const double total = SecondsSince(job_start_);
  char line[200];
  std::snprintf(line, sizeof line,
                "training done: %lld steps, %.2f s, %.1f samples/s, final loss %.6f",
                static_cast<long long>(steps), total, total > 0 ? double(samples) / total : 0.0,
                double(loss));
  log::Info(line);
  log::Info(profile.Describe());
}

void Reporter::OnEvaluation(double loss_sum, double correct, double count) {
  if (!rank0()) return;
  char line[256];
  std::snprintf(line, sizeof line, "test set: average loss: %.4f, accuracy: %.0f/%.0f (%.2f%%)",
                count > 0 ? loss_sum / count : 0.0, correct, count,
                count > 0 ? 100.0 * correct / count : 0.0);
  log::Info(line);
}

}  // namespace dpl::training
