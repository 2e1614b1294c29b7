// The npy dataset plugin: samples in x.npy and labels in y.npy (x_test.npy and y_test.npy for the
// test split), as numpy.save writes them. x is memory-mapped, not copied: its pages are shared
// with every process that reads the file, and only the samples a batch needs are touched.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "common/labels.hpp"
#include "common/npy_format.hpp"
#include "common/plugin.hpp"
#include "common/sample_transform.hpp"
#include "common/transformed_dataset.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::OpenRequest;
using dpl::datasets::SourceType;
using dpl::datasets::npy::AcceptedDtype;
using dpl::datasets::npy::NpyArray;
using dpl::support::PluginError;

PluginError Invalid(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

const std::vector<AcceptedDtype> kSampleDtypes = {
    {"|u1", "uint8", 1}, {"<f4", "float32", 4}, {"<i8", "int64", 8}};
const std::vector<AcceptedDtype> kLabelDtypes = {
    {"<i8", "int64", 8}, {"<i4", "int32", 4}, {"|u1", "uint8", 1}};

SourceType SampleSourceType(size_t item_size) {
  return item_size == 1   ? SourceType::kUInt8
         : item_size == 4 ? SourceType::kFloat32
                          : SourceType::kInt64;
}

std::string FindFile(const OpenRequest& request, const std::string& name) {
  const std::string path = request.path + "/" + name;
  if (dpl::datasets::IsRegularFile(path)) return path;
  throw PluginError(DPL_ERR_NOT_FOUND, "missing data file: " + path +
                                           "; pass --data-dir with the folder holding x.npy "
                                           "and y.npy (x_test.npy and y_test.npy for the test "
                                           "split)");
}

std::vector<int64_t> ReadLabels(const NpyArray& y) {
  std::vector<int64_t> labels(size_t(y.shape[0]));
  for (size_t i = 0; i < labels.size(); ++i) {
    const uint8_t* item = y.data() + i * y.item_size;
    if (y.item_size == 1) {
      labels[i] = item[0];
    } else if (y.item_size == 4) {
      int32_t value;
      std::memcpy(&value, item, 4);
      labels[i] = value;
    } else {
      std::memcpy(&labels[i], item, 8);
    }
  }
  return labels;
}

class NpyDataset : public dpl::datasets::TransformedDataset {
 public:
  NpyDataset(NpyArray x, std::vector<int64_t> labels, int64_t classes,
             dpl::datasets::SampleTransform transform, int num_threads)
      : TransformedDataset(std::move(transform), x.shape[0], classes, num_threads),
        x_(std::move(x)),
        labels_(std::move(labels)),
        sample_bytes_(size_t(SampleElements()) * x_.item_size) {}

 private:
  void BeforeFill() const override { x_.file->CheckUnchanged(); }
  const void* SampleAt(int64_t index) const override {
    return x_.data() + size_t(index) * sample_bytes_;
  }
  int64_t LabelAt(int64_t index) const override { return labels_[size_t(index)]; }

  NpyArray x_;
  std::vector<int64_t> labels_;
  size_t sample_bytes_;
};

struct NpyTraits : dpl::datasets::TransformAndClassesTraits {
  static constexpr char kName[] = "npy";

  // The test files against the training files the model was built for: samples of another shape,
  // or a label beyond the training labels' classes, are said of the test files (the host would
  // otherwise find the model unfit for the data, naming the model). With classes= both splits
  // hold to the count given.
  static void CheckTestAgainstTraining(const OpenRequest& request, const NpyArray& x,
                                       int64_t classes, const std::string& x_path,
                                       const std::string& y_path, int64_t declared) {
    // Without the training files (a test split of its own) there is nothing to check against.
    const std::string train_x_path = request.path + "/x.npy";
    const std::string train_y_path = request.path + "/y.npy";
    if (!dpl::datasets::IsRegularFile(train_x_path) ||
        !dpl::datasets::IsRegularFile(train_y_path)) {
      return;
    }
    const NpyArray train_x = dpl::datasets::npy::OpenNpy(train_x_path, kSampleDtypes, "samples",
                                                         "x.astype(numpy.float32)");
    const std::vector<int64_t> sample(x.shape.begin() + 1, x.shape.end());
    // Empty where x.npy has no sample axes: the training split's own open refuses that.
    const std::vector<int64_t> training_sample =
        train_x.shape.size() >= 2
            ? std::vector<int64_t>(train_x.shape.begin() + 1, train_x.shape.end())
            : std::vector<int64_t>();
    if (!training_sample.empty() && training_sample != sample) {
      throw Invalid(x_path + ": samples of shape " + dpl::datasets::ShapeText(sample) + ", but " +
                    train_x_path + "'s, which the model is built for, are " +
                    dpl::datasets::ShapeText(training_sample));
    }
    if (declared != 0) return;
    const NpyArray train_y =
        dpl::datasets::npy::OpenNpy(train_y_path, kLabelDtypes, "labels", "y.astype(numpy.int64)");
    if (train_y.shape.size() != 1) return;  // the training split's own open says what is wrong
    const int64_t train_classes = dpl::datasets::CountClasses(ReadLabels(train_y), 0, train_y_path);
    if (classes > train_classes) {
      throw Invalid(y_path + ": label " + std::to_string(classes - 1) + " is not below the " +
                    std::to_string(train_classes) + " classes of " + train_y_path +
                    ", which the model is built for (classes=N counts both splits' labels)");
    }
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    const std::string x_path = FindFile(request, request.train() ? "x.npy" : "x_test.npy");
    const std::string y_path = FindFile(request, request.train() ? "y.npy" : "y_test.npy");
    NpyArray x =
        dpl::datasets::npy::OpenNpy(x_path, kSampleDtypes, "samples", "x.astype(numpy.float32)");
    const NpyArray y =
        dpl::datasets::npy::OpenNpy(y_path, kLabelDtypes, "labels", "y.astype(numpy.int64)");
    const std::string x_shape = dpl::datasets::ShapeText(x.shape);
    if (x.shape.size() < 2) {
      throw Invalid(x_path + ": shape " + x_shape +
                    " has no sample axes; x must have shape (N, ...) with at least 2 axes "
                    "(x.reshape(-1, 1) for samples of one value)");
    }
    if (x.shape.size() - 1 > DPL_DATASET_MAX_SAMPLE_DIMS) {
      throw Invalid(x_path + ": samples of shape " + x_shape + " have " +
                    std::to_string(x.shape.size() - 1) + " axes, more than the " +
                    std::to_string(DPL_DATASET_MAX_SAMPLE_DIMS) + " a dataset sample may have");
    }
    if (x.shape[0] == 0) throw Invalid(x_path + ": holds no samples (shape " + x_shape + ")");
    for (size_t d = 1; d < x.shape.size(); ++d) {
      if (x.shape[d] == 0) throw Invalid(x_path + ": shape " + x_shape + " has an empty axis");
    }
    if (y.shape.size() != 1) {
      throw Invalid(y_path + ": labels have shape " + dpl::datasets::ShapeText(y.shape) +
                    "; y must hold one label per sample, shape (N,) (y.reshape(-1))");
    }
    if (y.shape[0] != x.shape[0]) {
      throw Invalid("sample count mismatch: " + x_path + " holds " + std::to_string(x.shape[0]) +
                    " samples but " + y_path + " holds " + std::to_string(y.shape[0]) + " labels");
    }
    std::vector<int64_t> labels = ReadLabels(y);
    const int64_t classes = dpl::datasets::CountClasses(labels, options.classes, y_path);
    if (!request.train()) {
      CheckTestAgainstTraining(request, x, classes, x_path, y_path, options.classes);
    }
    dpl::datasets::SampleTransform transform(
        options.transform, {{0.0f}, {1.0f}},
        std::vector<int64_t>(x.shape.begin() + 1, x.shape.end()), SampleSourceType(x.item_size),
        request.train(), request.seed, x_path);
    return std::make_unique<NpyDataset>(std::move(x), std::move(labels), classes,
                                        std::move(transform), request.num_threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 npy_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 npy_dataset_plugin = dpl::datasets::PluginTable<NpyTraits>(
    "1.0.0", "NumPy .npy arrays: x.npy samples (uint8, float32, int64), y.npy labels");
