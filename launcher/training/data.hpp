// The data a run reads, through a dataset plugin (its interface,
// plugin_host/dataset_interface.hpp): one open split (train, test or validation) of the data at
// --data-dir in the --data format, its size and the dtype and shape of a sample's input and
// target, and batches filled for lists of sample indices into host memory this side owns.
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

// The shape of one sample's tensor, its elements (1 for shape ()), and "int64 (256)" for
// messages.
std::vector<int64_t> ShapeOf(const dpl_sample_tensor& tensor);
int64_t ElementsOf(const dpl_sample_tensor& tensor);
std::string TensorText(const dpl_sample_tensor& tensor);

class DataSplit {
 public:
  // Opens `split` (a dpl_dataset_split, or DPL_DATASET_SPLIT_VALIDATION) of the configured data
  // (blocking: reading, checking, maybe decoding it all) and checks what the plugin describes.
  static Result<std::unique_ptr<DataSplit>> Open(const DatasetPlugin& plugin,
                                                 const TrainingConfig& config, int32_t split,
                                                 int threads);
  ~DataSplit();
  DataSplit(const DataSplit&) = delete;
  DataSplit& operator=(const DataSplit&) = delete;

  int64_t count() const { return info_.count; }
  // Integer targets are in [0, num_classes) (token data: the vocabulary); 0 for float targets.
  int64_t num_classes() const { return info_.num_classes; }
  // One sample's input and target, as Fill writes them (a batch adds a leading axis of n).
  const dpl_sample_tensor& input() const { return info_.input; }
  const dpl_sample_tensor& target() const { return info_.target; }
  // The input's shape and elements.
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t SampleElements() const { return ElementsOf(info_.input); }
  // Whether a sample is float32 with one int64 class label (what model ABI v1..v3 takes).
  bool IsClassification() const;
  // "the cifar10 data at /data" for messages; a split other than the training split is named
  // ("... (its validation split)"), as plugins may decide its shape apart (channels=auto).
  std::string Describe() const;

  // Writes samples `indices[0..n)` of `epoch` (n = input.shape[0] = target.shape[0]) to `input`
  // (input()'s dtype, shape (n, input().shape...)) and `target` (likewise for target()), host
  // memory, compact.
  Status Fill(const int64_t* indices, int64_t epoch, const DLTensor& input, const DLTensor& target);

 private:
  DataSplit(const DatasetPlugin& plugin, std::string path, int32_t split)
      : plugin_(plugin), path_(std::move(path)), split_(split) {}
  Status Call(const char* function, dpl_status status) const;
  Status CheckInfo() const;

  DatasetPlugin plugin_;
  std::string path_;
  int32_t split_;
  dpl_dataset* instance_ = nullptr;
  dpl_dataset_info info_{};
  std::vector<int64_t> sample_shape_;
};

// The data sets a run reads: the training set, the test set unless --no-eval, and the validation
// set when the run evaluates while training.
struct TrainingData {
  std::unique_ptr<DataSplit> train;
  std::unique_ptr<DataSplit> test;        // null with --no-eval
  std::unique_ptr<DataSplit> validation;  // null unless config.eval_every > 0
};

// Opens the training split, the test split when the run evaluates at the end, and the validation
// split when it evaluates while training.
Result<TrainingData> OpenTrainingData(const DatasetPlugin& plugin, const TrainingConfig& config,
                                      int threads);

// Checks that the data is float32 samples with one int64 label each, that the model takes
// samples of the data's shape (a leading 1 on either side does not matter: (28, 28) takes
// (1, 28, 28)) and has at least as many classes as the data has.
Status CheckDataFitsModel(const DataSplit& data, const std::string& model_name, uint32_t model_ndim,
                          const int64_t* model_shape, int64_t model_classes);

}  // namespace dpl::training
