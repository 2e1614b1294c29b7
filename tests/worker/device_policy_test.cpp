// The device policy (launcher/worker/device_policy.cpp): who a worker is and what it computes on.
#include "worker/device_policy.hpp"

#include <gtest/gtest.h>

namespace dpl::worker {
namespace {

cli::Options Job(int machines, int machine_id, int processes, training::Device device) {
  cli::Options options;
  options.num_machines = machines;
  options.machine_id = machine_id;
  options.num_processes = processes;
  options.threads_per_worker = 3;
  options.training.device = device;
  return options;
}

TEST(DevicePolicy, RanksFollowTheRecipeAndCpuWorkersUseDeviceZero) {
  const auto identity = PlaceWorker(Job(2, 1, 4, training::Device::kCpu), 2, 0);
  EXPECT_EQ(identity.rank, 6);  // machine_id * num_processes + local rank
  EXPECT_EQ(identity.world_size, 8);
  EXPECT_EQ(identity.local_rank, 2);
  EXPECT_EQ(identity.local_world_size, 4);
  EXPECT_EQ(identity.threads, 3);
  EXPECT_EQ(identity.device_type, kDLCPU);
  EXPECT_EQ(identity.device_id, 0);
}

TEST(DevicePolicy, CudaWorkersTakeTheGpuOfTheirLocalRankAndShareWhenThereAreFewer) {
  const cli::Options job = Job(1, 0, 4, training::Device::kCuda);
  EXPECT_EQ(PlaceWorker(job, 3, 4).device_id, 3);
  EXPECT_EQ(PlaceWorker(job, 3, 2).device_id, 1);
  EXPECT_EQ(PlaceWorker(job, 1, 1).device_id, 0);
  EXPECT_EQ(PlaceWorker(job, 3, 1).device_type, kDLCUDA);
  // No GPU at all: the device of the local rank, so that the model says there is none.
  EXPECT_EQ(PlaceWorker(job, 3, 0).device_id, 3);
}

TEST(DevicePolicy, NcclRefusesMoreWorkersThanGpusAndSaysWhatToUse) {
  const auto identity = PlaceWorker(Job(1, 0, 2, training::Device::kCuda), 0, 1);
  const Status refused = CheckBackendFitsDevices("nccl", identity, 1);
  EXPECT_EQ(refused.code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(refused.message(),
            "--backend nccl needs one GPU per worker, but this machine has 2 workers "
            "(--num-processes) and 1 GPU(s); NCCL refuses two ranks on one device. Use "
            "--num-processes 1, or --backend gloo or tcp, which let workers share a GPU");
  EXPECT_TRUE(CheckBackendFitsDevices("gloo", identity, 1).ok());
  EXPECT_TRUE(CheckBackendFitsDevices("nccl", identity, 2).ok());
}

TEST(DevicePolicy, ThreadsDefaultToTheCoresSharedByTheWorkers) {
  cli::Options job = Job(1, 0, 1024, training::Device::kCpu);
  job.threads_per_worker = 0;
  EXPECT_EQ(ThreadsPerWorker(job), 1);  // never below one
  job.threads_per_worker = 5;
  EXPECT_EQ(ThreadsPerWorker(job), 5);
}

}  // namespace
}  // namespace dpl::worker
