#include "observability/tracer.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace dpl::observability {
namespace {

constexpr size_t kInitialReserve = size_t(1) << 14;  // ~1000 steps; the vector doubles after

}  // namespace

Tracer& Tracer::Global() {
  static Tracer tracer;
  return tracer;
}

void Tracer::Enable(size_t max_events) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
  events_.reserve(std::min(max_events, kInitialReserve));
  max_events_ = max_events;
  dropped_ = 0;
  next_flow_ = 1;
  last_span_[0] = last_span_[1] = SIZE_MAX;
  first_gradient_ns_.store(0, std::memory_order_relaxed);
  enabled_.store(true, std::memory_order_relaxed);
}

void Tracer::Disable() {
  enabled_.store(false, std::memory_order_relaxed);
}

void Tracer::Record(TraceEvent event) {
  event.step = CurrentStep();
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  // Two laps of one phase back to back (the optimizer, then zeroing the gradients) are one span.
  size_t& last = last_span_[event.track == TraceTrack::kCommunication ? 1 : 0];
  if (event.kind == TraceEvent::Kind::kSpan && last < events_.size()) {
    TraceEvent& previous = events_[last];
    if (std::strcmp(previous.name, event.name) == 0 && previous.end_ns == event.begin_ns &&
        event.bucket < 0) {
      previous.end_ns = event.end_ns;
      return;
    }
  }
  if (event.kind == TraceEvent::Kind::kSpan) last = events_.size();
  events_.push_back(event);
}

void Tracer::Span(TraceTrack track, const char* category, const char* name, Clock::time_point begin,
                  Clock::time_point end) {
  if (!enabled()) return;
  TraceEvent event;
  event.track = track;
  event.category = category;
  event.name = name;
  event.begin_ns = Nanoseconds(begin);
  event.end_ns = Nanoseconds(end);
  Record(event);
}

void Tracer::Compute(Clock::time_point begin, Clock::time_point end) {
  const int64_t first = first_gradient_ns_.exchange(0, std::memory_order_relaxed);
  if (!enabled()) return;
  const int64_t begin_ns = Nanoseconds(begin), end_ns = Nanoseconds(end);
  if (first <= begin_ns || first > end_ns) {
    Span(TraceTrack::kTraining, "compute", "forward+backward", begin, end);
    return;
  }
  const Clock::time_point split{std::chrono::nanoseconds(first)};
  Span(TraceTrack::kTraining, "compute", "forward", begin, split);
  Span(TraceTrack::kTraining, "compute", "backward", split, end);
}

void Tracer::NoteGradientReady(Clock::time_point when) {
  if (!enabled()) return;
  int64_t none = 0;
  first_gradient_ns_.compare_exchange_strong(none, Nanoseconds(when), std::memory_order_relaxed);
}

void Tracer::Collective(const CollectiveActivity& activity, Clock::time_point submitted,
                        Clock::time_point start, Clock::time_point end, bool ok) {
  if (!enabled()) return;
  uint64_t flow = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    flow = next_flow_++;
  }
  TraceEvent event;
  event.category = "communication";
  event.name = activity.collective;
  event.bucket = activity.bucket;
  event.buckets = activity.buckets;
  event.bytes = activity.bytes;
  event.flow = flow;

  TraceEvent submission = event;
  submission.kind = TraceEvent::Kind::kFlowStart;
  submission.track = TraceTrack::kTraining;
  submission.begin_ns = submission.end_ns = Nanoseconds(submitted);
  Record(submission);

  TraceEvent arrival = event;
  arrival.kind = TraceEvent::Kind::kFlowEnd;
  arrival.track = TraceTrack::kCommunication;
  arrival.begin_ns = arrival.end_ns = Nanoseconds(start);
  Record(arrival);

  event.kind = TraceEvent::Kind::kSpan;
  event.track = TraceTrack::kCommunication;
  event.begin_ns = Nanoseconds(start);
  event.end_ns = Nanoseconds(end);
  event.queued_ns = Nanoseconds(start) - Nanoseconds(submitted);
  event.failed = !ok;
  Record(event);
}

std::vector<TraceEvent> Tracer::Events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

uint64_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

}  // namespace dpl::observability
