// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the data a model is
// built for. Model ABI v3 tells create one sample's shape and the number of classes of the data;
// a model declares what it takes (exactly one shape, or any, each with a default for hosts that
// do not say), and create refuses data it cannot take, naming both.
#ifndef DPL_TORCH_MODEL_DATA_HPP
#define DPL_TORCH_MODEL_DATA_HPP

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

// One sample's shape and the number of classes; an empty shape or 0 classes: not known.
struct DataShape {
  std::vector<int64_t> input_shape;
  int64_t num_classes = 0;
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
};

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

// The data the host described in a v3 config (DataShape{} for older configs).
inline DataShape HostData(const dpl_model_config_v3& config) {
  if (config.input_ndim > DPL_MODEL_MAX_INPUT_DIMS) {
    throw InvalidArgument("config input_ndim " + std::to_string(config.input_ndim) +
                          " is more than DPL_MODEL_MAX_INPUT_DIMS (" +
                          std::to_string(DPL_MODEL_MAX_INPUT_DIMS) + ")");
  }
  DataShape data;
  data.input_shape.assign(config.input_shape, config.input_shape + config.input_ndim);
  for (int64_t extent : data.input_shape) {
    if (extent < 1) {
      throw InvalidArgument("config input_shape " + ShapeText(data.input_shape) +
                            " has an extent below 1");
    }
  }
  if (config.num_classes < 0) {
    throw InvalidArgument("config num_classes " + std::to_string(config.num_classes) +
                          " is negative");
  }
  data.num_classes = config.num_classes;
  return data;
}

// The data the model is built for: the host's, checked against what the model takes, or the
// model's defaults for what the host does not know.
inline DataShape ResolveData(const DataSpec& spec, const DataShape& host) {
  const bool shape_fits = host.input_shape.empty() || spec.input_shape.any ||
                          host.input_shape == spec.input_shape.shape;
  const bool classes_fit =
      host.num_classes == 0 || spec.num_classes.any || host.num_classes == spec.num_classes.count;
  if (!shape_fits || !classes_fit) {
    throw InvalidArgument("the data has samples of " +
                          DataText(host.input_shape, false, host.num_classes, false) +
                          "; this model takes " +
                          DataText(spec.input_shape.shape, spec.input_shape.any,
                                   spec.num_classes.count, spec.num_classes.any) +
                          "; train it on data of that shape, or train a model that takes this "
                          "data");
  }
  DataShape resolved;
  resolved.input_shape = host.input_shape.empty() ? spec.input_shape.shape : host.input_shape;
  resolved.num_classes = host.num_classes == 0 ? spec.num_classes.count : host.num_classes;
  return resolved;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_DATA_HPP
