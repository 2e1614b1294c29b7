// Conformance of the communication backends: every backend x world size x count x dtype x op,
// ranks as real processes, results checked exactly (integers) or tightly (floats), and every
// rank must end with identical bytes.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "conformance_values.hpp"
#include "dpl/support/reduce.hpp"
#include "rank_processes.hpp"

namespace {

using dpl::support::ElementType;
using dpl::testing::RankContext;
using dpl::testing::RankReport;
using dpl::testing::run_ranks;
using dpl::testing::values::DtypeCase;
using dpl::testing::values::expected_value;
using dpl::testing::values::input_value;
using dpl::testing::values::kDtypes;
using dpl::testing::values::kOps;
using dpl::testing::values::load_value;
using dpl::testing::values::plugin_built;
using dpl::testing::values::store_value;
using dpl::testing::values::tolerance;

// One rank's part of an allreduce sweep over `dtypes` x `ops`; checks its own result.
bool allreduce_sweep(const RankContext& ctx, size_t count, const std::vector<DtypeCase>& dtypes,
                     const std::vector<dpl_reduce_op>& ops, RankReport* report) {
  for (const auto& dtype : dtypes) {
    const size_t bytes = count * dpl::support::ElementSize(dtype.dtype);
    std::vector<char> buffer(bytes + 1);
    for (const auto op : ops) {
      for (size_t i = 0; i < count; ++i)
        store_value(dtype.type, buffer.data(), i, input_value(ctx.rank, i));
      int64_t shape = static_cast<int64_t>(count);
      DLTensor tensor{buffer.data(), {kDLCPU, 0}, 1, dtype.dtype, &shape, nullptr, 0};
      const dpl_status status = ctx.plugin->allreduce(ctx.backend, &tensor, op, nullptr);
      if (status != DPL_OK) {
        report->status = status;
        dpl::testing::set_message(report, std::string(dtype.name) + "/" +
                                              dpl::support::ReduceOpName(op) + ": " +
                                              ctx.plugin->last_error());
        return true;
      }
      for (size_t i = 0; i < count; ++i) {
        const double expected = expected_value(dtype.type, op, ctx.world_size, i);
        const double actual = load_value(dtype.type, buffer.data(), i);
        if (std::fabs(actual - expected) > tolerance(dtype.type, expected)) {
          report->status = DPL_ERR_INTERNAL;
          std::ostringstream text;
          text << dtype.name << "/" << dpl::support::ReduceOpName(op) << " count " << count
               << ": element " << i << " is " << actual << ", expected " << expected;
          dpl::testing::set_message(report, text.str());
          return true;
        }
      }
      dpl::testing::fnv1a(&report->output_hash, buffer.data(), bytes);
    }
  }
  return true;
}

void expect_all_ok_and_identical(const std::vector<RankReport>& reports) {
  ASSERT_FALSE(reports.empty());
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].status, DPL_OK) << "rank " << r << ": " << reports[r].message;
    EXPECT_EQ(reports[r].output_hash, reports[0].output_hash) << "rank " << r << " differs";
  }
}

std::vector<DtypeCase> all_dtypes() {
  return {std::begin(kDtypes), std::end(kDtypes)};
}
// Without bfloat16, which gloo's own algorithms do not have (BackendErrors tests the refusal).
std::vector<DtypeCase> dtypes_but_bfloat16() {
  std::vector<DtypeCase> dtypes;
  for (const DtypeCase& dtype : kDtypes) {
    if (dtype.type != ElementType::kBFloat16) dtypes.push_back(dtype);
  }
  return dtypes;
}
std::vector<dpl_reduce_op> all_ops() {
  return {std::begin(kOps), std::end(kOps)};
}

using MatrixParam = std::tuple<std::string, int, size_t>;
class AllreduceMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(AllreduceMatrix, EveryDtypeAndOpIsExactOnEveryRank) {
  const auto [backend, world, count] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  auto dtypes = all_dtypes();
  auto ops = all_ops();
  if (count >= (1u << 20)) {  // big counts: the common training dtypes only, to stay fast
    dtypes = {kDtypes[0], kDtypes[2]};
  }
  const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
    return allreduce_sweep(ctx, count, dtypes, ops, report);
  });
  expect_all_ok_and_identical(reports);
}

std::string matrix_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param)) + "_count" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Backends, AllreduceMatrix,
                         ::testing::Combine(::testing::Values("tcp", "gloo"),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values<size_t>(0, 1, 7, 1024)),
                         matrix_name);
