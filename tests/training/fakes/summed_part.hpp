// A gradient reduction whose sums are already made when the step asks (tests of what follows the
// reduce-scatter): its buckets are ready at once, and this rank holds part `part` of `layout`'s
// buckets in `gradients` (the part's averaged gradients, bucket after bucket).
#pragma once

#include <future>
#include <utility>
#include <vector>

#include "training/collectives/gradient_reduction.hpp"

namespace dpl::training::fakes {

class SummedPart : public GradientReduction {
 public:
  SummedPart(ShardLayout layout, int part, std::vector<float>* gradients)
      : layout_(std::move(layout)), part_(part), gradients_(gradients) {}
  std::future<Status> Launch(size_t, float) override {
    std::promise<Status> done;
    done.set_value(Status::Ok());
    return done.get_future();
  }
  Status Finish() override { return Status::Ok(); }
  SumsLeft sums_left() const override { return SumsLeft::kOwnPartOnly; }
  const ShardLayout& layout() const override { return layout_; }
  int part() const override { return part_; }
  float* GradientOf(size_t bucket, const ParameterRun& run) override {
    return gradients_->data() + (run.flat - layout_.bucket(bucket).bounds[size_t(part_)]);
  }
  Status Barrier(const char*) override { return Status::Ok(); }

 protected:
  ShardLayout layout_;
  int part_;
  std::vector<float>* gradients_;
};

}  // namespace dpl::training::fakes
