#include "training/gradient_sync.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(Compression, HalfRoundTrips) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f}) {
    const float back = HalfToFloat(FloatToHalf(v));
    EXPECT_NEAR(back, v, std::fabs(v) * 1e-3f + 1e-7f) << v;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);  // overflow becomes infinity
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
}

TEST(Compression, Bfloat16RoundTrips) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(Bfloat16ToFloat(0x3F80), 1.0f);
  for (float v : {3.14159f, -1e30f, 1e-30f}) {
    EXPECT_NEAR(Bfloat16ToFloat(FloatToBfloat16(v)), v, std::fabs(v) * 4e-3f) << v;
  }
}

TEST(Compression, ParsesNames) {
  EXPECT_EQ(*ParseGradientCompression("fp16"), GradientCompression::kFp16);
  EXPECT_EQ(*ParseGradientCompression("bf16"), GradientCompression::kBf16);
  EXPECT_EQ(*ParseGradientCompression("none"), GradientCompression::kNone);
  EXPECT_EQ(ParseGradientCompression("int8").status().message(),
            "unknown --grad-compression 'int8'; use none, fp16 or bf16");
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

}  // namespace
}  // namespace dpl::training