// tcp promises any world size: an odd one that is not a power of two nor 3.
INSTANTIATE_TEST_SUITE_P(TcpWorldFive, AllreduceMatrix,
                         ::testing::Combine(::testing::Values("tcp"), ::testing::Values(5),
                                            ::testing::Values<size_t>(1, 7, 1024)),
                         matrix_name);
// World 4 takes gloo's two-step pairwise exchange (Note [Synchronous pairs]); 3 folds one rank.
// gloo folds ranks beyond a power of two into partners (Note [Folding to a power of two]): one
// fold at 3 and 5 ranks, two at 6.
INSTANTIATE_TEST_SUITE_P(GlooFolded, AllreduceMatrix,
                         ::testing::Combine(::testing::Values("gloo"), ::testing::Values(5, 6),
                                            ::testing::Values<size_t>(1, 7, 1024)),
                         matrix_name);
INSTANTIATE_TEST_SUITE_P(BackendsLarge, AllreduceMatrix,
                         ::testing::Combine(::testing::Values("tcp", "gloo"),
                                            ::testing::Values(2, 3, 4),
                                            ::testing::Values<size_t>(1u << 20)),
                         matrix_name);

class BackendTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// 16M elements (64 MiB) only for float32 sum at two ranks: the size training buckets reach,
// kept to one case for CI time. Far larger than socket buffers, so a schedule in which both ends
// of a pair write before reading deadlocks here (gloo: Note [Synchronous pairs]).
TEST(BackendLarge, SixteenMillionFloatSumAtTwoRanks) {
  for (const std::string backend : {"tcp", "gloo"}) {
    if (!plugin_built(backend)) continue;
    const auto reports = run_ranks(backend, 2, [&](const RankContext& ctx, RankReport* report) {
      return allreduce_sweep(ctx, 16u << 20, {kDtypes[0]}, {DPL_REDUCE_SUM}, report);
    });
    SCOPED_TRACE(backend);
    expect_all_ok_and_identical(reports);
  }
}

// gloo's exchange without writing ahead (Note [Writing ahead]): every chunk takes turns, the order
// a machine with small socket buffers gets. The same 64 MiB case must neither deadlock nor differ.
TEST(BackendLarge, GlooTakingTurnsAtTwoRanks) {
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  dpl::testing::RunOptions options;
  options.backend_options = "write_ahead=off";
  const auto reports = run_ranks(
      "gloo", 2,
      [&](const RankContext& ctx, RankReport* report) {
        return allreduce_sweep(ctx, 16u << 20, {kDtypes[0]}, {DPL_REDUCE_SUM}, report);
      },
      options);
  expect_all_ok_and_identical(reports);
}

// The gloo plugin's forced algorithms (benchmark options) give the same exact sums as auto, for
// every dtype gloo has (bfloat16 only through pairwise, dpl's own exchange).
TEST(BackendGloo, EveryForcedAlgorithmIsExact) {
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  for (const std::string algorithm : {"ring", "ring_chunked", "halving_doubling", "pairwise"}) {
    for (const int world : {2, 3}) {
      dpl::testing::RunOptions options;
      options.backend_options = "algorithm=" + algorithm;
      const auto reports = run_ranks(
          "gloo", world,
          [&](const RankContext& ctx, RankReport* report) {
            const auto dtypes = algorithm == "pairwise" ? all_dtypes() : dtypes_but_bfloat16();
            return allreduce_sweep(ctx, 70001, dtypes, all_ops(), report);
          },
          options);
      SCOPED_TRACE(algorithm + " at world " + std::to_string(world));
      expect_all_ok_and_identical(reports);
    }
  }
}

TEST_P(BackendTest, BroadcastFromLastRank) {
  const auto [backend, world] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  for (const size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{3u << 20}}) {
    const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
      const int root = ctx.world_size - 1;
      std::vector<int32_t> data(count + 1);
      for (size_t i = 0; i < count; ++i)
        data[i] = static_cast<int32_t>(i * 31 + ctx.rank * 1000003);
      int64_t shape = static_cast<int64_t>(count);
      DLTensor tensor{data.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, &shape, nullptr, 0};
      report->status = ctx.plugin->broadcast(ctx.backend, &tensor, root, nullptr);
      if (report->status != DPL_OK) {
        dpl::testing::set_message(report, ctx.plugin->last_error());
        return true;
      }
      for (size_t i = 0; i < count; ++i) {
        if (data[i] != static_cast<int32_t>(i * 31 + root * 1000003)) {
          report->status = DPL_ERR_INTERNAL;
          dpl::testing::set_message(report, "element " + std::to_string(i) + " is not root's");
          return true;
        }
      }
      dpl::testing::fnv1a(&report->output_hash, data.data(), count * sizeof(int32_t));
      return true;
    });
    expect_all_ok_and_identical(reports);
  }
}

