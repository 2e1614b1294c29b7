// What every backend adapter takes from backend ABI v1 (backend_v1.cpp): the entries v1 defined
// and later versions kept with their types.
#pragma once

#include "plugin_host/adapters/adapter_support.hpp"
#include "plugin_host/backend_interface.hpp"

namespace dpl::plugin_host::adapters {

// The entries v1 defined, in its order, of `table` (a backend table of ABI v1 or later).
template <typename Table>
RequiredEntries RequiredBackendV1Entries(const Table* t) {
  return {DPL_REQUIRED_ENTRY(t, create),    DPL_REQUIRED_ENTRY(t, destroy),
          DPL_REQUIRED_ENTRY(t, allreduce), DPL_REQUIRED_ENTRY(t, broadcast),
          DPL_REQUIRED_ENTRY(t, allgather), DPL_REQUIRED_ENTRY(t, barrier),
          DPL_REQUIRED_ENTRY(t, last_error)};
}

// Every entry of `table` (a backend table of ABI v1 or later) that v1 defined, except create.
template <typename Table>
void TakeBackendV1Entries(const Table& table, BackendInterface* backend) {
  backend->destroy = table.destroy;
  backend->allreduce = table.allreduce;
  backend->broadcast = table.broadcast;
  backend->allgather = table.allgather;
  backend->barrier = table.barrier;
  backend->last_error = table.last_error;
}

}  // namespace dpl::plugin_host::adapters
