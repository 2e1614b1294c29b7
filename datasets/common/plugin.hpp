// The C++ side of dataset ABI v2 (dpl/dataset_v2.h) that the in-tree plugins share. A plugin
// writes a Traits struct:
//     struct Traits {
//       static constexpr char kName[] = "idx";
//       struct Options {...};
//       static Options ReadOptions(const support::KeyValueOptions& options);  // every key
//       static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options);
//     };
// and exports PluginTable<Traits>(version, description), a dpl_dataset_plugin_v2. The table checks
// the config, refuses unknown options before Open touches a file, checks every fill's tensors and
// indices, and turns every exception into a status and a message starting with
// `dataset "<name>": `.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpl/dataset.h"
#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"

namespace dpl::datasets {

// The host's log callback, with the plugin's name in front of every line.
class Logger {
 public:
  Logger(dpl_log_fn function, void* context, std::string prefix)
      : function_(function), context_(context), prefix_(std::move(prefix)) {}
  void Info(const std::string& message) const { Write(DPL_LOG_INFO, message); }
  void Warning(const std::string& message) const { Write(DPL_LOG_WARNING, message); }

 private:
  void Write(dpl_log_level level, const std::string& message) const {
    if (function_ != nullptr) function_(context_, level, (prefix_ + ": " + message).c_str());
  }
  dpl_log_fn function_;
  void* context_;
  std::string prefix_;
};

// What create hands a plugin's Open, read from the checked config.
struct OpenRequest {
  std::string path;                         // --data-dir
  std::string cache_dir;                    // Note [Data cache]; "" = none
  int32_t split = DPL_DATASET_SPLIT_TRAIN;  // a dpl_dataset_split or DPL_DATASET_SPLIT_VALIDATION
  int num_threads = 1;
  uint64_t seed = 0;
  Logger log{nullptr, nullptr, ""};

  bool train() const { return split == DPL_DATASET_SPLIT_TRAIN; }
  // The part of the data that serves the split: "train", or "test" for the test split and for the
  // validation split of data without a validation part of its own (dpl/dataset_v2.h).
  const char* split_name() const { return train() ? "train" : "test"; }
};

// One tensor of a sample as `fill` writes it: its element type and shape (() for a scalar).
struct SampleTensor {
  DLDataType dtype{kDLFloat, 32, 1};
  std::vector<int64_t> shape;

  static SampleTensor Float32(std::vector<int64_t> shape) {
    return {{kDLFloat, 32, 1}, std::move(shape)};
  }
  static SampleTensor Int64(std::vector<int64_t> shape) {
    return {{kDLInt, 64, 1}, std::move(shape)};
  }
  int64_t elements() const;
  size_t bytes() const;  // of one sample
};

// An open split. Its input and target, count and classes are fixed when it is made.
class Dataset {
 public:
  Dataset(SampleTensor input, SampleTensor target, int64_t count, int64_t num_classes)
      : input_(std::move(input)),
        target_(std::move(target)),
        count_(count),
        num_classes_(num_classes) {}
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const SampleTensor& input() const { return input_; }
  const SampleTensor& target() const { return target_; }
  int64_t count() const { return count_; }
  int64_t num_classes() const { return num_classes_; }
  // The input's shape and elements.
  const std::vector<int64_t>& sample_shape() const { return input_.shape; }
  int64_t SampleElements() const { return input_.elements(); }

  // Writes samples indices[0..n) (each already checked to be below count()) of `epoch` to the
  // rows of `input` (input().bytes() each, of input().dtype) and of `target` (likewise).
  virtual void Fill(const int64_t* indices, int64_t n, int64_t epoch, void* input,
                    void* target) = 0;

 private:
  SampleTensor input_;
  SampleTensor target_;
  int64_t count_;
  int64_t num_classes_;
};

namespace detail {

std::string Prefix(const char* name);
// Checks the config (size, version, path, split, threads) and reads it into a request.
OpenRequest ReadConfig(const dpl_dataset_config_v2* config, const char* name);
// Takes ownership of `dataset` as the ABI's opaque instance.
dpl_dataset* Wrap(std::unique_ptr<Dataset> dataset);
void Destroy(dpl_dataset* dataset);
dpl_status Describe(const char* name, dpl_dataset* dataset, dpl_dataset_info_v2* info);
dpl_status Fill(const char* name, dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                DLTensor* input, DLTensor* target);

template <typename Traits>
struct Functions {
  static dpl_status Create(const dpl_dataset_config_v2* config, dpl_dataset** out) {
    return support::Guarded(Prefix(Traits::kName), [&] {
      support::Require(out != nullptr, "out is NULL");
      *out = nullptr;
      const OpenRequest request = ReadConfig(config, Traits::kName);
      const support::KeyValueOptions options(config->options, "--data-options");
      const typename Traits::Options read = Traits::ReadOptions(options);
      options.CheckAllKnown();
      *out = Wrap(Traits::Open(request, read));
    });
  }
  static dpl_status Describe(dpl_dataset* dataset, dpl_dataset_info_v2* info) {
    return detail::Describe(Traits::kName, dataset, info);
  }
  static dpl_status Fill(dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                         DLTensor* input, DLTensor* target) {
    return detail::Fill(Traits::kName, dataset, indices, epoch, input, target);
  }
};

}  // namespace detail

template <typename Traits>
constexpr dpl_dataset_plugin_v2 PluginTable(const char* version, const char* description) {
  return dpl_dataset_plugin_v2{
      {uint32_t(sizeof(dpl_dataset_plugin_v2)), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_DATASET,
       DPL_DATASET_ABI_VERSION_2, Traits::kName, version, description},
      &detail::Functions<Traits>::Create,
      &detail::Destroy,
      &detail::Functions<Traits>::Describe,
      &detail::Functions<Traits>::Fill,
      &support::LastError};
}

}  // namespace dpl::datasets