// A training step repeats the same few allreduces; backends may reuse what they built for one
// size (gloo: Note [Reusing gloo algorithms]). Sizes recur, interleaved, from buffers that sit at
// other addresses on every rank and every call, and each result must still be the exact sum.
TEST_P(BackendTest, RecurringSizesFromMovingBuffersStayExact) {
  const auto [backend, world] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
    const size_t counts[] = {1001, 70000, 1001, 3, 70000, 1001};
    for (int round = 0; round < 3; ++round) {
      for (size_t call = 0; call < sizeof counts / sizeof counts[0]; ++call) {
        const size_t count = counts[call];
        // A fresh allocation, offset differently per rank, round and call.
        std::vector<int32_t> memory(count + 64);
        int32_t* data = memory.data() + (ctx.rank * 7 + round * 3 + call) % 64;
        for (size_t i = 0; i < count; ++i)
          data[i] = static_cast<int32_t>(i % 1000) * (ctx.rank + 1) + round;
        int64_t shape = static_cast<int64_t>(count);
        DLTensor tensor{data, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, &shape, nullptr, 0};
        report->status = ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
        if (report->status != DPL_OK) {
          dpl::testing::set_message(report, ctx.plugin->last_error());
          return true;
        }
        const int32_t ranks = ctx.world_size, rank_sum = ranks * (ranks + 1) / 2;
        for (size_t i = 0; i < count; ++i) {
          const int32_t expected = static_cast<int32_t>(i % 1000) * rank_sum + round * ranks;
          if (data[i] != expected) {
            report->status = DPL_ERR_INTERNAL;
            dpl::testing::set_message(
                report, "round " + std::to_string(round) + ", call " + std::to_string(call) +
                            ", element " + std::to_string(i) + ": " + std::to_string(data[i]) +
                            " is not " + std::to_string(expected));
            return true;
          }
        }
        dpl::testing::fnv1a(&report->output_hash, data, count * sizeof(int32_t));
      }
    }
    return true;
  });
  expect_all_ok_and_identical(reports);
}

TEST_P(BackendTest, AllgatherInRankOrderAndBarrier) {
  const auto [backend, world] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  for (const size_t count : {size_t{0}, size_t{1}, size_t{777}, size_t{1u << 20}}) {
    const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
      std::vector<int64_t> input(count + 1), output(count * ctx.world_size + 1, -1);
      for (size_t i = 0; i < count; ++i) input[i] = static_cast<int64_t>(ctx.rank) << 40 | i;
      int64_t in_shape = static_cast<int64_t>(count);
      int64_t out_shape = static_cast<int64_t>(count * ctx.world_size);
      DLTensor in{input.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, &in_shape, nullptr, 0};
      DLTensor out{output.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, &out_shape, nullptr, 0};
      report->status = ctx.plugin->allgather(ctx.backend, &in, &out, nullptr);
      if (report->status == DPL_OK) report->status = ctx.plugin->barrier(ctx.backend);
      if (report->status != DPL_OK) {
        dpl::testing::set_message(report, ctx.plugin->last_error());
        return true;
      }
      for (int r = 0; r < ctx.world_size; ++r) {
        for (size_t i = 0; i < count; ++i) {
          if (output[r * count + i] != (static_cast<int64_t>(r) << 40 | static_cast<int64_t>(i))) {
            report->status = DPL_ERR_INTERNAL;
            dpl::testing::set_message(report, "block " + std::to_string(r) + " element " +
                                                  std::to_string(i) + " is wrong");
            return true;
          }
        }
      }
      dpl::testing::fnv1a(&report->output_hash, output.data(), out_shape * sizeof(int64_t));
      return true;
    });
    expect_all_ok_and_identical(reports);
  }
}

