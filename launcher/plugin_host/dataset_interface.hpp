// The one in-process interface of a dataset plugin, whatever dataset ABI version it was built for.
//
// The adapter of the plugin's version (plugin_host/adapters/dataset_vN.cpp) turns its table into
// the entries of the newest table (dpl/dataset.h's dpl_dataset_plugin), in its order, with its
// types and contracts; an older plugin gets the prefix of the newest config it knows.
#pragma once

#include <functional>
#include <string>

#include "dpl/dataset.h"
#include "plugin_host/capabilities.hpp"

namespace dpl::plugin_host {

struct DatasetInterface {
  CapabilitySet<DatasetCapability> capabilities;
  // The plugin's ABI for messages, e.g. "dataset ABI v2" (never for decisions: ask Has).
  std::string abi;

  bool Has(DatasetCapability capability) const { return capabilities.Has(capability); }

  // The caller fills the newest config; the adapter sets struct_size and version for the plugin.
  // describe fills the newest info whole (struct_size included): typed input and target.
  std::function<dpl_status(const dpl_dataset_config* config, dpl_dataset** out)> create;
  std::function<void(dpl_dataset* dataset)> destroy;
  std::function<dpl_status(dpl_dataset* dataset, dpl_dataset_info* info)> describe;
  std::function<dpl_status(dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                           DLTensor* input, DLTensor* target)>
      fill;
  std::function<const char*()> last_error;
};

}  // namespace dpl::plugin_host
