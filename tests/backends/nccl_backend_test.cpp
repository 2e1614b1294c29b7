// The nccl backend plugin itself, loaded as the host loads it, in rank processes. Without a GPU
// only its refusal is checked; on a machine with one (tools/gpu_check.sh), every collective on
// real CUDA tensors at world size 1: NCCL refuses two ranks on one device ("Duplicate GPU
// detected"), so one GPU checks one rank. The ordering, watchdog and abort logic behind it is
// checked without a GPU, with fakes, by nccl_engine_test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#ifdef DPL_TEST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "conformance_values.hpp"
#include "dpl/support/reduce.hpp"
#include "rank_processes.hpp"

namespace {

using dpl::testing::RankContext;
using dpl::testing::RankReport;
using dpl::testing::run_ranks;
using dpl::testing::values::expected_value;
using dpl::testing::values::input_value;
using dpl::testing::values::kDtypes;
using dpl::testing::values::kOps;
using dpl::testing::values::load_value;
using dpl::testing::values::plugin_built;
using dpl::testing::values::store_value;
using dpl::testing::values::tolerance;

TEST(NcclBackend, WithoutAGpuCreateSaysWhyAndWhatToUse) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  dpl::testing::RunOptions options;
  options.device_type = kDLCUDA;
  const auto reports = run_ranks(
      "nccl", 1, [](const RankContext&, RankReport*) { return true; }, options);
  if (reports[0].status == DPL_OK) GTEST_SKIP() << "a GPU is present; see NcclBackend.OnGpu*";
  EXPECT_EQ(reports[0].status, DPL_ERR_NO_DEVICE);
  EXPECT_EQ(std::string(reports[0].message),
            "nccl: NCCL needs a CUDA device and this machine has none; train on the CPU with "
            "--device cpu (and --backend gloo where you named nccl)");
}

#ifdef DPL_TEST_HAVE_CUDA
// --- On a machine with a GPU (tools/gpu_check.sh runs these).

// A CUDA allocation freed at scope exit; data is NULL when cudaMalloc failed.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&data, std::max<size_t>(bytes, 1)) != cudaSuccess) data = nullptr;
  }
  ~DeviceBuffer() {
    if (data != nullptr) cudaFree(data);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data = nullptr;
};

// The first failure of a rank body on the GPU goes into its report; later checks are skipped.
class GpuChecks {
 public:
  GpuChecks(const RankContext& ctx, RankReport* report) : ctx_(ctx), report_(report) {}
  bool ok() const { return report_->status == DPL_OK; }
  bool Dpl(dpl_status status, const std::string& what) {
    if (!ok() || status == DPL_OK) return ok();
    return Fail(status, what + ": " + ctx_.plugin->last_error());
  }
  bool Cuda(cudaError_t error, const std::string& what) {
    if (!ok() || error == cudaSuccess) return ok();
    return Fail(DPL_ERR_INTERNAL, what + ": " + cudaGetErrorString(error));
  }
  bool Allocated(const DeviceBuffer& buffer, const std::string& what) {
    if (!ok() || buffer.data != nullptr) return ok();
    return Fail(DPL_ERR_INTERNAL, "cudaMalloc failed for " + what);
  }
  bool Expect(bool condition, const std::string& what) {
    if (!ok() || condition) return ok();
    return Fail(DPL_ERR_INTERNAL, what);
  }
  // The plugin's synchronize (backend ABI v2 and later), looked up in the rank process that loaded
  // it.
  bool Synchronize(void* stream, const std::string& what) {
    std::string error;
    const auto* table =
        dpl::testing::load_backend(dpl::testing::plugin_path("nccl", DPL_TEST_PLUGIN_DIR), &error);
    if (table == nullptr) return Fail(DPL_ERR_NOT_FOUND, error);
    return Dpl(table->synchronize(ctx_.backend, stream), "synchronize after " + what);
  }

 private:
  bool Fail(dpl_status status, const std::string& message) {
    report_->status = status;
    dpl::testing::set_message(report_, message);
    return false;
  }
  const RankContext& ctx_;
  RankReport* report_;
};

// Runs `body` in one rank process with the nccl backend on CUDA device 0.
RankReport RunOnGpu(const std::function<void(const RankContext&, GpuChecks&)>& body) {
  dpl::testing::RunOptions options;
  options.device_type = kDLCUDA;
  const auto reports = run_ranks(
      "nccl", 1,
      [&](const RankContext& ctx, RankReport* report) {
        GpuChecks checks(ctx, report);
        body(ctx, checks);
        return true;
      },
      options);
  return reports[0];
}

