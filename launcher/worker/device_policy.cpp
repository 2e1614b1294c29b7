#include "worker/device_policy.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace dpl::worker {

int VisibleCudaDevices() {
  // The driver API's C entry points: cuInit(0) and cuDeviceGetCount(&n), both returning 0 on
  // success. The launcher links no CUDA library, so the driver is asked through dlopen.
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return 0;
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  auto init = reinterpret_cast<Init>(::dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<Count>(::dlsym(driver, "cuDeviceGetCount"));
  int devices = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&devices) != 0) devices = 0;
  ::dlclose(driver);
  return devices;
}

training::WorkerIdentity PlaceWorker(const cli::Options& options, int local_rank,
                                     int cuda_devices) {
  training::WorkerIdentity identity;
  identity.local_rank = local_rank;
  identity.local_world_size = options.num_processes;
  identity.rank = options.machine_id * options.num_processes + local_rank;
  identity.world_size = options.num_machines * options.num_processes;
  identity.threads = cli::ThreadsPerWorker(options);
  if (options.training.device == training::Device::kCuda) {
    identity.device_type = kDLCUDA;
    // With fewer GPUs than workers, the workers take the GPUs in turn; without a GPU the model
    // says so when it is created.
    identity.device_id = cuda_devices > 0 ? local_rank % cuda_devices : local_rank;
  }
  return identity;
}

Status CheckBackendFitsDevices(const std::string& backend, const training::WorkerIdentity& identity,
                               int cuda_devices) {
  if (backend != "nccl" || identity.device_type != kDLCUDA || cuda_devices <= 0 ||
      identity.local_world_size <= cuda_devices) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      "--backend nccl needs one GPU per worker, but this machine has " +
      std::to_string(identity.local_world_size) + " workers (--num-processes) and " +
      std::to_string(cuda_devices) +
      " GPU(s); NCCL refuses two ranks on one device. Use --num-processes " +
      std::to_string(cuda_devices) + ", or --backend gloo or tcp, which let workers share a GPU");
}

void ExportRankVariables(const cli::Options& options, int local_rank) {
  const training::WorkerIdentity identity = PlaceWorker(options, local_rank, 0);
  setenv("RANK", std::to_string(identity.rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(identity.local_rank).c_str(), 1);
  setenv("ROLE_RANK", std::to_string(identity.rank).c_str(), 1);
}

}  // namespace dpl::worker
