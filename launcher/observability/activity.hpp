// What a worker is doing, for its trace and its stall reports: the optimizer step under way, and
// the collective a backend call performs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace dpl::observability {

// A call into the backend, as the communication thread runs it.
struct CollectiveActivity {
  const char* collective = "backend call";  // a literal: "allreduce", "broadcast"
  int32_t bucket = -1;                      // the gradient bucket (from 0), or -1
  int32_t buckets = 0;                      // buckets per step
  uint64_t bytes = 0;                       // moved by the call, 0 when unknown
};

// "allreduce of bucket 2 of 4 (1 MiB)" (bucket index 1), "broadcast (1.15 MiB)", "backend call".
std::string DescribeActivity(const CollectiveActivity& activity);

// The optimizer step under way (1 for the first step of a run that started from scratch; 0
// before training). Set by the training loop, read by every thread.
void SetCurrentStep(int64_t step);
int64_t CurrentStep();

}  // namespace dpl::observability
