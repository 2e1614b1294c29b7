#include "token_windows.hpp"

#include <algorithm>

#include "common/augment_random.hpp"
#include "common/parallel.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::tokens {

int64_t ReadBlockOption(const support::KeyValueOptions& options) {
  support::Require(options.Has("block"),
                   "option \"block\" is required: the tokens of one sample's input, as the "
                   "model's context (e.g. --data-options block=256)");
  const int64_t block = options.GetInt("block", 0);
  support::Require(block >= 1 && block <= kMaxBlock, "option \"block\" must be in 1.." +
                                                         std::to_string(kMaxBlock) + ", got " +
                                                         std::to_string(block));
  return block;
}

WindowGrid GridOf(int64_t tokens, int64_t block, bool shifted, const std::string& name) {
  if (tokens < block + 1) {
    throw support::PluginError(
        DPL_ERR_INVALID_ARGUMENT,
        name + ": " + std::to_string(tokens) +
            " tokens, shorter than one sample (block=" + std::to_string(block) + " takes " +
            std::to_string(block + 1) + " tokens); use a smaller block or more data");
  }
  const int64_t full = (tokens - 1) / block;
  WindowGrid grid;
  if (!shifted) {
    grid.count = full;
    return grid;
  }
  grid.count = full >= 2 ? full - 1 : 1;
  const int64_t slack = tokens - 1 - grid.count * block;  // the largest offset that fits
  grid.choices = std::min(block, slack + 1);
  return grid;
}

int64_t EpochOffset(const WindowGrid& grid, uint64_t seed, int64_t epoch) {
  if (grid.choices <= 1) return 0;
  return int64_t(AugmentRandom(seed, epoch, -1).Below(uint64_t(grid.choices)));
}

TokenWindowDataset::TokenWindowDataset(TokenArray tokens, int64_t block, WindowGrid grid,
                                       int64_t vocab, uint64_t seed, int num_threads)
    : Dataset(SampleTensor::Int64({block}), SampleTensor::Int64({block}), grid.count, vocab),
      tokens_(std::move(tokens)),
      block_(block),
      grid_(grid),
      seed_(seed),
      num_threads_(num_threads) {}

void TokenWindowDataset::Fill(const int64_t* indices, int64_t n, int64_t epoch, void* input,
                              void* target) {
  tokens_.file().CheckUnchanged();
  const int64_t offset = EpochOffset(grid_, seed_, epoch);
  auto* inputs = static_cast<int64_t*>(input);
  auto* targets = static_cast<int64_t*>(target);
  ParallelFor(ThreadsForElements(2 * n * block_, num_threads_), n, [&](int64_t i) {
    const int64_t start = offset + indices[i] * block_;
    tokens_.Read(start, block_, inputs + i * block_);
    tokens_.Read(start + 1, block_, targets + i * block_);
  });
}

}  // namespace dpl::datasets::tokens
