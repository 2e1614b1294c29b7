#include "observability/trace_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/output_file.hpp"
#include "observability/json.hpp"

namespace dpl::observability {
namespace {

constexpr int kMicrosecondDecimals = 3;  // nanoseconds

std::string TraceKey(const std::string& prefix, int rank) {
  return prefix + "trace/rank/" + std::to_string(rank);
}

const char* TrackName(TraceTrack track) {
  return track == TraceTrack::kCommunication ? "communication" : "training";
}

std::string Metadata(const char* name, int pid, int tid, const std::string& args) {
  JsonObject event;
  event.Add("name", name).Add("ph", "M").Add("pid", pid);
  if (tid > 0) event.Add("tid", tid);
  return event.AddRaw("args", args).str();
}

std::string CollectiveName(const TraceEvent& e) {
  std::string name = e.name;
  if (e.bucket >= 0) {
    name += " bucket " + std::to_string(e.bucket + 1);
    if (e.buckets > 0) name += "/" + std::to_string(e.buckets);
  }
  return name;
}

// The process's name: "rank 3 (machine 1, local rank 1, pid 42)", with its clock's offset from
// machine 0's and the events the recorder had no room for, when there are any.
std::string ProcessLabel(const TraceRank& who, const rendezvous::ClockAlignment& clock,
                         uint64_t dropped) {
  std::string label = "rank " + std::to_string(who.rank) + " (machine " +
                      std::to_string(who.machine) + ", local rank " +
                      std::to_string(who.local_rank) + ", pid " + std::to_string(who.pid) + ")";
  if (clock.offset_ns != 0) {
    char offset[64];
    std::snprintf(offset, sizeof offset, ", clock %+.3f ms from machine 0's",
                  double(clock.offset_ns) / 1e6);
    label += offset;
  }
  if (dropped > 0) label += ", " + std::to_string(dropped) + " events not recorded (limit)";
  return label;
}

// The "M" events naming the rank's process and its two thread tracks, and ordering them.
std::vector<std::string> MetadataEvents(const TraceRank& who, const std::string& label) {
  std::vector<std::string> lines = {
      Metadata("process_name", who.rank, 0, JsonObject().Add("name", label).str()),
      Metadata("process_sort_index", who.rank, 0, JsonObject().Add("sort_index", who.rank).str())};
  for (TraceTrack track : {TraceTrack::kTraining, TraceTrack::kCommunication}) {
    const int tid = int(track);
    lines.push_back(
        Metadata("thread_name", who.rank, tid, JsonObject().Add("name", TrackName(track)).str()));
    lines.push_back(
        Metadata("thread_sort_index", who.rank, tid, JsonObject().Add("sort_index", tid).str()));
  }
  return lines;
}

// A span ("X") with its args.
JsonObject SpanEvent(const TraceEvent& e, int pid, double ts_us) {
  JsonObject args;
  args.Add("step", e.step);
  if (e.bucket >= 0) args.Add("bucket", e.bucket + 1).Add("buckets", e.buckets);
  if (e.bytes > 0) args.Add("bytes", int64_t(e.bytes));
  if (e.track == TraceTrack::kCommunication) {
    args.Add("queued_us", double(e.queued_ns) / 1000.0, kMicrosecondDecimals);
  }
  if (e.failed) args.Add("failed", int64_t(1));
  JsonObject event;
  event.Add("name", e.bucket >= 0 ? CollectiveName(e) : std::string(e.name))
      .Add("cat", e.category)
      .Add("ph", "X")
      .Add("pid", pid)
      .Add("tid", int(e.track))
      .Add("ts", ts_us, kMicrosecondDecimals)
      .Add("dur", double(e.end_ns - e.begin_ns) / 1000.0, kMicrosecondDecimals)
      .AddRaw("args", args.str());
  return event;
}

// One event as a trace-event object; flow ids are unique per rank (`flow_base`).
std::string EventObject(const TraceEvent& e, int pid, double ts_us, uint64_t flow_base) {
  JsonObject event;
  switch (e.kind) {
    case TraceEvent::Kind::kSpan:
      event = SpanEvent(e, pid, ts_us);
      break;
    case TraceEvent::Kind::kFlowStart:
    case TraceEvent::Kind::kFlowEnd: {
      const bool start = e.kind == TraceEvent::Kind::kFlowStart;
      event.Add("name", "submitted").Add("cat", "bucket").Add("ph", start ? "s" : "f");
      if (!start) event.Add("bp", "e");
      event.Add("id", int64_t(flow_base + e.flow))
          .Add("pid", pid)
          .Add("tid", int(e.track))
          .Add("ts", ts_us, kMicrosecondDecimals);
      break;
    }
    case TraceEvent::Kind::kInstant:
      event.Add("name", e.name)
          .Add("cat", e.category)
          .Add("ph", "i")
          .Add("s", "t")
          .Add("pid", pid)
          .Add("tid", int(e.track))
          .Add("ts", ts_us, kMicrosecondDecimals);
      break;
  }
  return event.str();
}

}  // namespace

std::string RankTraceEvents(const std::vector<TraceEvent>& events, const TraceRank& who,
                            const rendezvous::ClockAlignment& clock, uint64_t dropped) {
  const auto micros = [&](int64_t local_ns) {
    return double(local_ns - clock.offset_ns - clock.origin_ns) / 1000.0;
  };
  std::vector<std::string> lines = MetadataEvents(who, ProcessLabel(who, clock, dropped));
  const uint64_t flow_base = uint64_t(who.rank) << 32;
  for (const TraceEvent& e : events) {
    lines.push_back(EventObject(e, who.rank, micros(e.begin_ns), flow_base));
  }
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : ",\n") + line;
  return text;
}

