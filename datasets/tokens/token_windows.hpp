// Note [Token windows]: a language model's samples are windows of block + 1 consecutive tokens of
// one flat token array: input = the first `block`, target = the next `block` (the same window
// shifted by one), both int64 of shape (block). Sample i of an epoch starts at
//     offset + i * block
// so the inputs of consecutive samples tile the array. For the train split the offset is drawn
// anew each epoch, from (seed, epoch) only (the SplitMix64 stream of Note [Augmentation
// generator] with sample index -1, a draw below `choices`): every rank, thread and resumed run
// sees the same grid, and no window boundary is fixed across epochs. The count is the same in
// every epoch: the windows that every offset can serve. With L tokens, full = (L - 1) / block
// windows fit at offset 0; the train split serves count = full - 1 of them (one window of room,
// so offsets 0 .. block - 1 all fit) when full >= 2, else the one window with the offsets the
// file's slack allows. The test and validation splits keep offset 0 and serve all `full`
// windows, so that every evaluation reads the same samples.
#pragma once

#include <cstdint>

#include "common/plugin.hpp"
#include "dpl/support/options.hpp"
#include "token_array.hpp"

namespace dpl::datasets::tokens {

inline constexpr int64_t kMaxBlock = int64_t{1} << 24;

// The `block=N` option, required: the tokens of a sample's input (1 <= N <= kMaxBlock).
int64_t ReadBlockOption(const support::KeyValueOptions& options);

// Where the windows of one split and epoch start (Note [Token windows]).
struct WindowGrid {
  int64_t count = 0;    // samples in every epoch
  int64_t choices = 1;  // offsets the train split draws from: 0 .. choices - 1
};

// The grid of `tokens` ids in windows of `block` + 1; `shifted` for the train split. Refuses an
// array shorter than one window, naming it (`name`).
WindowGrid GridOf(int64_t tokens, int64_t block, bool shifted, const std::string& name);

// The offset of `epoch` (0 when choices is 1).
int64_t EpochOffset(const WindowGrid& grid, uint64_t seed, int64_t epoch);

// An open split of token windows over `tokens` on `grid` (GridOf), in a vocabulary of `vocab`.
class TokenWindowDataset : public Dataset {
 public:
  TokenWindowDataset(TokenArray tokens, int64_t block, WindowGrid grid, int64_t vocab,
                     uint64_t seed, int num_threads);

  void Fill(const int64_t* indices, int64_t n, int64_t epoch, void* input, void* target) override;

  int64_t block() const { return block_; }
  const WindowGrid& grid() const { return grid_; }

 private:
  TokenArray tokens_;
  int64_t block_;
  WindowGrid grid_;
  uint64_t seed_;
  int num_threads_;
};

}  // namespace dpl::datasets::tokens
