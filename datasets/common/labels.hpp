// Class labels as every plugin checks them when it opens a split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/sample_transform.hpp"
#include "dpl/support/options.hpp"

namespace dpl::datasets {

// The `classes=N` option (N >= 1); 0 when it is not given.
int64_t ReadClassesOption(const support::KeyValueOptions& options);

// The split's number of classes: `declared` (from ReadClassesOption; 0 = not given) or the
// largest label + 1. A negative label, or one not below `declared`, is refused naming
// `labels_path`, the label and its sample.
int64_t CountClasses(const std::vector<int64_t>& labels, int64_t declared,
                     const std::string& labels_path);

// The options of a plugin whose samples take only the transform's options and `classes=N`.
struct TransformAndClassesOptions {
  TransformOptions transform;
  int64_t classes = 0;  // ReadClassesOption
};

// ReadTransformOptions(options, /*images=*/true) and ReadClassesOption.
TransformAndClassesOptions ReadTransformAndClassesOptions(const support::KeyValueOptions& options);

}  // namespace dpl::datasets
