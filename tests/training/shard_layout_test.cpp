// How buckets are cut into parts (training/collectives/shard_layout.hpp): every element in exactly
// one part, parts as equal as pieces allow, never a piece split (Note [Pieces]).
#include <gtest/gtest.h>

#include <map>

#include "training/collectives/shard_layout.hpp"
#include "training/gradient_clipping.hpp"

namespace dpl::training {
namespace {

// Parameter sizes around the piece size, a tiny one, an empty one.
const std::vector<size_t> kSizes = {10000, 3, 0, 4096, 4097, 20000, 1};

TEST(ShardLayout, EveryElementInExactlyOnePartInFlatOrder) {
  const std::vector<Bucket> buckets = AssignBuckets(kSizes, 40000);
  for (const int parts : {1, 2, 3, 4, 7}) {
    const ShardLayout layout(kSizes, buckets, parts);
    std::map<std::pair<uint32_t, size_t>, int> owner;  // (parameter, element) -> times seen
    for (size_t b = 0; b < layout.buckets(); ++b) {
      size_t flat = 0;
      for (int part = 0; part < parts; ++part) {
        for (const ParameterRun& run : layout.RunsOf(b, part)) {
          EXPECT_EQ(run.flat, flat) << "parts " << parts << ", bucket " << b;
          flat += run.elements;
          // Note [Pieces]: a part starts and ends at a piece boundary or a parameter's end.
          EXPECT_EQ(run.offset % kPieceElements, 0u);
          const size_t end = run.offset + run.elements;
          EXPECT_TRUE(end % kPieceElements == 0 || end == kSizes[run.parameter]);
          for (size_t i = run.offset; i < end; ++i) ++owner[{run.parameter, i}];
        }
      }
      EXPECT_EQ(flat, layout.bucket(b).elements);
    }
    size_t total = 0;
    for (size_t n : kSizes) total += n;
    EXPECT_EQ(owner.size(), total) << "parts " << parts;
    for (const auto& [element, seen] : owner) EXPECT_EQ(seen, 1);
  }
}

TEST(ShardLayout, PartsAreAsEqualAsPiecesAllow) {
  const std::vector<size_t> sizes = {100000, 50000};
  const ShardLayout layout(sizes, AssignBuckets(sizes, 1 << 30), 3);
  ASSERT_EQ(layout.buckets(), 1u);
  const BucketLayout& bucket = layout.bucket(0);
  // A third is 50000: the next piece boundary of parameter 0 is 13 pieces in; two thirds fall on
  // parameter 1's start.
  EXPECT_EQ(bucket.bounds, (std::vector<size_t>{0, 13 * 4096, 100000, 150000}));
  EXPECT_EQ(bucket.largest_part, 13u * 4096);
  // Parameters in ascending order whatever the launch order (Note [Bucket layout]).
  EXPECT_EQ(bucket.parameters, (std::vector<uint32_t>{0, 1}));
  const ShardLayout halves(sizes, AssignBuckets(sizes, 1 << 30), 2);
  EXPECT_EQ(halves.bucket(0).bounds, (std::vector<size_t>{0, 19 * 4096, 150000}));
  const std::vector<ParameterRun> second = halves.PartOfEveryBucket(1);  // the end of 0, all of 1
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].parameter, 0u);
  EXPECT_EQ(second[0].offset, 19u * 4096);
  EXPECT_EQ(second[1].parameter, 1u);
  EXPECT_EQ(second[1].elements, 50000u);
}

TEST(ShardLayout, PiecesAndFingerprints) {
  const ShardLayout layout(kSizes, AssignBuckets(kSizes, 40000), 2);
  EXPECT_EQ(layout.first_piece(), (std::vector<size_t>{0, 3, 4, 4, 5, 7, 12}));
  EXPECT_EQ(layout.pieces(), 13u);
  EXPECT_EQ(layout.Fingerprint(),
            ShardLayout(kSizes, AssignBuckets(kSizes, 40000), 2).Fingerprint());
  EXPECT_NE(layout.Fingerprint(),
            ShardLayout(kSizes, AssignBuckets(kSizes, 40000), 3).Fingerprint());
  EXPECT_NE(layout.Fingerprint(),
            ShardLayout(kSizes, AssignBuckets(kSizes, 1 << 30), 2).Fingerprint());
}

// The norm from piece sums computed part by part is the norm of the whole gradients, bit for bit.
TEST(ShardLayout, PieceSumsOfThePartsGiveTheWholeNorm) {
  std::vector<std::vector<float>> gradients;
  std::vector<FloatSpan> spans;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    gradients.emplace_back(kSizes[p]);
    for (size_t i = 0; i < kSizes[p]; ++i) gradients[p][i] = float((i * 7919 + p) % 1013) / 97.0f;
  }
  for (auto& g : gradients) spans.push_back({g.data(), g.size()});
  const float whole = GradientNorm(spans);
  const ShardLayout layout(kSizes, AssignBuckets(kSizes, 40000), 3);
  std::vector<double> sums(layout.pieces(), 0.0);
  for (int part = 0; part < 3; ++part) {
    for (const ParameterRun& s : layout.PartOfEveryBucket(part)) {
      PieceSumsOfSquares(
          gradients[s.parameter].data() + s.offset, s.elements,
          sums.data() + layout.first_piece()[s.parameter] + s.offset / kPieceElements);
    }
  }
  EXPECT_EQ(NormOfPieces(sums, layout.first_piece()), whole);
}

}  // namespace
}  // namespace dpl::training
