// The stall posts of the workers and the launcher's summary of them (Note [Stall reports]), and
// the JSON text the metrics file, the trace and the posts are written with.
#include "observability/stall_report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "observability/activity.hpp"
#include "observability/json.hpp"

namespace dpl::observability {
namespace {

std::string Post(int64_t since_ms, int64_t step, const std::string& what) {
  return EncodeStallPost({since_ms, step, what});
}

TEST(StallPosts, RoundTrip) {
  const std::string text = Post(1700000000123, 5, "allreduce of bucket 2 of 4 (1 MiB)");
  EXPECT_EQ(text, "since=1700000000123 step=5 what=allreduce of bucket 2 of 4 (1 MiB)");
  const std::optional<StallPost> post = DecodeStallPost(text);
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->since_unix_ms, 1700000000123);
  EXPECT_EQ(post->step, 5);
  EXPECT_EQ(post->what, "allreduce of bucket 2 of 4 (1 MiB)");
  EXPECT_FALSE(DecodeStallPost("").has_value());  // withdrawn
  EXPECT_FALSE(DecodeStallPost("since=1 step=2 what=").has_value());
  EXPECT_FALSE(DecodeStallPost("step=2 since=1 what=x").has_value());
}

TEST(StallPosts, DescribeTheirActivity) {
  EXPECT_EQ(DescribeActivity({"allreduce", 1, 4, 1201704}),
            "allreduce of bucket 2 of 4 (1.15 MiB)");
  EXPECT_EQ(DescribeActivity({"broadcast", -1, 0, 26214400}), "broadcast (25 MiB)");
  EXPECT_EQ(DescribeActivity({}), "backend call");
}

TEST(StallSummaries, RankListsJoinRuns) {
  EXPECT_EQ(RankList({}), "");
  EXPECT_EQ(RankList({3}), "3");
  EXPECT_EQ(RankList({5, 0, 1, 2, 7, 3}), "0-3, 5, 7");
  EXPECT_EQ(RankList({0, 2, 4, 6, 8}, 3), "0, 2, 4, ... (5 ranks)");
}

TEST(StallSummaries, NameTheRanksThatNeverArrived) {
  const int64_t now = 1700000010000;
  const std::vector<std::string> board = {
      Post(now - 61000, 5, "allreduce of bucket 1 of 2 (1.15 MiB)"), "",
      Post(now - 60500, 5, "allreduce of bucket 1 of 2 (1.15 MiB)"),
      Post(now - 60000, 5, "allreduce of bucket 1 of 2 (1.15 MiB)")};
  EXPECT_EQ(DescribeStalls(board, now),
            "ranks 0, 2-3 wait in step 5, allreduce of bucket 1 of 2 (1.15 MiB), for 1 min 01 s; "
            "rank 1 never arrived (no blocked call reported: stopped, still computing, or "
            "elsewhere)");
}

TEST(StallSummaries, RanksInDifferentCallsAreGroupedApart) {
  const int64_t now = 1700000010000;
  const std::vector<std::string> board = {
      Post(now - 2000, 6, "allreduce of bucket 1 of 2 (1 MiB)"),
      Post(now - 3500, 5, "allreduce of bucket 2 of 2 (8 KiB)")};
  EXPECT_EQ(DescribeStalls(board, now),
            "rank 0 waits in step 6, allreduce of bucket 1 of 2 (1 MiB), for 2 s; rank 1 waits in "
            "step 5, allreduce of bucket 2 of 2 (8 KiB), for 3.5 s; every rank is blocked in a "
            "call, none is missing");
}

TEST(StallSummaries, NothingPostedIsNoStall) {
  EXPECT_EQ(DescribeStalls({"", "", ""}, 0), "");
  EXPECT_EQ(DescribeStalls({}, 0), "");
  EXPECT_EQ(DescribeStalls({"garbage", ""}, 0), "");
}

TEST(Json, StringsAreEscaped) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a \"q\" \\ b\n\t\x01"), "\"a \\\"q\\\" \\\\ b\\n\\t\\u0001\"");
  EXPECT_EQ(JsonString("\xc3\xa9"), "\"\xc3\xa9\"");  // UTF-8 as it is
}

TEST(Json, NumbersDropTrailingZerosAndNonFiniteValuesAreNull) {
  EXPECT_EQ(JsonNumber(0.5, 6), "0.5");
  EXPECT_EQ(JsonNumber(2.0, 3), "2");
  EXPECT_EQ(JsonNumber(-0.0001, 3), "0");
  EXPECT_EQ(JsonNumber(1234.5678, 1), "1234.6");
  EXPECT_EQ(JsonNumber(std::nan(""), 3), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity(), 3), "null");
}

TEST(Json, ObjectsKeepTheirKeysInOrder) {
  JsonObject inner;
  inner.Add("data", 0.25, 3);
  EXPECT_EQ(JsonObject()
                .Add("kind", "step")
                .Add("step", int64_t(20))
                .Add("loss", 0.764073, 6)
                .AddRaw("phase_ms", inner.str())
                .str(),
            R"({"kind": "step", "step": 20, "loss": 0.764073, "phase_ms": {"data": 0.25}})");
  EXPECT_EQ(JsonObject().str(), "{}");
}

}  // namespace
}  // namespace dpl::observability
