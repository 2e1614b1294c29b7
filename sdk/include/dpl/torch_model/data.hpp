// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the data a model is
// built for. Model ABI v3 tells create one sample's shape and the number of classes of the data,
// v4 also the dtypes and shapes of a sample's input and target (typed samples). A model declares
// what it takes (exactly one shape, or any, each with a default for hosts that do not say, and
// the kind of samples), and create refuses data it cannot take, naming both.
#ifndef DPL_TORCH_MODEL_DATA_HPP
#define DPL_TORCH_MODEL_DATA_HPP

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/support/tensor.hpp"
#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

// The data of a model: one sample's input (dtype and shape; an empty shape: not known), its
// target, and the number of classes (0: not known). Targets are integer labels in
// [0, num_classes): one per sample (target_shape empty, shape ()) or one per position of the
// input (target_shape (T)). Hosts before model ABI v4 say only the input shape and the classes:
// float32 input and one int64 label per sample.
struct DataShape {
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
  DLDataType input_dtype{kDLFloat, 32, 1};
  DLDataType target_dtype{kDLInt, 64, 1};
  std::vector<int64_t> target_shape;
};

// The samples a network takes.
enum class Samples {
  kClassLabels,     // float32 input, one integer class label per sample (image classifiers)
  kTokenSequences,  // integer token ids (T), an integer target per position (T) (language models)
  kAny,             // float or integer input of any shape, integer targets of any shape
};

// The input shape a model takes: exactly `shape` (implicitly, from a std::vector<int64_t>), or,
// made by AnyInputShape, any shape with `shape` as the default when the host does not say.
struct InputShapeSpec {
  InputShapeSpec(std::vector<int64_t> exact_shape)  // NOLINT: the macro's plain shape argument
      : shape(std::move(exact_shape)) {}
  std::vector<int64_t> shape;
  bool any = false;
};

// The number of classes a model takes: exactly `count`, or (AnyNumClasses) any, `count` being
// the default when the host does not say (0: none).
struct NumClassesSpec {
  constexpr NumClassesSpec(int64_t exact_count)  // NOLINT: the macro's plain classes argument
      : count(exact_count) {}
  int64_t count;
  bool any = false;
};

struct DataSpec {
  InputShapeSpec input_shape;
  NumClassesSpec num_classes;
  Samples samples = Samples::kClassLabels;
};

inline bool IsIntegerType(const DLDataType& dtype) {
  return (dtype.code == kDLInt || dtype.code == kDLUInt) && dtype.lanes == 1;
}

inline bool IsFloat32(const DLDataType& dtype) {
  return dtype.code == kDLFloat && dtype.bits == 32 && dtype.lanes == 1;
}

inline std::string DataText(const std::vector<int64_t>& shape, bool any_shape, int64_t classes,
                            bool any_classes) {
  std::string text = any_shape       ? std::string("any shape")
                     : shape.empty() ? std::string("an unknown shape")
                                     : "shape " + ShapeText(shape);
  text += " and ";
  text += any_classes    ? std::string("any number of classes")
          : classes == 0 ? std::string("an unknown number of classes")
                         : std::to_string(classes) + " classes";
  return text;
}

// "int64 (32) samples with int64 (32) targets".
inline std::string SamplesText(const DataShape& data) {
  return support::DtypeName(data.input_dtype) + " " + ShapeText(data.input_shape) +
         " samples with " + support::DtypeName(data.target_dtype) + " " +
         ShapeText(data.target_shape) + " targets";
}

inline const char* SamplesText(Samples samples) {
  switch (samples) {
    case Samples::kClassLabels:
      return "float32 samples with one integer class label each";
    case Samples::kTokenSequences:
      return "integer token ids (T) with an integer target per position (T)";
    case Samples::kAny:
      return "samples with integer targets";
  }
  return "?";
}

// Whether `data`'s dtypes and shapes are of the kind `samples`.
inline bool SamplesFit(Samples samples, const DataShape& data) {
  if (!IsIntegerType(data.target_dtype)) return false;
  switch (samples) {
    case Samples::kClassLabels:
      return IsFloat32(data.input_dtype) && data.target_shape.empty();
    case Samples::kTokenSequences:
      return IsIntegerType(data.input_dtype) && data.input_shape.size() == 1 &&
             data.target_shape == data.input_shape;
    case Samples::kAny:
      return IsFloat32(data.input_dtype) || IsIntegerType(data.input_dtype);
  }
  return false;
}