#define DPL_SKIP_WITHOUT_NCCL_GPU(report) \
  if ((report).status == DPL_ERR_NO_DEVICE) GTEST_SKIP() << "no GPU: " << (report).message

TEST(NcclBackend, OnGpuEveryDtypeAndOpAtWorldSizeOne) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    for (const auto& dtype : kDtypes) {
      for (const auto op : kOps) {
        for (const size_t count : {size_t{1}, size_t{7}, size_t{1u << 20}}) {
          const std::string what = std::string(dtype.name) + "/" + dpl::support::ReduceOpName(op) +
                                   " count " + std::to_string(count);
          const size_t bytes = count * dpl::support::ElementSize(dtype.dtype);
          std::vector<char> host(bytes);
          for (size_t i = 0; i < count; ++i)
            store_value(dtype.type, host.data(), i, input_value(0, i));
          DeviceBuffer device(bytes);
          if (!check.Allocated(device, what)) return;
          check.Cuda(cudaMemcpy(device.data, host.data(), bytes, cudaMemcpyHostToDevice), what);
          int64_t shape = static_cast<int64_t>(count);
          DLTensor tensor{device.data, {kDLCUDA, 0}, 1, dtype.dtype, &shape, nullptr, 0};
          check.Dpl(ctx.plugin->allreduce(ctx.backend, &tensor, op, nullptr), what);
          check.Synchronize(nullptr, what);
          check.Cuda(cudaMemcpy(host.data(), device.data, bytes, cudaMemcpyDeviceToHost), what);
          for (size_t i = 0; i < count && check.ok(); ++i) {
            const double expected = expected_value(dtype.type, op, 1, i);
            const double actual = load_value(dtype.type, host.data(), i);
            check.Expect(std::fabs(actual - expected) <= tolerance(dtype.type, expected),
                         what + ": element " + std::to_string(i) + " is " + std::to_string(actual) +
                             ", expected " + std::to_string(expected));
          }
          if (!check.ok()) return;
        }
      }
    }
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

TEST(NcclBackend, OnGpuBroadcastAllgatherAndBarrier) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    for (const size_t count : {size_t{0}, size_t{1}, size_t{777}, size_t{1u << 20}}) {
      const std::string what = "count " + std::to_string(count);
      std::vector<int64_t> input(count), output(count);
      for (size_t i = 0; i < count; ++i) input[i] = static_cast<int64_t>(i * 31 + 5);
      const size_t bytes = count * sizeof(int64_t);
      DeviceBuffer in(bytes), out(bytes);
      if (!check.Allocated(in, what) || !check.Allocated(out, what)) return;
      check.Cuda(cudaMemcpy(in.data, input.data(), bytes, cudaMemcpyHostToDevice), what);
      check.Cuda(cudaMemset(out.data, 0xFF, std::max<size_t>(bytes, 1)), what);
      int64_t shape = static_cast<int64_t>(count);
      DLTensor in_tensor{in.data, {kDLCUDA, 0}, 1, {kDLInt, 64, 1}, &shape, nullptr, 0};
      DLTensor out_tensor{out.data, {kDLCUDA, 0}, 1, {kDLInt, 64, 1}, &shape, nullptr, 0};
      check.Dpl(ctx.plugin->broadcast(ctx.backend, &in_tensor, 0, nullptr), "broadcast " + what);
      check.Dpl(ctx.plugin->allgather(ctx.backend, &in_tensor, &out_tensor, nullptr),
                "allgather " + what);
      check.Dpl(ctx.plugin->barrier(ctx.backend), "barrier " + what);
      check.Synchronize(nullptr, what);
      std::vector<int64_t> broadcast(count);
      check.Cuda(cudaMemcpy(output.data(), out.data, bytes, cudaMemcpyDeviceToHost), what);
      check.Cuda(cudaMemcpy(broadcast.data(), in.data, bytes, cudaMemcpyDeviceToHost), what);
      check.Expect(broadcast == input, "broadcast from rank 0 changed the root's tensor, " + what);
      check.Expect(output == input, "allgather's output is not the input, " + what);
      if (!check.ok()) return;
    }
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

