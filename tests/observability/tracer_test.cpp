// The trace recorder and the trace-event JSON it becomes (Note [Trace recording], Note [Forward
// and backward]); the document is checked by Python's json module.
#include "observability/tracer.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "observability/trace_file.hpp"

namespace dpl::observability {
namespace {

using Clock = Tracer::Clock;
using std::chrono::microseconds;

Clock::time_point At(int64_t us) {
  return Clock::time_point(microseconds(us));
}

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tracer::Global().Enable();
    SetCurrentStep(0);
  }
  void TearDown() override { Tracer::Global().Disable(); }
};

TEST_F(TracerTest, NothingIsRecordedWhenDisabled) {
  Tracer& tracer = Tracer::Global();
  tracer.Disable();
  tracer.Span(TraceTrack::kTraining, "data", "data", At(0), At(1));
  tracer.Compute(At(1), At(2));
  tracer.Collective({"allreduce", 0, 1, 4}, At(1), At(2), At(3), true);
  EXPECT_TRUE(tracer.Events().empty());
}

TEST_F(TracerTest, TheFirstGradientSplitsForwardFromBackward) {
  Tracer& tracer = Tracer::Global();
  SetCurrentStep(7);
  tracer.NoteGradientReady(At(130));
  tracer.NoteGradientReady(At(150));  // only the first counts
  tracer.Compute(At(100), At(200));
  tracer.Compute(At(300), At(400));   // no callback this time
  tracer.NoteGradientReady(At(450));  // outside the call: not a split
  tracer.Compute(At(500), At(600));
  const std::vector<TraceEvent> events = tracer.Events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_STREQ(events[0].name, "forward");
  EXPECT_EQ(events[0].begin_ns, 100000);
  EXPECT_EQ(events[0].end_ns, 130000);
  EXPECT_STREQ(events[1].name, "backward");
  EXPECT_EQ(events[1].begin_ns, 130000);
  EXPECT_EQ(events[1].end_ns, 200000);
  EXPECT_EQ(events[1].step, 7);
  EXPECT_STREQ(events[2].name, "forward+backward");
  EXPECT_STREQ(events[3].name, "forward+backward");
}

TEST_F(TracerTest, LapsOfOnePhaseBackToBackAreOneSpan) {
  Tracer& tracer = Tracer::Global();
  tracer.Span(TraceTrack::kTraining, "optimizer", "optimizer", At(10), At(20));
  tracer.Collective({"allreduce", 0, 1, 4}, At(12), At(13), At(14), true);  // other track
  tracer.Span(TraceTrack::kTraining, "optimizer", "optimizer", At(20), At(25));
  tracer.Span(TraceTrack::kTraining, "data", "data", At(25), At(30));
  tracer.Span(TraceTrack::kTraining, "optimizer", "optimizer", At(31), At(32));  // a gap
  std::vector<std::string> training;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.track == TraceTrack::kTraining && e.kind == TraceEvent::Kind::kSpan) {
      training.push_back(std::string(e.name) + " " + std::to_string(e.begin_ns / 1000) + "-" +
                         std::to_string(e.end_ns / 1000));
    }
  }
  EXPECT_EQ(training,
            (std::vector<std::string>{"optimizer 10-25", "data 25-30", "optimizer 31-32"}));
}

TEST_F(TracerTest, ACollectiveIsASpanWithAnArrowFromItsSubmission) {
  Tracer& tracer = Tracer::Global();
  SetCurrentStep(3);
  tracer.Collective({"allreduce", 1, 2, 4096}, At(100), At(140), At(190), false);
  const std::vector<TraceEvent> events = tracer.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, TraceEvent::Kind::kFlowStart);
  EXPECT_EQ(events[0].track, TraceTrack::kTraining);
  EXPECT_EQ(events[0].begin_ns, 100000);
  EXPECT_EQ(events[1].kind, TraceEvent::Kind::kFlowEnd);
  EXPECT_EQ(events[1].track, TraceTrack::kCommunication);
  EXPECT_EQ(events[1].begin_ns, 140000);
  EXPECT_EQ(events[0].flow, events[1].flow);
  const TraceEvent& span = events[2];
  EXPECT_EQ(span.kind, TraceEvent::Kind::kSpan);
  EXPECT_EQ(span.track, TraceTrack::kCommunication);
  EXPECT_EQ(span.queued_ns, 40000);
  EXPECT_EQ(span.end_ns - span.begin_ns, 50000);
  EXPECT_EQ(span.bucket, 1);
  EXPECT_EQ(span.bytes, 4096u);
  EXPECT_EQ(span.step, 3);
  EXPECT_TRUE(span.failed);
}

TEST_F(TracerTest, EventsBeyondTheLimitAreCounted) {
  Tracer& tracer = Tracer::Global();
  tracer.Enable(3);
  for (int i = 0; i < 5; ++i)
    tracer.Span(TraceTrack::kTraining, "data", "data", At(2 * i), At(2 * i + 1));
  EXPECT_EQ(tracer.Events().size(), 3u);
  EXPECT_EQ(tracer.dropped(), 2u);
}

// The ranks' parts on the aligned timeline: microseconds since the origin, in the reference clock.
TEST_F(TracerTest, RankPartsAreTraceEventsOnTheAlignedTimeline) {
  Tracer& tracer = Tracer::Global();
  SetCurrentStep(1);
  tracer.Span(TraceTrack::kTraining, "data", "data", At(1000), At(1002));
  const rendezvous::ClockAlignment clock{250000, 500000};  // 250 us ahead, zero at 500 us
  const std::string part = RankTraceEvents(tracer.Events(), {1, 1, 0, 4321}, clock, 0);
  EXPECT_NE(part.find(R"({"name": "data", "cat": "data", "ph": "X", "pid": 1, "tid": 1, )"
                      R"("ts": 250, "dur": 2, "args": {"step": 1}})"),
            std::string::npos)
      << part;
  EXPECT_NE(
      part.find(R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": )"
                R"json("rank 1 (machine 1, local rank 0, pid 4321), clock +0.250 ms from )json"
                R"json(machine 0's"}})json"),
      std::string::npos)
      << part;
  EXPECT_NE(part.find(R"({"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": )"
                      R"({"name": "communication"}})"),
            std::string::npos)
      << part;
}

TEST_F(TracerTest, TheDocumentIsJsonThatPythonReads) {
  Tracer& tracer = Tracer::Global();
  std::vector<std::string> parts;
  for (int rank = 0; rank < 2; ++rank) {
    tracer.Enable();
    tracer.Compute(At(0), At(10));
    tracer.Collective({"allreduce", 0, 1, 8}, At(5), At(6), At(9), true);
    parts.push_back(RankTraceEvents(tracer.Events(), {rank, 0, rank, 100 + rank}, {}, 7));
  }
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/trace-document.json";
  std::ofstream(path) << TraceDocument(parts);
  const std::string command =
      "python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); "
      "print(len(d['traceEvents']), sorted({e['pid'] for e in d['traceEvents']}), "
      "d['displayTimeUnit'], [e['args']['name'] for e in d['traceEvents'] "
      "if e['name'] == 'process_name'][1])\" " +
      path;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[512] = {};
  const size_t n = std::fread(buffer, 1, sizeof buffer - 1, pipe);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << std::string(buffer, n);
  // Per rank: 2 process and 4 thread metadata events, a span, and the collective's three.
  EXPECT_EQ(std::string(buffer, n),
            "20 [0, 1] ms rank 1 (machine 0, local rank 1, pid 101), 7 events not recorded "
            "(limit)\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dpl::observability
