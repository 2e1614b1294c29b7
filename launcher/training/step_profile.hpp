// Where a step's time goes, summed over the run: the numbers performance work starts from. With
// --trace each phase is also a span of the rank's timeline (observability/tracer.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "observability/tracer.hpp"

namespace dpl::training {

enum class StepPhase {
  kData,               // gathering and normalising the batch
  kCompute,            // the model's train_step: forward, loss, backward (communication of
                       // ready buckets overlaps it on the communication thread)
  kCommunicationWait,  // waiting after backward for the last buckets' allreduce
  kOptimizer,          // scaling, the optimizer step and zeroing the gradients
  kCopies,             // host copy <-> model (Note [Host copy of the parameters])
};
inline constexpr int kStepPhaseCount = 5;

class StepProfile {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts timing the next phase from now.
  void Restart() { mark_ = Clock::now(); }
  // Adds the time since the last Lap (or Restart) to `phase`.
  void Lap(StepPhase phase) {
    const Clock::time_point now = Clock::now();
    seconds_[static_cast<int>(phase)] += std::chrono::duration<double>(now - mark_).count();
    Trace(phase, now);
    mark_ = now;
  }
  void CountStep() { ++steps_; }
  int64_t steps() const { return steps_; }
  double seconds(StepPhase phase) const { return seconds_[static_cast<int>(phase)]; }

  // The phase's name in the trace and in the metrics file.
  static const char* PhaseName(StepPhase phase) {
    static const char* const kNames[] = {"data", "forward_backward", "communication_wait",
                                         "optimizer", "host_copies"};
    return kNames[static_cast<int>(phase)];
  }

  std::string Describe() const {
    const double per_step_ms = steps_ > 0 ? 1000.0 / double(steps_) : 0.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "time per step: data %.2f ms, forward+backward %.2f ms, communication wait "
                  "%.2f ms, optimizer %.2f ms",
                  seconds(StepPhase::kData) * per_step_ms,
                  seconds(StepPhase::kCompute) * per_step_ms,
                  seconds(StepPhase::kCommunicationWait) * per_step_ms,
                  seconds(StepPhase::kOptimizer) * per_step_ms);
    std::string text = line;
    if (seconds(StepPhase::kCopies) > 0) {
      std::snprintf(line, sizeof line, ", host copies %.2f ms",
                    seconds(StepPhase::kCopies) * per_step_ms);
      text += line;
    }
    return text;
  }

 private:
  void Trace(StepPhase phase, Clock::time_point now) const {
    observability::Tracer& tracer = observability::Tracer::Global();
    if (!tracer.enabled()) return;
    static const char* const kSpans[] = {"data", "forward+backward", "communication wait",
                                         "optimizer", "host copies"};
    static const char* const kCategories[] = {"data", "compute", "wait", "optimizer", "copy"};
    if (phase == StepPhase::kCompute) {
      tracer.Compute(mark_, now);  // split into forward and backward where it can be
    } else {
      const int i = static_cast<int>(phase);
      tracer.Span(observability::TraceTrack::kTraining, kCategories[i], kSpans[i], mark_, now);
    }
  }

  Clock::time_point mark_ = Clock::now();
  double seconds_[kStepPhaseCount] = {};
  int64_t steps_ = 0;
};

}  // namespace dpl::training