// Backend ABI v3 at world size 1: reduce_scatter of every dtype and op, in place (the output is
// the rank's slice of the input) and apart, and allgather in place (tools/gpu_check.sh's own
// step).
TEST(NcclBackend, OnGpuReduceScatterAndInPlaceAllgather) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    for (const auto& dtype : kDtypes) {
      for (const auto op : kOps) {
        for (const bool in_place : {true, false}) {
          const size_t count = 1001, bytes = count * dpl::support::ElementSize(dtype.dtype);
          const std::string what = std::string(dtype.name) + "/" + dpl::support::ReduceOpName(op) +
                                   (in_place ? " in place" : " apart");
          std::vector<char> host(bytes);
          for (size_t i = 0; i < count; ++i)
            store_value(dtype.type, host.data(), i, input_value(0, i));
          DeviceBuffer in(bytes), apart(bytes);
          if (!check.Allocated(in, what) || !check.Allocated(apart, what)) return;
          check.Cuda(cudaMemcpy(in.data, host.data(), bytes, cudaMemcpyHostToDevice), what);
          int64_t shape = static_cast<int64_t>(count);
          DLTensor input{in.data, {kDLCUDA, 0}, 1, dtype.dtype, &shape, nullptr, 0};
          DLTensor output{
              in_place ? in.data : apart.data, {kDLCUDA, 0}, 1, dtype.dtype, &shape, nullptr, 0};
          check.Dpl(ctx.plugin->reduce_scatter(ctx.backend, &input, &output, op, nullptr), what);
          check.Dpl(ctx.plugin->allgather(ctx.backend, &output, &output, nullptr),
                    "in-place allgather after " + what);
          check.Synchronize(nullptr, what);
          check.Cuda(cudaMemcpy(host.data(), output.data, bytes, cudaMemcpyDeviceToHost), what);
          for (size_t i = 0; i < count && check.ok(); ++i) {
            const double expected = expected_value(dtype.type, op, 1, i);
            const double actual = load_value(dtype.type, host.data(), i);
            check.Expect(std::fabs(actual - expected) <= tolerance(dtype.type, expected),
                         what + ": element " + std::to_string(i) + " is " + std::to_string(actual) +
                             ", expected " + std::to_string(expected));
          }
          if (!check.ok()) return;
        }
      }
    }
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

// The tensor is written last on the caller's stream, behind ~2 ms of other work there: a
// collective that did not wait for the caller's stream would read the zeros it held before.
TEST(NcclBackend, OnGpuCollectivesWaitForTheCallersStream) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    constexpr size_t kBytes = 64u << 20, kScratchBytes = 512u << 20;
    DeviceBuffer in(kBytes), out(kBytes), scratch(kScratchBytes);
    if (!check.Allocated(in, "input") || !check.Allocated(out, "output") ||
        !check.Allocated(scratch, "scratch")) {
      return;
    }
    cudaStream_t created = nullptr;
    if (!check.Cuda(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "stream")) return;
    for (cudaStream_t caller : {created, static_cast<cudaStream_t>(nullptr)}) {
      const std::string what = caller == nullptr ? "legacy default stream" : "a created stream";
      check.Cuda(cudaMemset(in.data, 0, kBytes), what);
      check.Cuda(cudaMemset(out.data, 0, kBytes), what);
      check.Cuda(cudaDeviceSynchronize(), what);
      for (int k = 0; k < 8; ++k) {
        check.Cuda(cudaMemsetAsync(scratch.data, k, kScratchBytes, caller), what);
      }
      check.Cuda(cudaMemsetAsync(in.data, 0x3C, kBytes, caller), what);
      int64_t shape = static_cast<int64_t>(kBytes);
      DLTensor in_tensor{in.data, {kDLCUDA, 0}, 1, {kDLUInt, 8, 1}, &shape, nullptr, 0};
      DLTensor out_tensor{out.data, {kDLCUDA, 0}, 1, {kDLUInt, 8, 1}, &shape, nullptr, 0};
      check.Dpl(ctx.plugin->allgather(ctx.backend, &in_tensor, &out_tensor, caller),
                "allgather on " + what);
      check.Synchronize(caller, what);
      std::vector<unsigned char> host(kBytes);
      check.Cuda(cudaMemcpyAsync(host.data(), out.data, kBytes, cudaMemcpyDeviceToHost, caller),
                 what);
      check.Cuda(cudaStreamSynchronize(caller), what);
      const auto wrong =
          std::find_if(host.begin(), host.end(), [](unsigned char b) { return b != 0x3C; });
      check.Expect(wrong == host.end(), "allgather on " + what +
                                            " ran before the caller's stream "
                                            "wrote its input: byte " +
                                            std::to_string(wrong - host.begin()) + " is " +
                                            std::to_string(wrong == host.end() ? 0 : *wrong));
    }
    cudaStreamDestroy(created);
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

