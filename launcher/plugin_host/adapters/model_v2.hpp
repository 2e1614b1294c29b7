// What the model adapters take from model ABI v2 (model_v2.cpp): the host copy's entries, which
// later versions kept with their types.
#pragma once

#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::plugin_host::adapters {

// The entries v2 added, of `table` (a model table of ABI v2 or later).
template <typename Table>
RequiredEntries RequiredHostCopyEntries(const Table* t) {
  return {DPL_REQUIRED_ENTRY(t, host_batch), DPL_REQUIRED_ENTRY(t, read_tensors),
          DPL_REQUIRED_ENTRY(t, write_tensors)};
}

template <typename Table>
void TakeHostCopyEntries(const Table& table, ModelInterface* model) {
  model->host_batch = table.host_batch;
  model->read_tensors = table.read_tensors;
  model->write_tensors = table.write_tensors;
}

}  // namespace dpl::plugin_host::adapters
