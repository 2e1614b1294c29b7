#include "training/gradient_sync.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "training/collectives/backend_collectives.hpp"

namespace dpl::training {
namespace {

std::vector<std::vector<uint32_t>> Indices(const std::vector<Bucket>& buckets) {
  std::vector<std::vector<uint32_t>> out;
  for (const Bucket& b : buckets) out.push_back(b.parameter_indices);
  return out;
}

TEST(Buckets, ReverseOrderClosedOnceTheCapIsReached) {
  // Elements of 4 bytes: 100 B, 40 B, 60 B, 200 B, 8 B with a 100-byte cap.
  const std::vector<size_t> elements = {25, 10, 15, 50, 2};
  const std::vector<Bucket> buckets = AssignBuckets(elements, 100);
  EXPECT_EQ(Indices(buckets), (std::vector<std::vector<uint32_t>>{{4, 3}, {2, 1}, {0}}));
  EXPECT_EQ(buckets[1].elements, 25u);
}

TEST(Buckets, ConvNetWithTheDefaultCapGetsASmallFirstBucket) {
  // The recipe's ConvNet: cn1 (w, b), cn2 (w, b), fc1 (w, b), fc2 (w, b). The fc layers' gradients
  // come first in backward and pass the 1 MiB first-bucket cap, so they are sent while the
  // convolutions' backward still runs; the rest fits the 25 MiB cap.
  const std::vector<Bucket> buckets =
      AssignBuckets({144, 16, 4608, 32, 294912, 64, 640, 10}, 25LL * 1024 * 1024);
  EXPECT_EQ(Indices(buckets), (std::vector<std::vector<uint32_t>>{{7, 6, 5, 4}, {3, 2, 1, 0}}));
}

TEST(Buckets, FirstBucketCapNeverExceedsTheGivenCap) {
  EXPECT_EQ(Indices(AssignBuckets({10, 10, 10}, 40)),
            (std::vector<std::vector<uint32_t>>{{2}, {1}, {0}}));
}

TEST(Buckets, EmptyAndOversized) {
  EXPECT_TRUE(AssignBuckets({}, 100).empty());
  EXPECT_EQ(Indices(AssignBuckets({1000, 1000}, 4)),
            (std::vector<std::vector<uint32_t>>{{1}, {0}}));
}

TEST(CommunicationThread, RunsTasksInOrder) {
  CommunicationThread thread;
  std::vector<int> order;
  std::vector<std::future<Status>> done;
  for (int i = 0; i < 50; ++i) {
    done.push_back(thread.Submit([&order, i] {
      order.push_back(i);
      return i == 7 ? Status::Error("task 7") : Status::Ok();
    }));
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(done[i].get().ok(), i != 7);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

// A backend that records every allreduce and, for host memory, doubles the data (the sum of two
// ranks holding the same values). It never touches device memory, whose pointers here are fake.
struct RecordedCall {
  uintptr_t address;
  int64_t elements;
  int32_t device_type;
};
std::vector<RecordedCall>& Calls() {
  static std::vector<RecordedCall> calls;
  return calls;
}
dpl_status RecordingAllreduce(dpl_backend*, DLTensor* tensor, dpl_reduce_op op, void* stream) {
  EXPECT_EQ(op, DPL_REDUCE_SUM);
  EXPECT_EQ(stream, nullptr);
  EXPECT_EQ(tensor->ndim, 1);
  const uintptr_t address = reinterpret_cast<uintptr_t>(tensor->data) + tensor->byte_offset;
  Calls().push_back({address, tensor->shape[0], tensor->device.device_type});
  if (tensor->device.device_type == kDLCPU) {
    float* data = reinterpret_cast<float*>(address);
    for (int64_t i = 0; i < tensor->shape[0]; ++i) data[i] *= 2.0f;
  }
  return DPL_OK;
}
const char* NoError() {
  return "";
}

// A backend whose allreduce doubles host memory and records every call; a fresh one per use.
Backend* RecordingBackend() {
  static std::unique_ptr<Backend> backend;
  auto table = std::make_shared<plugin_host::BackendInterface>();
  table->allreduce = RecordingAllreduce;
  table->last_error = NoError;
  // Its collectives are complete when they return (as a backend without kSynchronize).
  table->synchronize = [](dpl_backend*, void*) { return DPL_OK; };
  backend =
      std::make_unique<Backend>(table, nullptr, PluginLabel{"backend", "recording", ""}, kDLCPU);
  Calls().clear();
  return backend.get();
}

// Gradients of `sizes` floats, at `addresses` (host pointers or fake device addresses).
struct Gradients {
  std::vector<int64_t> shapes;
  std::vector<DLTensor> tensors;
  Gradients(const std::vector<size_t>& sizes, const std::vector<uintptr_t>& addresses,
            int32_t device_type)
      : shapes(sizes.begin(), sizes.end()) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      DLTensor t{};
      t.data = reinterpret_cast<void*>(addresses[i]);
      t.device = DLDevice{DLDeviceType(device_type), 0};
      t.ndim = 1;
      t.dtype = DLDataType{kDLFloat, 32, 1};
      t.shape = &shapes[i];
      tensors.push_back(t);
    }
  }
};

// A synchronizer over the front's allreduce of whole buckets through `backend`.
struct Synchronized {
  GradientScaling scaling;
  std::unique_ptr<GradientReduction> reduction;
  std::unique_ptr<GradientSynchronizer> sync;
};
Synchronized Synchronize(Backend* backend, CommunicationThread& thread,
                         const std::vector<DLTensor>& gradients, std::vector<Bucket> buckets,
                         GradientScaling scaling) {
  ReductionPlan plan;
  plan.gradients = gradients;
  plan.buckets = buckets;
  plan.scaling = scaling;
  Synchronized synchronized{scaling, AllreduceBuckets(*backend, thread, plan), nullptr};
  synchronized.sync = std::make_unique<GradientSynchronizer>(*synchronized.reduction,
                                                             std::move(buckets), gradients.size());
  return synchronized;
}

std::vector<float> RunStep(Synchronized& synchronized, float scale, std::vector<float>* memory) {
  synchronized.sync->BeginStep(scale);
  EXPECT_TRUE(synchronized.sync->FinishStep().ok());
  return memory ? *memory : std::vector<float>();
}

// Note [Buckets in place]: neighbouring gradients are one collective on their memory, scaled there.
TEST(GradientSynchronizer, BackToBackHostGradientsAreReducedInPlaceOncePerBucket) {
  std::vector<float> memory(10);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = float(i);
  const uintptr_t base = reinterpret_cast<uintptr_t>(memory.data());
  Gradients g({4, 2, 4}, {base, base + 16, base + 24}, kDLCPU);
  CommunicationThread thread;
  // A 24-byte cap: buckets {2, 1} (24 B) then {0}.
  Synchronized sync = Synchronize(RecordingBackend(), thread, g.tensors,
                                  AssignBuckets({4, 2, 4}, 24), GradientScaling::kInBucket);
  const std::vector<float> after = RunStep(sync, 0.25f, &memory);
  ASSERT_EQ(Calls().size(), 2u);
  EXPECT_EQ(Calls()[0].address, base + 16);  // parameters 1 and 2, from parameter 1's start
  EXPECT_EQ(Calls()[0].elements, 6);
  EXPECT_EQ(Calls()[1].address, base);
  EXPECT_EQ(Calls()[1].elements, 4);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i], float(i) * 2.0f * 0.25f) << i;
}

