// The class-and-options skeleton of a plugin whose stored samples go through the split's
// SampleTransform: the plugin says where sample `index` is stored and what its label is, the
// skeleton fills batches from that (FillTransformedBatch), and a plugin whose options are the
// transform's and `classes=N` takes its traits' ReadOptions from TransformAndClassesTraits. A
// sample is typed as image classification is: input float32 of the transform's shape, target one
// int64 label (shape ()).
#pragma once

#include <cstdint>

#include "common/batch_fill.hpp"
#include "common/labels.hpp"
#include "common/plugin.hpp"
#include "common/sample_transform.hpp"

namespace dpl::datasets {

class TransformedDataset : public Dataset {
 public:
  TransformedDataset(SampleTransform transform, int64_t count, int64_t num_classes, int num_threads)
      : Dataset(SampleTensor::Float32(transform.sample_shape()), SampleTensor::Int64({}), count,
                num_classes),
        transform_(std::move(transform)),
        num_threads_(num_threads) {}

  void Fill(const int64_t* indices, int64_t n, int64_t epoch, void* input, void* target) final {
    FillSamples(indices, n, epoch, static_cast<float*>(input), static_cast<int64_t*>(target));
  }

 protected:
  // Writes samples indices[0..n) of `epoch` to input[i * SampleElements() ..] and their labels to
  // labels[i].
  virtual void FillSamples(const int64_t* indices, int64_t n, int64_t epoch, float* input,
                           int64_t* labels) {
    BeforeFill();
    FillTransformedBatch(
        transform_, num_threads_, indices, n, epoch, input, labels,
        [&](int64_t index) { return SampleAt(index); },
        [&](int64_t index) { return LabelAt(index); });
  }

  // Where stored sample `index` starts (what SampleTransform::Apply reads), and its label. Both
  // are called from several threads at once.
  virtual const void* SampleAt(int64_t index) const = 0;
  virtual int64_t LabelAt(int64_t index) const = 0;
  // Before each fill; a plugin that memory-maps its files checks here that none has changed.
  virtual void BeforeFill() const {}

  const SampleTransform& transform() const { return transform_; }
  int num_threads() const { return num_threads_; }

 private:
  SampleTransform transform_;
  int num_threads_;
};

// The options part of a plugin's Traits (plugin.hpp) when they are the transform's and
// `classes=N`: `struct Traits : TransformAndClassesTraits { kName, Open }`.
struct TransformAndClassesTraits {
  using Options = TransformAndClassesOptions;
  static Options ReadOptions(const support::KeyValueOptions& options) {
    return ReadTransformAndClassesOptions(options);
  }
};

}  // namespace dpl::datasets
