// Conformance of backend ABI v3's collectives (dpl/backend_v3.h): reduce_scatter and in-place
// allgather, every backend x world size x slice size x dtype x op, in place and not, ranks as
// real processes. Each rank checks its own slice exactly (integers) or tightly (floats).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <tuple>

#include "conformance_values.hpp"
#include "dpl/support/reduce.hpp"
#include "rank_processes.hpp"

namespace {

using dpl::testing::Failed;
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

enum class Placement { kInPlace, kApart };

// One rank's reduce_scatter of world x `count` elements of `dtype` with `op`; checks its slice.
bool ReduceScatterCase(const RankContext& ctx, size_t count, const DtypeCase& dtype,
                       dpl_reduce_op op, Placement placement, RankReport* report) {
  const size_t element = dpl::support::ElementSize(dtype.dtype);
  const size_t total = count * size_t(ctx.world_size);
  std::vector<char> input(total * element + 1), apart(count * element + 1);
  for (size_t i = 0; i < total; ++i)
    store_value(dtype.type, input.data(), i, input_value(ctx.rank, i));
  int64_t in_shape = int64_t(total), out_shape = int64_t(count);
  char* slice = placement == Placement::kInPlace ? input.data() + size_t(ctx.rank) * count * element
                                                 : apart.data();
  DLTensor in{input.data(), {kDLCPU, 0}, 1, dtype.dtype, &in_shape, nullptr, 0};
  DLTensor out{slice, {kDLCPU, 0}, 1, dtype.dtype, &out_shape, nullptr, 0};
  const std::string what = std::string(dtype.name) + "/" + dpl::support::ReduceOpName(op);
  if (Failed(ctx, report, ctx.plugin->reduce_scatter(ctx.backend, &in, &out, op, nullptr), what)) {
    return true;
  }
  for (size_t i = 0; i < count; ++i) {
    const size_t global = size_t(ctx.rank) * count + i;
    const double expected = expected_value(dtype.type, op, ctx.world_size, global);
    const double actual = load_value(dtype.type, slice, i);
    if (std::fabs(actual - expected) > tolerance(dtype.type, expected)) {
      report->status = DPL_ERR_INTERNAL;
      std::ostringstream text;
      text << what << " slice of " << count << ": element " << i << " is " << actual
           << ", expected " << expected;
      dpl::testing::set_message(report, text.str());
      return true;
    }
  }
  return true;
}

using MatrixParam = std::tuple<std::string, int, size_t>;
class ReduceScatterMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(ReduceScatterMatrix, EveryDtypeAndOpInPlaceAndApart) {
  const auto [backend, world, count] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
    report->status = DPL_OK;
    for (const DtypeCase& dtype : kDtypes) {
      for (const dpl_reduce_op op : kOps) {
        for (const Placement placement : {Placement::kInPlace, Placement::kApart}) {
          ReduceScatterCase(ctx, count, dtype, op, placement, report);
          if (report->status != DPL_OK) return true;
        }
      }
    }
    return true;
  });
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].status, DPL_OK) << "rank " << r << ": " << reports[r].message;
  }
}

std::string MatrixName(const ::testing::TestParamInfo<MatrixParam>& info) {
  return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param)) + "_slice" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Backends, ReduceScatterMatrix,
                         ::testing::Combine(::testing::Values("tcp", "gloo"),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values<size_t>(0, 1, 7, 1025)),
                         MatrixName);
// gloo folds ranks beyond a power of two (5 and 6) and scatters by halving at 8.
INSTANTIATE_TEST_SUITE_P(GlooWorlds, ReduceScatterMatrix,
                         ::testing::Combine(::testing::Values("gloo"), ::testing::Values(5, 8),
                                            ::testing::Values<size_t>(3, 1025)),
                         MatrixName);

