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

// Note [Collectives older backends lack]: backend ABI v3 brought reduce_scatter and in-place
// allgather. For a v1 or v2 plugin the adapter makes them of what the plugin has, with the same
// results: reduce_scatter is an allreduce of the whole input (its other slices are scratch
// afterwards, as v3 allows) and a copy of the rank's slice; an in-place allgather gives the
// plugin a scratch copy of its input, since older plugins require input and output apart. The
// copies are host memory copies, so out of place on a device they are refused as unsupported.
// The adapter learns each instance's rank and world size from its config at create. Its own
// refusals are what last_error returns after them.
void AddCollectivesOfV3(BackendInterface* backend);

}  // namespace dpl::plugin_host::adapters
