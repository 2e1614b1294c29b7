// Dataset ABI v1 (dpl/dataset_v1.h) as the newest dataset interface.
//
// Note [Adapting dataset ABI v1]: a v1 sample is float32 of sample_shape with one int64 label, so
// its info becomes the newest one with input float32 of sample_shape and target int64 of shape ()
// (v2's info is a new layout, not a prefix: it is converted field by field). v1's fill writes
// exactly those tensors and its config is v2's, so both pass through. v1 knows no validation split
// (DPL_DATASET_SPLIT_VALIDATION): its test split serves it.
#include <algorithm>

#include "dpl/dataset_v1.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/dataset_v1.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_dataset_plugin_v1;

RequiredEntries Required(const void* table) {
  return RequiredDatasetEntries(static_cast<const Table*>(table));
}

// v1's info as the newest (Note [Adapting dataset ABI v1]).
dpl_dataset_info TypedInfo(const dpl_dataset_info_v1& own) {
  dpl_dataset_info info{};
  info.struct_size = sizeof info;
  info.input.dtype = {kDLFloat, 32, 1};
  info.input.ndim = std::min<uint32_t>(own.sample_ndim, DPL_DATASET_MAX_SAMPLE_DIMS);
  std::copy(own.sample_shape, own.sample_shape + info.input.ndim, info.input.shape);
  info.target.dtype = {kDLInt, 64, 1};
  info.target.ndim = 0;
  info.count = own.count;
  info.num_classes = own.num_classes;
  return info;
}

DatasetInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  DatasetInterface dataset;
  dataset.create = [create = t.create](const dpl_dataset_config* config, dpl_dataset** out) {
    dpl_dataset_config_v1 own = PrefixOf<dpl_dataset_config_v1>(*config);
    own.version = DPL_DATASET_ABI_VERSION_1;
    if (own.split == DPL_DATASET_SPLIT_VALIDATION) own.split = DPL_DATASET_SPLIT_TEST;
    return create(&own, out);
  };
  dataset.describe = [describe = t.describe](dpl_dataset* instance, dpl_dataset_info* info) {
    dpl_dataset_info_v1 own{};
    own.struct_size = sizeof own;
    const dpl_status status = describe(instance, &own);
    *info = TypedInfo(own);
    return status;
  };
  TakeDatasetEntries(t, &dataset);
  return dataset;
}

}  // namespace

Adapter DatasetV1Adapter() {
  return MakeAdapter(DPL_DATASET_ABI_VERSION_1, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
