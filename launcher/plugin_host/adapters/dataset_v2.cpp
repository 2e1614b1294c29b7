// Dataset ABI v2 (dpl/dataset_v2.h) as the newest dataset interface: typed samples (an input and a
// target tensor, each with its dtype and shape) and the validation split.
#include "dpl/dataset_v2.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/adapters/dataset_v1.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_dataset_plugin_v2;

RequiredEntries Required(const void* table) {
  return RequiredDatasetEntries(static_cast<const Table*>(table));
}

DatasetInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  DatasetInterface dataset;
  dataset.create = CreateWithPrefix<dpl_dataset_config_v2>(t.create, DPL_DATASET_ABI_VERSION_2);
  dataset.describe = t.describe;
  TakeDatasetEntries(t, &dataset);
  return dataset;
}

}  // namespace

Adapter DatasetV2Adapter() {
  return MakeAdapter(DPL_DATASET_ABI_VERSION_2, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
