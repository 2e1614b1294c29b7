// What the webdataset plugin refuses, each refusal naming the shard and the member.
#include <gtest/gtest.h>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {}  // namespace
}  // namespace dpl::datasets::testing
