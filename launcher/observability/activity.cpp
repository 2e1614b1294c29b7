#include "observability/activity.hpp"

#include "common/log.hpp"

namespace dpl::observability {
namespace {

std::atomic<int64_t> g_current_step{0};

}  // namespace

std::string DescribeActivity(const CollectiveActivity& activity) {
  std::string text = activity.collective;
  if (activity.bucket >= 0) {
    text += " of bucket " + std::to_string(activity.bucket + 1);  // counted from 1 for people
    if (activity.buckets > 0) text += " of " + std::to_string(activity.buckets);
  }
  if (activity.bytes > 0) text += " (" + log::Bytes(activity.bytes) + ")";
  return text;
}

void SetCurrentStep(int64_t step) {
  g_current_step.store(step, std::memory_order_relaxed);
}

int64_t CurrentStep() {
  return g_current_step.load(std::memory_order_relaxed);
}

}  // namespace dpl::observability