// Note [gloo's reduce-scatter] (plugins/gloo): every slice holds exactly the bits an allreduce of
// the same input leaves there, at every world size. Random floats, so the order of the sums shows.
TEST(ReduceScatterBits, GlooSlicesHoldTheAllreducesBits) {
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  for (const int world : {2, 3, 4}) {
    const auto reports = run_ranks("gloo", world, [&](const RankContext& ctx, RankReport* report) {
      const size_t count = 100003, total = count * size_t(ctx.world_size);
      std::mt19937 random(uint32_t(ctx.rank + 1));
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::vector<float> input(total), reduced(total);
      for (float& x : input) x = uniform(random);
      reduced = input;
      int64_t in_shape = int64_t(total), out_shape = int64_t(count);
      DLTensor all{reduced.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &in_shape, nullptr, 0};
      if (Failed(ctx, report, ctx.plugin->allreduce(ctx.backend, &all, DPL_REDUCE_SUM, nullptr),
                 "allreduce")) {
        return true;
      }
      DLTensor in{input.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &in_shape, nullptr, 0};
      float* slice = input.data() + size_t(ctx.rank) * count;
      DLTensor out{slice, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &out_shape, nullptr, 0};
      if (Failed(ctx, report,
                 ctx.plugin->reduce_scatter(ctx.backend, &in, &out, DPL_REDUCE_SUM, nullptr),
                 "reduce_scatter")) {
        return true;
      }
      const float* expected = reduced.data() + size_t(ctx.rank) * count;
      report->status =
          std::memcmp(slice, expected, count * sizeof(float)) == 0 ? DPL_OK : DPL_ERR_INTERNAL;
      if (report->status != DPL_OK) dpl::testing::set_message(report, "the bits differ");
      return true;
    });
    for (size_t r = 0; r < reports.size(); ++r) {
      EXPECT_EQ(reports[r].status, DPL_OK)
          << "world " << world << ", rank " << r << ": " << reports[r].message;
    }
  }
}

// gloo's forced algorithms scatter through their allreduce (Note [gloo's reduce-scatter]).
TEST(ReduceScatterGloo, ForcedAlgorithmsScatterToo) {
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  for (const int world : {2, 3}) {
    dpl::testing::RunOptions options;
    options.backend_options = "algorithm=ring_chunked";
    const auto reports = run_ranks(
        "gloo", world,
        [&](const RankContext& ctx, RankReport* report) {
          report->status = DPL_OK;
          for (const Placement placement : {Placement::kInPlace, Placement::kApart}) {
            ReduceScatterCase(ctx, 1001, kDtypes[0], DPL_REDUCE_SUM, placement, report);
            if (report->status != DPL_OK) return true;
          }
          return true;
        },
        options);
    for (size_t r = 0; r < reports.size(); ++r) {
      EXPECT_EQ(reports[r].status, DPL_OK) << "rank " << r << ": " << reports[r].message;
    }
  }
}

class AllgatherInPlace : public ::testing::TestWithParam<MatrixParam> {};

