// What the dataset adapters take from dataset ABI v1 (dataset_v1.cpp): the entries v1 defined,
// which v2 kept in their places (of them, v2 changed only the type of describe's info).
#pragma once

#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/dataset_interface.hpp"

namespace dpl::plugin_host::adapters {

// The entries of `table` (a dataset table of ABI v1 or later), in its order.
template <typename Table>
RequiredEntries RequiredDatasetEntries(const Table* t) {
  return {DPL_REQUIRED_ENTRY(t, create), DPL_REQUIRED_ENTRY(t, destroy),
          DPL_REQUIRED_ENTRY(t, describe), DPL_REQUIRED_ENTRY(t, fill),
          DPL_REQUIRED_ENTRY(t, last_error)};
}

// The entries of `table` whose types every version shares: destroy, fill and last_error.
template <typename Table>
void TakeDatasetEntries(const Table& table, DatasetInterface* dataset) {
  dataset->destroy = table.destroy;
  dataset->fill = table.fill;
  dataset->last_error = table.last_error;
}

}  // namespace dpl::plugin_host::adapters
