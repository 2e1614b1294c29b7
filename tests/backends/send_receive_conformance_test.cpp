// Conformance of backend ABI v5's send_receive (dpl/backend_v5.h) on the host backends that have
// it, ranks as real processes: every shift of a cycle (rank r to r - k, from r + k, the sharded
// optimizer's copies), a chain whose ends only send or only receive, calls between collectives
// (the order that keeps a backend's matching in step), sizes from none to more than a socket
// buffer, and the refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "conformance_values.hpp"
#include "rank_processes.hpp"

namespace {

using dpl::testing::Failed;
using dpl::testing::RankContext;
using dpl::testing::RankReport;
using dpl::testing::run_ranks;
using dpl::testing::values::plugin_built;

// The bytes rank `rank` sends in call `call`: its own, so a receiver can tell whose it got.
uint32_t Word(int rank, int call, size_t i) {
  return uint32_t(rank) * 0x01000193u + uint32_t(call) * 0x9E3779B9u + uint32_t(i);
}

DLTensor Words(std::vector<uint32_t>& words, int64_t* shape) {
  *shape = int64_t(words.size());
  return DLTensor{words.data(), {kDLCPU, 0}, 1, {kDLUInt, 32, 1}, shape, nullptr, 0};
}

// Checks that `words` are what rank `from` sent in call `call`.
bool Received(const std::vector<uint32_t>& words, int from, int call, const std::string& what,
              RankReport* report) {
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == Word(from, call, i)) continue;
    std::ostringstream text;
    text << what << ": word " << i << " of " << words.size() << " is " << words[i] << ", not rank "
         << from << "'s";
    report->status = DPL_ERR_INTERNAL;
    dpl::testing::set_message(report, text.str());
    return false;
  }
  return true;
}

// One send_receive of `words` words: to `to` and from `from` (-1: that side left out).
bool Exchange(const RankContext& ctx, int call, size_t words, int to, int from,
              RankReport* report) {
  std::vector<uint32_t> out(words), in(words, 0xFFFFFFFFu);
  for (size_t i = 0; i < words; ++i) out[i] = Word(ctx.rank, call, i);
  int64_t out_shape = 0, in_shape = 0;
  DLTensor send = Words(out, &out_shape), receive = Words(in, &in_shape);
  const std::string what = "call " + std::to_string(call) + " (" + std::to_string(words) +
                           " words, to " + std::to_string(to) + ", from " + std::to_string(from) +
                           ")";
  const dpl_status status = ctx.plugin->send_receive(ctx.backend, to < 0 ? nullptr : &send, to,
                                                     from < 0 ? nullptr : &receive, from, nullptr);
  if (Failed(ctx, report, status, what)) return false;
  if (from >= 0 && !Received(in, from, call, what, report)) return false;
  if (from < 0 && in != std::vector<uint32_t>(words, 0xFFFFFFFFu)) {
    report->status = DPL_ERR_INTERNAL;
    dpl::testing::set_message(report, what + ": a rank that receives nothing got bytes");
    return false;
  }
  return true;
}

// A barrier between calls: the order of collectives must survive a send_receive.
bool Barrier(const RankContext& ctx, RankReport* report) {
  return !Failed(ctx, report, ctx.plugin->barrier(ctx.backend), "barrier");
}

void ExpectAllOk(const std::vector<RankReport>& reports, int world) {
  ASSERT_EQ(int(reports.size()), world);
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    EXPECT_EQ(reports[rank].status, DPL_OK) << "rank " << rank << ": " << reports[rank].message;
  }
}

using CycleParam = std::tuple<std::string, int, size_t>;
class SendReceiveCycle : public ::testing::TestWithParam<CycleParam> {};

