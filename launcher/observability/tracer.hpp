// The timeline of one worker for --trace: spans of the training thread (data, forward, backward,
// communication wait, optimizer, host copies, evaluation, checkpoints) and of the communication
// thread (each collective, with an arrow from the moment it was submitted), recorded in memory
// and written as Chrome / Perfetto trace events at the end (trace_file.hpp).
//
// Note [Trace recording]: the tracer is one object per process (Tracer::Global()), like the log:
// the training loop, the step profile and the communication thread record into it without being
// handed it, and when it is not enabled a record is one relaxed atomic load. An event is a fixed
// struct whose names are string literals, so recording allocates nothing but the vector's growth
// (reserved in steps); a mutex orders the two threads that record. At most max_events are kept,
// the later ones are counted as dropped (the file says how many).
//
// Note [Forward and backward]: a model plugin runs forward, loss and backward in one call
// (train_step), so the boundary is not seen directly. The first gradient-ready callback of a step
// marks it: the span before it is "forward" (forward, loss, and the backward of the last layer up
// to its first gradient), the span after it "backward". Without callbacks (one rank, or gradients
// summed after backward in a host copy) the call is one "forward+backward" span.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "observability/activity.hpp"

namespace dpl::observability {

// The timeline rows of a rank: its training thread (which also calls the model) and its
// communication thread.
enum class TraceTrack : uint8_t { kTraining = 1, kCommunication = 2 };

struct TraceEvent {
  enum class Kind : uint8_t { kSpan, kInstant, kFlowStart, kFlowEnd };
  Kind kind = Kind::kSpan;
  TraceTrack track = TraceTrack::kTraining;
  bool failed = false;        // a collective that returned an error
  const char* name = "";      // a literal
  const char* category = "";  // a literal
  int64_t begin_ns = 0;       // steady clock, this process
  int64_t end_ns = 0;         // spans
  int64_t step = 0;           // CurrentStep() when recorded
  int32_t bucket = -1;        // collectives: the bucket, or -1
  int32_t buckets = 0;        // collectives: buckets per step
  uint64_t bytes = 0;         // collectives
  int64_t queued_ns = 0;      // collectives: from submission to start
  uint64_t flow = 0;          // flows: the arrow's id within this rank
};

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kDefaultMaxEvents = size_t(1) << 20;  // ~80 MB, ~150 MB of JSON

  static Tracer& Global();
  static int64_t Nanoseconds(Clock::time_point time) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
  }

  // Starts recording (forgetting earlier events).
  void Enable(size_t max_events = kDefaultMaxEvents);
  void Disable();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  void Span(TraceTrack track, const char* category, const char* name, Clock::time_point begin,
            Clock::time_point end);
  // The model's train_step from `begin` to `end` (Note [Forward and backward]).
  void Compute(Clock::time_point begin, Clock::time_point end);
  // A gradient became ready; the first one of each train_step splits it.
  void NoteGradientReady(Clock::time_point when);
  // A collective submitted at `submitted` (from the training thread), run on the communication
  // thread from `start` to `end`: a span there and an arrow from the submission to it.
  void Collective(const CollectiveActivity& activity, Clock::time_point submitted,
                  Clock::time_point start, Clock::time_point end, bool ok);

  // What was recorded, in recording order, and how many events did not fit.
  std::vector<TraceEvent> Events() const;
  uint64_t dropped() const;

 private:
  void Record(TraceEvent event);

  std::atomic<bool> enabled_{false};
  std::atomic<int64_t> first_gradient_ns_{0};  // 0: none since the last Compute
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;  // guarded by mutex_
  size_t max_events_ = 0;
  uint64_t dropped_ = 0;
  uint64_t next_flow_ = 1;
  size_t last_span_[2] = {SIZE_MAX, SIZE_MAX};  // per track: the index of its last span
};

// A span of the training thread from construction to destruction (evaluation, a checkpoint).
class TraceScope {
 public:
  TraceScope(const char* category, const char* name)
      : category_(category), name_(name), begin_(Tracer::Clock::now()) {}
  ~TraceScope() {
    Tracer::Global().Span(TraceTrack::kTraining, category_, name_, begin_, Tracer::Clock::now());
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const char* category_;
  const char* name_;
  Tracer::Clock::time_point begin_;
};

}  // namespace dpl::observability