TEST(GradientSynchronizer, ScatteredHostGradientsAreStagedAndWrittenBack) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5};  // two separate allocations
  Gradients g({3, 2},
              {reinterpret_cast<uintptr_t>(a.data()), reinterpret_cast<uintptr_t>(b.data())},
              kDLCPU);
  CommunicationThread thread;
  Synchronized sync = Synchronize(RecordingBackend(), thread, g.tensors,
                                  AssignBuckets({3, 2}, 1024), GradientScaling::kInBucket);
  RunStep(sync, 0.5f, nullptr);
  ASSERT_EQ(Calls().size(), 1u);
  EXPECT_EQ(Calls()[0].elements, 5);
  EXPECT_NE(Calls()[0].address, reinterpret_cast<uintptr_t>(a.data()));
  EXPECT_NE(Calls()[0].address, reinterpret_cast<uintptr_t>(b.data()));
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));  // x 2 x 0.5
  EXPECT_EQ(b, (std::vector<float>{4, 5}));
}

// Device memory is never touched by the host (the fake addresses would crash it): one collective
// per bucket when back to back, else one per gradient, all on the device and unscaled.
TEST(GradientSynchronizer, DeviceGradientsGetCollectivesOnTheDeviceOnly) {
  const uintptr_t base = 0x1000;
  Gradients together({4, 2}, {base, base + 16}, kDLCUDA);
  CommunicationThread thread;
  Synchronized in_place = Synchronize(RecordingBackend(), thread, together.tensors,
                                      AssignBuckets({4, 2}, 1024), GradientScaling::kByCaller);
  RunStep(in_place, 0.5f, nullptr);
  ASSERT_EQ(Calls().size(), 1u);
  EXPECT_EQ(Calls()[0].address, base);
  EXPECT_EQ(Calls()[0].elements, 6);
  EXPECT_EQ(Calls()[0].device_type, kDLCUDA);

  Gradients apart({4, 2}, {base, base + 4096}, kDLCUDA);
  Synchronized one_each = Synchronize(RecordingBackend(), thread, apart.tensors,
                                      AssignBuckets({4, 2}, 1024), GradientScaling::kByCaller);
  EXPECT_EQ(one_each.scaling, GradientScaling::kByCaller);
  RunStep(one_each, 0.5f, nullptr);
  ASSERT_EQ(Calls().size(), 2u);
  EXPECT_EQ(Calls()[0].address, base + 4096);  // reverse order: the last parameter first
  EXPECT_EQ(Calls()[0].elements, 2);
  EXPECT_EQ(Calls()[1].address, base);
  EXPECT_EQ(Calls()[1].elements, 4);
}

TEST(GradientSynchronizer, ByCallerLeavesTheHostSumUnscaled) {
  std::vector<float> memory = {1, 2, 3};
  Gradients g({3}, {reinterpret_cast<uintptr_t>(memory.data())}, kDLCPU);
  CommunicationThread thread;
  Synchronized sync = Synchronize(RecordingBackend(), thread, g.tensors, AssignBuckets({3}, 1024),
                                  GradientScaling::kByCaller);
  EXPECT_EQ(RunStep(sync, 0.5f, &memory), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace dpl::training
