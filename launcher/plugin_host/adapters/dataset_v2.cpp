// Dataset ABI v2 (dpl/dataset_v2.h) as the newest dataset interface: typed samples (an input and a
// target tensor, each with its dtype and shape) and the validation split.
#include "dpl/dataset_v2.h"
#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/adapters/builtin_adapters.hpp"

namespace dpl::plugin_host::adapters {
namespace {

using Table = dpl_dataset_plugin_v2;

RequiredEntries Required(const void* table) {
  const auto* t = static_cast<const Table*>(table);
  return {DPL_REQUIRED_ENTRY(t, create), DPL_REQUIRED_ENTRY(t, destroy),
          DPL_REQUIRED_ENTRY(t, describe), DPL_REQUIRED_ENTRY(t, fill),
          DPL_REQUIRED_ENTRY(t, last_error)};
}

DatasetInterface Adapt(const void* table) {
  const Table& t = TableAt<Table>(table);
  DatasetInterface dataset;
  dataset.create = CreateWithPrefix<dpl_dataset_config_v2>(t.create, DPL_DATASET_ABI_VERSION_2);
  dataset.destroy = t.destroy;
  dataset.describe = t.describe;
  dataset.fill = t.fill;
  dataset.last_error = t.last_error;
  return dataset;
}

}  // namespace

Adapter DatasetV2Adapter() {
  return MakeAdapter(DPL_DATASET_ABI_VERSION_2, sizeof(Table), {}, &Required, &Adapt);
}

}  // namespace dpl::plugin_host::adapters
