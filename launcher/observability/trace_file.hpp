// The --trace file: every rank's events (tracer.hpp) in the JSON trace-event format that
// chrome://tracing and https://ui.perfetto.dev open, one process per rank ("rank N"), one thread
// track per worker thread ("training", "communication"), times in microseconds on one timeline
// whose zero is the moment the job's clocks were aligned (Note [Aligning clocks through the
// store] in rendezvous/job_reports.hpp).
//
// Each rank sends its part through the store when it has trained (PublishTrace); the launcher of
// machine 0 collects the parts once every machine is done and writes the file (CollectTrace), so
// ranks on machines that share no file system end up in one file too.
//
// Events: "X" spans with args {"step"} (collectives also "bucket", "buckets" counted from 1,
// "bytes", "queued_us": from submission to start), "s"/"f" flow arrows from a collective's
// submission on the training track to its span on the communication track, and "M" metadata
// naming the processes and threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "observability/tracer.hpp"
#include "rendezvous/job_reports.hpp"
#include "rendezvous/store.hpp"

namespace dpl::observability {

struct TraceRank {
  int rank = 0;
  int machine = 0;
  int local_rank = 0;
  int pid = 0;
};

// One rank's events as trace-event objects, one a line, joined by ",\n" (no brackets around).
std::string RankTraceEvents(const std::vector<TraceEvent>& events, const TraceRank& who,
                            const rendezvous::ClockAlignment& clock, uint64_t dropped);

// The whole file from the ranks' parts.
std::string TraceDocument(const std::vector<std::string>& parts);

// Sends this process's recorded events (Tracer::Global()) to the store for the launcher.
Status PublishTrace(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                    const TraceRank& who, const rendezvous::ClockAlignment& clock);

// Collects the parts of `world_size` ranks (each waited for up to `timeout`) and writes `path`
// (through a temporary file, renamed). Returns the bytes written.
Result<uint64_t> CollectTrace(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                              int world_size, const std::string& path,
                              std::chrono::milliseconds timeout);

// Whether `path` can be written (tried at the launcher's start, so a typo fails at once).
Status CheckTracePath(const std::string& path);

}  // namespace dpl::observability
