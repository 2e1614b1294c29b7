// Class labels as every plugin checks them when it opens a split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/support/options.hpp"

namespace dpl::datasets {

// The `classes=N` option (N >= 1); 0 when it is not given.
int64_t ReadClassesOption(const support::KeyValueOptions& options);

// The split's number of classes: `declared` (from ReadClassesOption; 0 = not given) or the
// largest label + 1. A negative label, or one not below `declared`, is refused naming
// `labels_path`, the label and its sample.
int64_t CountClasses(const std::vector<int64_t>& labels, int64_t declared,
                     const std::string& labels_path);

}  // namespace dpl::datasets