TEST(NcclBackend, OnGpuATensorOfAnotherDeviceIsRefused) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    int64_t shape = 4;
    DLTensor tensor{
        reinterpret_cast<void*>(0x1000), {kDLCUDA, 1}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    const dpl_status status = ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
    const std::string message = ctx.plugin->last_error();
    check.Expect(status == DPL_ERR_INVALID_ARGUMENT &&
                     message ==
                         "nccl: allreduce tensor is on CUDA device 1 but this nccl backend runs "
                         "on device 0 (its config's device_id); pass the tensors of the rank's "
                         "own device",
                 "status " + std::to_string(status) + ": " + message);
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

// Backend ABI v5's send_receive on one GPU: with no other rank, moving nothing is a call that
// returns at once, and the rank itself as a peer is refused before anything is issued. (Two ranks
// moving bytes need two GPUs.)
TEST(NcclBackend, OnGpuSendReceiveAloneMovesNothingAndRefusesItselfAsAPeer) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    if (!check.Expect(ctx.plugin->send_receive != nullptr, "no send_receive in the v5 table")) {
      return;
    }
    check.Dpl(ctx.plugin->send_receive(ctx.backend, nullptr, -1, nullptr, -1, nullptr),
              "send_receive of nothing");
    DeviceBuffer buffer(64);
    if (!check.Allocated(buffer, "send tensor")) return;
    int64_t shape = 16;
    DLTensor tensor{buffer.data, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    const dpl_status status =
        ctx.plugin->send_receive(ctx.backend, &tensor, 0, nullptr, -1, nullptr);
    const std::string message = ctx.plugin->last_error();
    check.Expect(status == DPL_ERR_INVALID_ARGUMENT &&
                     message.find("to 0 is not another rank of world size 1") != std::string::npos,
                 "status " + std::to_string(status) + ": " + message);
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}

// Rank 0 of a world of 2 whose rank 1 never comes: the non-blocking setup is given up after the
// timeout and aborted, instead of waiting for ever in ncclCommInitRank.
TEST(NcclBackend, OnGpuSetupWithAMissingPeerTimesOut) {
  if (!plugin_built("nccl")) GTEST_SKIP() << "nccl plugin not built (no CUDA/NCCL at configure)";
  const auto report = RunOnGpu([](const RankContext& ctx, GpuChecks& check) {
    char directory_template[] = "/tmp/dpl_nccl_alone_XXXXXX";
    const std::string directory = ::mkdtemp(directory_template);
    dpl::testing::FileStore store(directory);
    dpl_backend_config_v5 config{};
    config.struct_size = sizeof(config);
    config.version = DPL_BACKEND_ABI_VERSION_5;
    config.rank = 0;
    config.world_size = 2;
    config.local_world_size = 2;
    config.device_type = kDLCUDA;
    config.timeout_ms = 3000;
    config.store = store.view();
    config.options = "";
    config.local_address = "127.0.0.1";
    dpl_backend* alone = nullptr;
    const auto start = std::chrono::steady_clock::now();
    const dpl_status status = ctx.plugin->create(&config, &alone);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string message = ctx.plugin->last_error();
    std::system(("rm -rf " + directory).c_str());
    check.Expect(status == DPL_ERR_TIMEOUT &&
                     message ==
                         "nccl: rank 0 of 2: NCCL communicator setup did not finish within 3000 "
                         "ms (--backend-timeout): a peer did not join (see the other ranks' "
                         "logs); the NCCL communicator was aborted",
                 "status " + std::to_string(status) + ": " + message);
    // 3 s of setup, then at most 3 s for ncclCommAbort (Note [Bounded abort]).
    check.Expect(seconds < 8.0, "create took " + std::to_string(seconds) + " s");
  });
  DPL_SKIP_WITHOUT_NCCL_GPU(report);
  EXPECT_EQ(report.status, DPL_OK) << report.message;
}
#endif

}  // namespace
