// The data a run reads, through a dataset plugin (its interface,
// plugin_host/dataset_interface.hpp): one open split (train or test) of the data at --data-dir in
// the --data format, its size and the shape of a sample, and batches filled for lists of sample
// indices into host memory this side owns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "plugin_host/dataset_interface.hpp"
#include "training/config.hpp"

namespace dpl::training {

// A loaded dataset plugin.
struct DatasetPlugin {
  std::shared_ptr<const plugin_host::DatasetInterface> table;
  PluginLabel label;
};

class DataSplit {
 public:
  // Opens `split` of the configured data (blocking: reading, checking, maybe decoding it all).
  static Result<std::unique_ptr<DataSplit>> Open(const DatasetPlugin& plugin,
                                                 const TrainingConfig& config,
                                                 dpl_dataset_split split, int threads);
  ~DataSplit();
  DataSplit(const DataSplit&) = delete;
  DataSplit& operator=(const DataSplit&) = delete;

  int64_t count() const { return info_.count; }
  int64_t num_classes() const { return info_.num_classes; }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t SampleElements() const;
  // "the cifar10 data at /data" for messages.
  std::string Describe() const;

  // Writes samples `indices[0..n)` of `epoch` (n = input.shape[0]) and their labels.
  Status Fill(const int64_t* indices, int64_t epoch, const DLTensor& input, const DLTensor& labels);

 private:
  DataSplit(const DatasetPlugin& plugin, std::string path)
      : plugin_(plugin), path_(std::move(path)) {}
  Status Call(const char* function, dpl_status status) const;

  DatasetPlugin plugin_;
  std::string path_;
  dpl_dataset* instance_ = nullptr;
  dpl_dataset_info info_{};
  std::vector<int64_t> sample_shape_;
};

// The data sets a run reads: the training set and, unless --no-eval, the test set.
struct TrainingData {
  std::unique_ptr<DataSplit> train;
  std::unique_ptr<DataSplit> test;        // null with --no-eval
  std::unique_ptr<DataSplit> validation;  // null unless config.eval_every > 0
};

// Opens the training split and, when the run evaluates, the test split.
Result<TrainingData> OpenTrainingData(const DatasetPlugin& plugin, const TrainingConfig& config,
                                      int threads);

// Checks that the model takes samples of the data's shape (a leading 1 on either side does not
// matter: (28, 28) takes (1, 28, 28)) and has at least as many classes as the data has.
Status CheckDataFitsModel(const DataSplit& data, const std::string& model_name, uint32_t model_ndim,
                          const int64_t* model_shape, int64_t model_classes);

}  // namespace dpl::training