// The shape `what` of a config ("input_shape", "input.shape", ...), checked.
inline std::vector<int64_t> ConfigShape(const std::string& what, uint32_t ndim,
                                        const int64_t* shape, uint32_t max_ndim) {
  if (ndim > max_ndim) {
    throw InvalidArgument("config " + what + " has " + std::to_string(ndim) + " axes, more than " +
                          std::to_string(max_ndim));
  }
  std::vector<int64_t> extents(shape, shape + ndim);
  for (int64_t extent : extents) {
    if (extent < 1) {
      throw InvalidArgument("config " + what + " " + ShapeText(extents) + " has an extent below 1");
    }
  }
  return extents;
}

// The data the host described in a v3 config (DataShape{} for older configs).
inline DataShape HostData(const dpl_model_config_v3& config) {
  if (config.input_ndim > DPL_MODEL_MAX_INPUT_DIMS) {
    throw InvalidArgument("config input_ndim " + std::to_string(config.input_ndim) +
                          " is more than DPL_MODEL_MAX_INPUT_DIMS (" +
                          std::to_string(DPL_MODEL_MAX_INPUT_DIMS) + ")");
  }
  DataShape data;
  data.input_shape =
      ConfigShape("input_shape", config.input_ndim, config.input_shape, DPL_MODEL_MAX_INPUT_DIMS);
  if (config.num_classes < 0) {
    throw InvalidArgument("config num_classes " + std::to_string(config.num_classes) +
                          " is negative");
  }
  data.num_classes = config.num_classes;
  return data;
}

// The data the host described in a v4 config: v3's, and the typed input and target where the
// host says them (dtype bits 0: it does not; then float32 input and an int64 label).
inline DataShape HostData(const dpl_model_config_v4& config) {
  DataShape data = HostData(reinterpret_cast<const dpl_model_config_v3&>(config));
  if (config.input.dtype.bits != 0) {
    data.input_dtype = config.input.dtype;
    data.input_shape = ConfigShape("input.shape", config.input.ndim, config.input.shape,
                                   DPL_DATASET_MAX_SAMPLE_DIMS);
  }
  if (config.target.dtype.bits != 0) {
    data.target_dtype = config.target.dtype;
    data.target_shape = ConfigShape("target.shape", config.target.ndim, config.target.shape,
                                    DPL_DATASET_MAX_SAMPLE_DIMS);
  }
  if (support::ElementTypeOf(data.input_dtype) == support::ElementType::kUnknown ||
      support::ElementTypeOf(data.target_dtype) == support::ElementType::kUnknown) {
    throw InvalidArgument("config input or target dtype (" + support::DtypeName(data.input_dtype) +
                          ", " + support::DtypeName(data.target_dtype) +
                          ") is not one the model ABI carries");
  }
  return data;
}

// The data the model is built for: the host's, checked against what the model takes, or the
// model's defaults for what the host does not know.
inline DataShape ResolveData(const DataSpec& spec, const DataShape& host) {
  const bool shape_fits = host.input_shape.empty() || spec.input_shape.any ||
                          host.input_shape == spec.input_shape.shape;
  const bool classes_fit =
      host.num_classes == 0 || spec.num_classes.any || host.num_classes == spec.num_classes.count;
  if (!SamplesFit(spec.samples, host) &&
      !(host.input_shape.empty() && spec.samples == Samples::kTokenSequences)) {
    throw InvalidArgument("the data has " + SamplesText(host) + "; this model takes " +
                          SamplesText(spec.samples) +
                          "; train it on such data, or train a model that takes this data");
  }
  if (!shape_fits || !classes_fit) {
    throw InvalidArgument("the data has samples of " +
                          DataText(host.input_shape, false, host.num_classes, false) +
                          "; this model takes " +
                          DataText(spec.input_shape.shape, spec.input_shape.any,
                                   spec.num_classes.count, spec.num_classes.any) +
                          "; train it on data of that shape, or train a model that takes this "
                          "data");
  }
  DataShape resolved = host;
  resolved.input_shape = host.input_shape.empty() ? spec.input_shape.shape : host.input_shape;
  resolved.num_classes = host.num_classes == 0 ? spec.num_classes.count : host.num_classes;
  if (host.input_shape.empty() && spec.samples == Samples::kTokenSequences) {
    resolved.input_dtype = DLDataType{kDLInt, 64, 1};
    resolved.target_shape = resolved.input_shape;
  }
  return resolved;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_DATA_HPP
