// The C++ side of dataset ABI v1 (dpl/dataset_v1.h) that the in-tree plugins share. A plugin
// writes a Traits struct:
//     struct Traits {
//       static constexpr char kName[] = "idx";
//       struct Options {...};
//       static Options ReadOptions(const support::KeyValueOptions& options);  // every key
//       static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options);
//     };
// and exports PluginTable<Traits>(version, description). The table checks the config, refuses
// unknown options before Open touches a file, checks every fill's tensors and indices, and turns
// every exception into a status and a message starting with `dataset "<name>": `.
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
  std::string path;       // --data-dir
  std::string cache_dir;  // Note [Data cache]; "" = none
  dpl_dataset_split split = DPL_DATASET_SPLIT_TRAIN;
  int num_threads = 1;
  uint64_t seed = 0;
  Logger log{nullptr, nullptr, ""};

  bool train() const { return split == DPL_DATASET_SPLIT_TRAIN; }
  const char* split_name() const { return train() ? "train" : "test"; }
};

// An open split. The shape, count and classes are fixed when it is made.
class Dataset {
 public:
  Dataset(std::vector<int64_t> sample_shape, int64_t count, int64_t num_classes)
      : sample_shape_(std::move(sample_shape)), count_(count), num_classes_(num_classes) {}
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t count() const { return count_; }
  int64_t num_classes() const { return num_classes_; }
  int64_t SampleElements() const;

  // Writes samples indices[0..n) (each already checked to be below count()) of `epoch` to
  // input[i * SampleElements() ..] and their labels to labels[i].
  virtual void Fill(const int64_t* indices, int64_t n, int64_t epoch, float* input,
                    int64_t* labels) = 0;

 private:
  std::vector<int64_t> sample_shape_;
  int64_t count_;
  int64_t num_classes_;
};

namespace detail {

std::string Prefix(const char* name);
// Checks the config (size, version, path, split, threads) and reads it into a request.
OpenRequest ReadConfig(const dpl_dataset_config_v1* config, const char* name);
// Takes ownership of `dataset` as the ABI's opaque instance.
dpl_dataset* Wrap(std::unique_ptr<Dataset> dataset);
void Destroy(dpl_dataset* dataset);
dpl_status Describe(const char* name, dpl_dataset* dataset, dpl_dataset_info_v1* info);
dpl_status Fill(const char* name, dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                DLTensor* input, DLTensor* labels);

template <typename Traits>
struct Functions {
  static dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
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
  static dpl_status Describe(dpl_dataset* dataset, dpl_dataset_info_v1* info) {
    return detail::Describe(Traits::kName, dataset, info);
  }
  static dpl_status Fill(dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                         DLTensor* input, DLTensor* labels) {
    return detail::Fill(Traits::kName, dataset, indices, epoch, input, labels);
  }
};

}  // namespace detail

template <typename Traits>
constexpr dpl_dataset_plugin_v1 PluginTable(const char* version, const char* description) {
  return dpl_dataset_plugin_v1{
      {uint32_t(sizeof(dpl_dataset_plugin_v1)), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_DATASET,
       DPL_DATASET_ABI_VERSION_1, Traits::kName, version, description},
      &detail::Functions<Traits>::Create,
      &detail::Destroy,
      &detail::Functions<Traits>::Describe,
      &detail::Functions<Traits>::Fill,
      &support::LastError};
}

}  // namespace dpl::datasets
