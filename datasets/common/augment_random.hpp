// Note [Augmentation generator]: random augmentation draws from a generator that depends on
// (seed, epoch, sample index) only (dpl/dataset_v1.h), so a sample gets the same crop and flip
// whichever rank, batch position or thread reads it, and a resumed run repeats a straight one.
// It is SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// 2014): with Step(s) = the output of one SplitMix64 step from state s,
//     state = Step(Step(Step(seed) ^ epoch) ^ index)        (epoch and index as uint64)
// and the draws are the SplitMix64 stream from that state. A draw below n is draw % n (bias
// below n / 2^64). A sample always takes three draws, in this order: the crop's top offset in
// [0, 2P], its left offset in [0, 2P] (with P = 0 both are 0), and the flip, draw >> 63 (1 =
// flipped). Turning cropping on or off therefore leaves every flip as it was.
#pragma once

#include <cstdint>

namespace dpl::datasets {

// One SplitMix64 step: advances `state` and returns its output.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class AugmentRandom {
 public:
  AugmentRandom(uint64_t seed, int64_t epoch, int64_t index)
      : state_(Step(Step(Step(seed) ^ uint64_t(epoch)) ^ uint64_t(index))) {}

  uint64_t Next() { return SplitMix64(state_); }
  // A draw in [0, n); n >= 1.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  static uint64_t Step(uint64_t state) { return SplitMix64(state); }
  uint64_t state_;
};

// The augmentation of one sample (Note [Augmentation generator]).
struct SampleAugmentation {
  int64_t top = 0;   // crop offset into the padded image, in [0, 2P]
  int64_t left = 0;  // likewise
  bool flip = false;
};

inline SampleAugmentation DrawAugmentation(uint64_t seed, int64_t epoch, int64_t index,
                                           int64_t crop_padding) {
  AugmentRandom random(seed, epoch, index);
  SampleAugmentation augmentation;
  augmentation.top = int64_t(random.Below(uint64_t(2 * crop_padding + 1)));
  augmentation.left = int64_t(random.Below(uint64_t(2 * crop_padding + 1)));
  augmentation.flip = (random.Next() >> 63) != 0;
  return augmentation;
}

}  // namespace dpl::datasets