// Every shift k of the world: rank r sends to r - k and receives from r + k, a barrier between.
TEST_P(SendReceiveCycle, EveryShiftDeliversEachRanksOwnBytes) {
  const auto [backend, world, words] = GetParam();
  if (!plugin_built(backend)) GTEST_SKIP() << backend << " plugin not built";
  const auto reports = run_ranks(backend, world, [&](const RankContext& ctx, RankReport* report) {
    if (ctx.plugin->send_receive == nullptr) return true;
    for (int k = 1; k < ctx.world_size; ++k) {
      const int to = (ctx.rank - k + ctx.world_size) % ctx.world_size;
      const int from = (ctx.rank + k) % ctx.world_size;
      if (!Exchange(ctx, k, words, to, from, report) || !Barrier(ctx, report)) return true;
    }
    return true;
  });
  ExpectAllOk(reports, world);
}

INSTANTIATE_TEST_SUITE_P(HostBackends, SendReceiveCycle,
                         ::testing::Combine(::testing::Values("gloo"), ::testing::Values(2, 3, 4),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{1000},
                                                              size_t{1} << 20)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param)) + "_words" +
                                  std::to_string(std::get<2>(info.param));
                         });

// A chain 0 -> 1 -> ... -> world - 1: the first rank only sends, the last only receives, and the
// ranks call again at once (no collective between), so consecutive calls must not mix.
TEST(SendReceive, AChainWhoseEndsMoveOneWayAndCallsInARow) {
  constexpr int kWorld = 3;
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  const auto reports = run_ranks("gloo", kWorld, [&](const RankContext& ctx, RankReport* report) {
    const int to = ctx.rank + 1 < ctx.world_size ? ctx.rank + 1 : -1;
    const int from = ctx.rank > 0 ? ctx.rank - 1 : -1;
    for (int call = 0; call < 4; ++call) {
      if (!Exchange(ctx, call, size_t{3000} << call, to, from, report)) return true;
    }
    return true;
  });
  ExpectAllOk(reports, kWorld);
}

// Refused before anything moves, naming the problem; the instance stays usable (a barrier after).
TEST(SendReceive, RefusesItselfOrAnotherWorldAsAPeerAndAPeerWithoutATensor) {
  if (!plugin_built("gloo")) GTEST_SKIP() << "gloo plugin not built";
  const auto reports = run_ranks("gloo", 2, [&](const RankContext& ctx, RankReport* report) {
    std::vector<uint32_t> words(4);
    int64_t shape = 0;
    DLTensor tensor = Words(words, &shape);
    const struct {
      const DLTensor* send;
      int to;
      DLTensor* receive;
      int from;
      const char* says;
    } cases[] = {{&tensor, ctx.rank, nullptr, -1, "is not another rank"},
                 {nullptr, -1, &tensor, 2, "is not another rank of world size 2"},
                 {nullptr, 1 - ctx.rank, nullptr, -1, "send is NULL but to is"},
                 {&tensor, 1 - ctx.rank, &tensor, 1 - ctx.rank, "overlap"}};
    for (const auto& refused : cases) {
      const dpl_status status = ctx.plugin->send_receive(ctx.backend, refused.send, refused.to,
                                                         refused.receive, refused.from, nullptr);
      const std::string error = status == DPL_OK ? "" : ctx.plugin->last_error();
      if (status != DPL_ERR_INVALID_ARGUMENT || error.find(refused.says) == std::string::npos) {
        report->status = DPL_ERR_INTERNAL;
        dpl::testing::set_message(report, "expected a refusal saying '" +
                                              std::string(refused.says) + "', got " +
                                              std::to_string(status) + ": " + error);
        return true;
      }
    }
    Barrier(ctx, report);
    return true;
  });
  ExpectAllOk(reports, 2);
}

// tcp stays at backend ABI v4: no send_receive (the host moves such bytes by an allgather).
TEST(SendReceive, TcpHasNone) {
  if (!plugin_built("tcp")) GTEST_SKIP() << "tcp plugin not built";
  std::string error;
  const auto* table =
      dpl::testing::load_backend(dpl::testing::plugin_path("tcp", DPL_TEST_PLUGIN_DIR), &error);
  ASSERT_NE(table, nullptr) << error;
  EXPECT_EQ(table->header.abi_version, 4u);
  EXPECT_EQ(table->send_receive, nullptr);
}

}  // namespace
