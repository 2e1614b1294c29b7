// What this rank's optimizer updates and scales, and what it shares with the ranks that update
// the rest: every parameter whole, alone; every parameter, with the gradients the machine's
// workers summed in the memory they share; or this rank's part of every bucket (the sharded
// optimizer). Made once from what the step's reduction leaves (SumsLeft); the host's optimizer
// runner reads it (optimizer_runner.hpp).
//
// Note [Sharded optimizer] (--shard-optimizer, ZeRO stage 1): each rank keeps the optimizer state
// of one part of every gradient bucket and updates only that part. The buckets are cut into parts
// (collectives/shard_layout.hpp); a rank's gradients are reduce-scattered so that it holds the
// averaged gradients of its part only, it runs the optimizer there, and the updated parameters
// are gathered back into every rank's model. The optimizer's arithmetic is element-wise and the
// same element for element, and the step's global quantities are shared as partial sums in a
// layout of their own (Note [Pieces]): the fp16 overflow flag of each part, the clipping norm's sum
// of squares of each piece. So a sharded run gives the bits of an unsharded one. Two reductions do
// it (the front chooses):
//  - through the machine's shared memory (the default on the CPU): one part per worker of the
//    machine, reduced in memory (Note [Reduction through shared memory]); with several machines
//    each machine holds every part once, as FSDP's hybrid sharding: the state is split among the
//    machine's workers and the machines do the same steps, so no parameter crosses machines;
//  - through the backend (--local-reduce backend): one part per rank, the buckets padded to equal
//    slots for reduce_scatter and an in-place allgather (dpl/backend.h).
//
// Note [Scaling shared gradients]: unsharded, the workers of a machine read every averaged
// gradient where they summed them, in the memory they share; so each worker unscales (fp16) and
// clips only the part it summed, the flags and the norm's piece sums are shared as the sharded
// optimizer shares them, and all wait until every part is clipped before the optimizer reads the
// gradients.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/gradient_reduction.hpp"
#include "training/placement.hpp"
#include "training/step_profile.hpp"

namespace dpl::training {

// A run of the optimizer's, and where its values and averaged gradients are in host memory.
struct HostRun {
  ParameterRun run;
  float* value = nullptr;
  float* gradient = nullptr;
};

class UpdateShare {
 public:
  virtual ~UpdateShare() = default;

  // The runs whose values this rank's optimizer updates.
  const std::vector<HostRun>& updated() const { return updated_; }
  // The runs whose gradients this rank unscales (fp16) and clips.
  const std::vector<HostRun>& scaled() const { return scaled_; }
  // The first piece of each parameter among every parameter's pieces, and the pieces in all
  // (Note [Pieces] in collectives/shard_layout.hpp).
  const std::vector<size_t>& first_piece() const { return first_piece_; }
  size_t pieces() const { return pieces_; }
  // Whether the optimizer's state is this rank's part only (for the log).
  virtual bool sharded() const { return false; }

  // The parts whose overflow flags are shared, and this rank's.
  virtual int parts() const { return 1; }
  virtual int part() const { return 0; }
  // Adds up the step's entries (each part's flag, then the piece sums) over the ranks that share
  // the parts; alone, they are what they are.
  virtual Status ShareEntries(std::vector<double>* /*entries*/) { return Status::Ok(); }
  // After this rank clipped its gradients: where others read them, all wait here.
  virtual Status AfterClip() { return Status::Ok(); }
  // Every rank's part of `states` state buffers to rank(s) that want them: `source(k, run)` is
  // this rank's state k of one of its runs, `destination(k, run)` where another rank's goes (NULL:
  // not wanted). Every rank calls it where the state is sharded; elsewhere nothing moves.
  virtual Status GatherState(
      size_t /*states*/, const std::function<const float*(size_t, const ParameterRun&)>& /*source*/,
      const std::function<float*(size_t, const ParameterRun&)>& /*destination*/) {
    return Status::Ok();
  }
  // The sharded optimizer's parts (NULL where nothing is sharded through the backend).
  virtual const ShardLayout* own_part_layout() const { return nullptr; }
  // This rank's averaged gradients of its part to rank `to`, and those of part `from` to
  // `destination(run)` (NULL: not wanted), for a copy of a part (Note [A copy of each part] in
  // part_copy.hpp). Every rank calls it where the state is sharded.
  virtual Status ExchangeGradients(
      int /*to*/, int /*from*/, const std::function<float*(const ParameterRun&)>& /*destination*/) {
    return Status::Error(DPL_ERR_UNSUPPORTED, "no part of the optimizer's state is sharded here");
  }
  // After the optimizer step: every rank's updated part into every rank's values.
  virtual Status PublishParts(StepProfile* /*profile*/) { return Status::Ok(); }

 protected:
  explicit UpdateShare(const std::vector<HostParameter>& parameters);
  // Every parameter whole, with its gradient at `gradient(p)`.
  void UpdateWholeParameters(const std::vector<HostParameter>& parameters,
                             const std::function<float*(uint32_t)>& gradient);

  std::vector<HostRun> updated_;
  std::vector<HostRun> scaled_;
  std::vector<size_t> first_piece_;
  size_t pieces_ = 0;
};

// The share of `parameters` that what `reduction` leaves calls for.
std::unique_ptr<UpdateShare> ShareOf(const std::vector<HostParameter>& parameters,
                                     GradientReduction& reduction);
// Every parameter whole, alone (no reduction, or an allreduce of whole buckets).
std::unique_ptr<UpdateShare> WholeParameters(const std::vector<HostParameter>& parameters);

}  // namespace dpl::training
