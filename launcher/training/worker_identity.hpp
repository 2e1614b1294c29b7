// Who a worker process is in the job and what it may use: the worker's placement policy decides
// it (worker/device_policy.hpp), the training loop and the model's creation read it.
#pragma once

#include <cstdint>

#include <dlpack/dlpack.h>

namespace dpl::training {

struct WorkerIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int threads = 1;
  int32_t device_type = kDLCPU;  // where the model computes: kDLCPU or kDLCUDA
  int32_t device_id = 0;
};

}  // namespace dpl::training