// Each rank writes only its own slot of the output; the others hold garbage until the call.
TEST_P(AllgatherInPlace, EveryDtypeFillsTheOtherSlots) {
  const auto [backend, world, count] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
    report->status = DPL_OK;
    for (const DtypeCase& dtype : kDtypes) {
      const size_t element = dpl::support::ElementSize(dtype.dtype);
      const size_t total = count * size_t(ctx.world_size);
      std::vector<char> output(total * element + 1, char(0x5a));
      char* own = output.data() + size_t(ctx.rank) * count * element;
      for (size_t i = 0; i < count; ++i) store_value(dtype.type, own, i, input_value(ctx.rank, i));
      int64_t in_shape = int64_t(count), out_shape = int64_t(total);
      DLTensor in{own, {kDLCPU, 0}, 1, dtype.dtype, &in_shape, nullptr, 0};
      DLTensor out{output.data(), {kDLCPU, 0}, 1, dtype.dtype, &out_shape, nullptr, 0};
      if (Failed(ctx, report, ctx.plugin->allgather(ctx.backend, &in, &out, nullptr), dtype.name)) {
        return true;
      }
      for (int r = 0; r < ctx.world_size; ++r) {
        for (size_t i = 0; i < count; ++i) {
          const double actual = load_value(dtype.type, output.data(), size_t(r) * count + i);
          if (actual != input_value(r, i)) {
            report->status = DPL_ERR_INTERNAL;
            dpl::testing::set_message(report, std::string(dtype.name) + " slot " +
                                                  std::to_string(r) + " element " +
                                                  std::to_string(i) + " is wrong");
            return true;
          }
        }
      }
      dpl::testing::fnv1a(&report->output_hash, output.data(), total * element);
    }
    return true;
  });
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].status, DPL_OK) << "rank " << r << ": " << reports[r].message;
    EXPECT_EQ(reports[r].output_hash, reports[0].output_hash) << "rank " << r << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AllgatherInPlace,
                         ::testing::Combine(::testing::Values("tcp", "gloo"),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values<size_t>(0, 1, 7, 100001)),
                         MatrixName);

// Runs `call` at world size 1 and returns (status, message).
std::pair<int, std::string> SingleRank(const std::string& backend,
                                       const std::function<dpl_status(const RankContext&)>& call) {
  const auto reports = run_ranks(backend, 1, [&](const RankContext& ctx, RankReport* report) {
    report->status = call(ctx);
    dpl::testing::set_message(report, ctx.plugin->last_error());
    return true;
  });
  return {reports[0].status, reports[0].message};
}

TEST(ReduceScatterErrors, BadSizesTypesAndOverlapsAreInvalidArguments) {
  std::vector<float> data(16);
  auto call = [&](size_t in_offset, int64_t in_count, size_t out_offset, int64_t out_count,
                  DLDataType out_dtype) {
    return [=, &data](const RankContext& ctx) {
      int64_t in_shape = in_count, out_shape = out_count;
      DLTensor in{
          data.data() + in_offset, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &in_shape, nullptr, 0};
      DLTensor out{data.data() + out_offset, {kDLCPU, 0}, 1, out_dtype, &out_shape, nullptr, 0};
      return ctx.plugin->reduce_scatter(ctx.backend, &in, &out, DPL_REDUCE_SUM, nullptr);
    };
  };
  const DLDataType f32{kDLFloat, 32, 1};
  const int invalid = DPL_ERR_INVALID_ARGUMENT;
  for (const std::string backend : {"tcp", "gloo"}) {
    if (!plugin_built(backend)) continue;
    EXPECT_EQ(SingleRank(backend, call(0, 4, 8, 3, f32)),
              std::make_pair(invalid, backend + ": reduce_scatter input holds 4 elements but "
                                                "needs world_size * output = 3"));
    EXPECT_EQ(SingleRank(backend, call(0, 4, 8, 4, {kDLFloat, 64, 1})),
              std::make_pair(invalid,
                             backend + ": reduce_scatter input is float32 but output is float64"));
    EXPECT_EQ(SingleRank(backend, call(0, 4, 2, 4, f32)),
              std::make_pair(invalid, backend + ": reduce_scatter output overlaps its input "
                                                "without being slice 0 of it (the in-place form)"));
    auto overlapping_allgather = [&](const RankContext& ctx) {
      int64_t in_shape = 4, out_shape = 4;
      DLTensor in{data.data() + 2, {kDLCPU, 0}, 1, f32, &in_shape, nullptr, 0};
      DLTensor out{data.data(), {kDLCPU, 0}, 1, f32, &out_shape, nullptr, 0};
      return ctx.plugin->allgather(ctx.backend, &in, &out, nullptr);
    };
    EXPECT_EQ(SingleRank(backend, overlapping_allgather),
              std::make_pair(invalid, backend + ": allgather input overlaps its output without "
                                                "being slice 0 of it (the in-place form)"));
  }
}

}  // namespace
