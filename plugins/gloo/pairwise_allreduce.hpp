// The gloo plugin's own allreduce: recursive halving and doubling as pairwise exchanges over a
// mesh of SYNCHRONOUS gloo pairs, on the caller's memory.
//
// Note [Synchronous pairs]: gloo's TCP pairs normally run asynchronously: gloo's event-loop thread
// reads every message and wakes the waiting caller, a hand-off per message that made gloo's
// allreduce cost several times the CPU of dpl's tcp backend on a small VM (docs/bandwidth.md,
// "Third run"). In synchronous mode (Pair::setSync) the caller reads and writes with blocking
// sockets itself, but gloo's own algorithms then deadlock: both ends of a pair write a large
// message at once and neither reads. So each step here is an exchange in which the LOWER rank
// writes first and then reads, the higher one reads first and then writes: a write only ever waits
// on a reader that is reading, or finishing an earlier step (whose exchanges complete first, by
// induction over steps), whatever the socket buffer sizes. Every block is reduced once, by its
// owner, so all ranks get the same bits. Timeouts and dead peers surface from the sockets, which
// carry the job timeout.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/buffer.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "dpl/backend_v1.h"
#include "dpl/support/tensor.hpp"

namespace dpl::gloo_backend {

class PairwiseAllreduce {
 public:
  // An allreduce of `count` elements of `type` with `op` over `context`'s synchronous pairs.
  // Takes its gloo slots now, so every rank must build its instances in the same order.
  PairwiseAllreduce(std::shared_ptr<gloo::Context> context, size_t write_ahead_bytes, size_t count,
                    support::ElementType type, size_t element_size, dpl_reduce_op op);

  // Makes the pairs of a freshly connected mesh synchronous and primes their send buffers (Note
  // [Priming send buffers]). Returns how many bytes a write may run ahead of the peer's reads
  // (Note [Writing ahead]); 0 means always take turns.
  static size_t PrepareMesh(gloo::Context& context);

  // Reduces `data` (count elements) in place on every rank. Throws gloo's exceptions.
  void Run(char* data);
  // Whether ReduceScatter can run: a power-of-two world (no rank folds) and a count it divides.
  bool ScattersEvenly() const;
  // Only the halving steps of Run: afterwards rank r's slice r of `data` (count / world_size
  // elements, at r * count / world_size) holds the reduction, bit for bit what Run leaves there;
  // the rest of `data` is scratch. Needs ScattersEvenly().
  void ReduceScatter(char* data);

  // Memory this instance holds besides the caller's tensor.
  size_t scratch_bytes() const { return scratch_.size() + fold_scratch_.size(); }

 private:
  // Note [Folding to a power of two]: halving and doubling need a power-of-two number of ranks.
  // With n = p + e ranks (p the largest power of two <= n), the first 2e ranks pair up: each odd
  // one writes its whole tensor to the even one below it (a fold, in one direction), sits out the
  // halving and doubling among the p remaining ranks, then reads the result back (an unfold). The
  // remaining ranks take virtual ranks 0..p-1 in order. Folds write in one direction only and
  // their pairs are disjoint, so Note [Synchronous pairs] still holds step by step.
  struct Schedule {
    int fold_partner = -1;      // the other rank of this rank's fold, or -1
    bool folded = false;        // this rank hands its data to fold_partner and waits
    int virtual_rank = 0;       // among the power-of-two ranks (unless folded)
    int virtual_size = 1;       // that power of two
    std::vector<int> partners;  // real ranks of the halving steps, in order (empty if folded)
  };
  static Schedule ScheduleOf(int rank, int size);

  struct Range {
    size_t begin;  // in elements
    size_t size;
  };
  struct Partner {
    int rank = 0;
    std::unique_ptr<gloo::transport::Buffer> scratch_in;  // reduce-scatter: the partner's half
    std::unique_ptr<gloo::transport::Buffer> reduce_out;  // -> the partner's scratch_in
    std::unique_ptr<gloo::transport::Buffer> gather_out;  // -> the partner's gather_in
    std::unique_ptr<gloo::transport::Buffer> gather_in;   // allgather: into our data
  };

  void Bind(char* data);
  // The halving steps; returns the range each step kept (the first is the whole tensor).
  std::vector<Range> Halve(char* data);
  void Exchange(int partner, gloo::transport::Buffer* out, Range out_range, size_t remote_offset,
                gloo::transport::Buffer* in, size_t in_elements);

  std::shared_ptr<gloo::Context> context_;  // shared: its pairs must outlive our buffers
  const size_t write_ahead_bytes_;
  const size_t count_;
  const support::ElementType type_;
  const size_t element_size_;
  const dpl_reduce_op op_;
  std::vector<char> scratch_;
  const int reduce_slot_;
  const int gather_slot_;
  const int fold_slot_;
  const Schedule schedule_;
  struct {
    std::unique_ptr<gloo::transport::Buffer> out;  // folded: our data; partner: the result
    std::unique_ptr<gloo::transport::Buffer> in;   // folded: the result; partner: fold_scratch_
  } fold_;
  std::vector<char> fold_scratch_;
  std::vector<Partner> partners_;
  char* bound_ = nullptr;
};

}  // namespace dpl::gloo_backend