std::string TraceDocument(const std::vector<std::string>& parts) {
  std::string text = "{\"traceEvents\": [\n";
  bool first = true;
  for (const std::string& part : parts) {
    if (part.empty()) continue;
    text += (first ? "" : ",\n") + part;
    first = false;
  }
  JsonObject other;
  other.Add("producer", "dpl launcher --trace")
      .Add("ranks", int64_t(parts.size()))
      .Add("clock",
           "microseconds since the job's clocks were aligned through the rendezvous store");
  text += "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": " + other.str() + "}\n";
  return text;
}

Status PublishTrace(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                    const TraceRank& who, const rendezvous::ClockAlignment& clock) {
  const Tracer& tracer = Tracer::Global();
  const std::string part = RankTraceEvents(tracer.Events(), who, clock, tracer.dropped());
  return rendezvous::PutChunked(client, TraceKey(attempt_prefix, who.rank), part)
      .WithContext("sending rank " + std::to_string(who.rank) + "'s trace to the launcher");
}

Result<uint64_t> CollectTrace(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                              int world_size, const std::string& named_path,
                              std::chrono::milliseconds timeout) {
  std::vector<std::string> parts;
  for (int rank = 0; rank < world_size; ++rank) {
    auto part = rendezvous::TakeChunked(client, TraceKey(attempt_prefix, rank), timeout);
    if (!part.ok()) {
      return part.status().WithContext("--trace: collecting rank " + std::to_string(rank) +
                                       "'s trace");
    }
    parts.push_back(std::move(*part));
  }
  const std::string document = TraceDocument(parts);
  // Note [Files a flag names]: the file a symbolic link names, never a device or a pipe.
  const Result<std::string> resolved = OutputFileOf(named_path);
  if (!resolved.ok()) return resolved.status().WithContext("--trace");
  const std::string& path = *resolved;
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << document;
    out.close();
    if (!out) {
      return Status::Io("--trace: cannot write " + temporary + ": " + std::strerror(errno));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    return Status::Io("--trace: cannot rename " + temporary + " to " + path + ": " + reason);
  }
  return uint64_t(document.size());
}

Status CheckTracePath(const std::string& named_path) {
  const Result<std::string> resolved = OutputFileOf(named_path);
  if (!resolved.ok()) return resolved.status().WithContext("--trace");
  const std::string& path = *resolved;
  const bool existed = std::ifstream(path).good();
  std::ofstream probe(path, std::ios::app);
  if (!probe) {
    return Status::Io("--trace: cannot write " + path + " (" + std::strerror(errno) +
                      "); give a file in a folder that exists and is writable");
  }
  probe.close();
  if (!existed) std::remove(path.c_str());  // the file appears when the trace is complete
  return Status::Ok();
}

}  // namespace dpl::observability