// A peer that dies mid-job must make the others fail within the backend timeout, not hang.
TEST_P(BackendTest, DeadPeerFailsWithinTimeout) {
  const auto [backend, world] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  if (world < 2) GTEST_SKIP() << "needs a peer";
  dpl::testing::RunOptions options;
  options.timeout_ms = 2500;
  options.wall_limit_s = 20;
  const auto reports = run_ranks(
      backend, world,
      [&](const RankContext& ctx, RankReport* report) {
        if (ctx.rank == ctx.world_size - 1) return false;  // vanish before the collective
        std::vector<float> data(4u << 20, 1.0f);
        int64_t shape = static_cast<int64_t>(data.size());
        DLTensor tensor{data.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
        report->status = ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
        if (report->status != DPL_OK) dpl::testing::set_message(report, ctx.plugin->last_error());
        return true;
      },
      options);
  for (int r = 0; r + 1 < world; ++r) {
    EXPECT_TRUE(reports[r].status == DPL_ERR_COMMUNICATION || reports[r].status == DPL_ERR_TIMEOUT)
        << "rank " << r << " status " << reports[r].status << ": " << reports[r].message;
    EXPECT_LT(reports[r].seconds, 4.0) << "rank " << r << " took too long to notice";
    EXPECT_NE(std::string(reports[r].message), "") << "rank " << r;
  }
  EXPECT_EQ(reports[world - 1].exited_early, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Combine(::testing::Values("tcp", "gloo"),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Runs one call at world size 1 and returns (status, message).
std::pair<int, std::string> single_rank(const std::string& backend,
                                        const std::function<dpl_status(const RankContext&)>& call,
                                        const std::string& options = "") {
  dpl::testing::RunOptions run_options;
  run_options.backend_options = options;
  const auto reports = run_ranks(
      backend, 1,
      [&](const RankContext& ctx, RankReport* report) {
        report->status = call(ctx);
        dpl::testing::set_message(report, ctx.plugin->last_error());
        return true;
      },
      run_options);
  return {reports[0].status, reports[0].message};
}

TEST(BackendErrors, UnsupportedDtypeIsRefusedWithAMessage) {
  if (!plugin_built("tcp") || !plugin_built("gloo")) GTEST_SKIP() << "tcp/gloo plugins not built";
  int64_t shape = 4;
  std::vector<float> data(8, 1.0f);
  auto complex_allreduce = [&](const RankContext& ctx) {
    DLTensor tensor{data.data(), {kDLCPU, 0}, 1, {kDLComplex, 64, 1}, &shape, nullptr, 0};
    return ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
  };
  EXPECT_EQ(single_rank("tcp", complex_allreduce),
            std::make_pair(static_cast<int>(DPL_ERR_UNSUPPORTED),
                           std::string("tcp: allreduce does not support dtype complex64; use "
                                       "float16, bfloat16, float32, float64, int8, uint8, int32 "
                                       "or int64")));
  EXPECT_EQ(single_rank("gloo", complex_allreduce),
            std::make_pair(static_cast<int>(DPL_ERR_UNSUPPORTED),
                           std::string("gloo: allreduce does not support dtype complex64; use "
                                       "float16, bfloat16, float32, float64, int8, uint8, int32 "
                                       "or int64")));
  // bfloat16 with one of gloo's own algorithms (at two ranks: one rank sums nothing).
  dpl::testing::RunOptions ring;
  ring.backend_options = "algorithm=ring";
  const auto reports = run_ranks(
      "gloo", 2,
      [&](const RankContext& ctx, RankReport* report) {
        DLTensor tensor{data.data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, &shape, nullptr, 0};
        report->status = ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
        dpl::testing::set_message(report, ctx.plugin->last_error());
        return true;
      },
      ring);
  for (const auto& report : reports) {
    EXPECT_EQ(report.status, DPL_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(report.message),
              "gloo: allreduce of bfloat16 needs the pairwise exchange (option algorithm=auto, "
              "the default, or algorithm=pairwise): gloo's own algorithms have no bfloat16");
  }
  auto bad_op = [&](const RankContext& ctx) {
    DLTensor tensor{data.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    return ctx.plugin->allreduce(ctx.backend, &tensor, static_cast<dpl_reduce_op>(9), nullptr);
  };
  EXPECT_EQ(single_rank("tcp", bad_op),
            std::make_pair(static_cast<int>(DPL_ERR_UNSUPPORTED),
                           std::string("tcp: allreduce does not support op 9; use sum, avg, min "
                                       "or max")));
  auto cuda_tensor = [&](const RankContext& ctx) {
    DLTensor tensor{data.data(), {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    return ctx.plugin->allreduce(ctx.backend, &tensor, DPL_REDUCE_SUM, nullptr);
  };
  EXPECT_EQ(single_rank("tcp", cuda_tensor),
            std::make_pair(static_cast<int>(DPL_ERR_UNSUPPORTED),
                           std::string("tcp: allreduce tensor is on device type 2 but the tcp "
                                       "backend only moves CPU tensors; use --backend nccl for "
                                       "CUDA tensors")));
}

TEST(BackendErrors, UnknownOptionAndBadAllgatherSizeAreInvalidArguments) {
  if (!plugin_built("tcp") || !plugin_built("gloo")) GTEST_SKIP() << "tcp/gloo plugins not built";
  auto nothing = [](const RankContext&) { return DPL_OK; };
  EXPECT_EQ(single_rank("tcp", nothing, "adress=1.2.3.4"),
            std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                           std::string("tcp: unknown option \"adress\" in --backend-options; "
                                       "known options: address")));
  EXPECT_EQ(single_rank("gloo", nothing, "port"),
            std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                           std::string("gloo: --backend-options entry \"port\" is not key=value")));
  EXPECT_EQ(single_rank("gloo", nothing, "colour=blue"),
            std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                           std::string("gloo: unknown option \"colour\" in --backend-options; "
                                       "known options: write_ahead, algorithm, interface, "
                                       "address")));
  std::vector<float> in(4), out(3);
  auto short_output = [&](const RankContext& ctx) {
    int64_t in_shape = 4, out_shape = 3;
    DLTensor a{in.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &in_shape, nullptr, 0};
    DLTensor b{out.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &out_shape, nullptr, 0};
    return ctx.plugin->allgather(ctx.backend, &a, &b, nullptr);
  };
  EXPECT_EQ(single_rank("tcp", short_output),
            std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                           std::string("tcp: allgather output holds 12 bytes but needs "
                                       "world_size * input = 16")));
  EXPECT_EQ(single_rank("gloo", short_output),
            std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                           std::string("gloo: allgather output holds 12 bytes but needs "
                                       "world_size * input = 16")));
  auto bad_root = [&](const RankContext& ctx) {
    int64_t shape = 4;
    DLTensor a{in.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    return ctx.plugin->broadcast(ctx.backend, &a, 1, nullptr);
  };
  for (const std::string backend : {"tcp", "gloo"}) {
    EXPECT_EQ(single_rank(backend, bad_root),
              std::make_pair(static_cast<int>(DPL_ERR_INVALID_ARGUMENT),
                             backend + ": broadcast root 1 is outside world size 1"));
  }
}

TEST(BackendPlugins, ExportExactlyTheEntrySymbol) {
  // gloo and nccl implement backend ABI version 5 (dpl/backend_v5.h); tcp stays at version 4
  // (dpl/backend_v4.h: no send_receive; its ring links reach two neighbours only).
  const std::map<std::string, uint32_t> versions{{"tcp", 4}, {"gloo", 5}, {"nccl", 5}};
  for (const auto& [backend, version] : versions) {
    if (!plugin_built(backend)) continue;
    const std::string command = "nm -D --defined-only " +
                                dpl::testing::plugin_path(backend, DPL_TEST_PLUGIN_DIR) +
                                " | awk '{print $3}'";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
    ASSERT_NE(pipe, nullptr);
    std::string symbols;
    char line[512];
    while (std::fgets(line, sizeof(line), pipe.get()) != nullptr) symbols += line;
    EXPECT_EQ(symbols, "dpl_backend_plugin_v" + std::to_string(version) + "\n") << backend;
    std::string error;
    const auto* table =
        dpl::testing::load_backend(dpl::testing::plugin_path(backend, DPL_TEST_PLUGIN_DIR), &error);
    ASSERT_NE(table, nullptr) << error;
    EXPECT_EQ(table->header.struct_size,
              version == 5 ? sizeof(dpl_backend_plugin_v5) : sizeof(dpl_backend_plugin_v4));
    EXPECT_EQ(table->header.magic, DPL_PLUGIN_MAGIC);
    EXPECT_EQ(table->header.kind, static_cast<uint32_t>(DPL_PLUGIN_KIND_BACKEND));
    EXPECT_EQ(table->header.abi_version, version);
    EXPECT_NE(table->synchronize, nullptr);
    EXPECT_NE(table->reduce_scatter, nullptr);
    EXPECT_NE(table->abort, nullptr);
    EXPECT_EQ(table->send_receive != nullptr, version == 5) << backend;
    EXPECT_EQ(std::string(table->header.name), backend);
  }
}

}  // namespace
