#include "common/labels.hpp"

#include <algorithm>

#include "dpl/support/error.hpp"

namespace dpl::datasets {

int64_t ReadClassesOption(const support::KeyValueOptions& options) {
  const int64_t classes = options.GetInt("classes", 0);
  support::Require(options.GetString("classes", "").empty() || classes >= 1,
                   "option \"classes\" must be at least 1, got " + std::to_string(classes));
  return classes;
}

TransformAndClassesOptions ReadTransformAndClassesOptions(const support::KeyValueOptions& options) {
  TransformAndClassesOptions read;
  read.transform = ReadTransformOptions(options, /*images=*/true);
  read.classes = ReadClassesOption(options);
  return read;
}

int64_t CountClasses(const std::vector<int64_t>& labels, int64_t declared,
                     const std::string& labels_path) {
  int64_t largest = -1;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t label = labels[i];
    support::Require(label >= 0, labels_path + ": label " + std::to_string(label) + " of sample " +
                                     std::to_string(i) + " is negative");
    support::Require(declared == 0 || label < declared,
                     labels_path + ": label " + std::to_string(label) + " of sample " +
                         std::to_string(i) + " is not below classes=" + std::to_string(declared));
    largest = std::max(largest, label);
  }
  return declared != 0 ? declared : largest + 1;
}

}  // namespace dpl::datasets
