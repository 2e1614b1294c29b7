// The one in-process interface of a communication backend plugin, whatever backend ABI version it
// was built for.
//
// The adapter of the plugin's version (plugin_host/adapters/backend_vN.cpp) turns its table into
// the entries of the newest table (dpl/backend.h's dpl_backend_plugin), in its order, with its
// types and contracts. An older plugin gets the prefix of the newest config it knows; what it
// lacks is filled in (see BackendCapability), so every entry is set but abort, which nothing can
// stand in for (empty without BackendCapability::kAbort), and send_receive, which the training's
// backend stands in for (empty without BackendCapability::kSendReceive).
#pragma once

#include <functional>
#include <string>

#include "dpl/backend.h"
#include "plugin_host/capabilities.hpp"

namespace dpl::plugin_host {

struct BackendInterface {
  CapabilitySet<BackendCapability> capabilities;
  // The plugin's ABI for messages, e.g. "backend ABI v1" (never for decisions: ask Has).
  std::string abi;

  bool Has(BackendCapability capability) const { return capabilities.Has(capability); }

  // The caller fills the newest config; the adapter sets struct_size and version for the plugin.
  std::function<dpl_status(const dpl_backend_config* config, dpl_backend** out)> create;
  std::function<void(dpl_backend* backend)> destroy;
  std::function<dpl_status(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream)>
      allreduce;
  std::function<dpl_status(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream)>
      broadcast;
  std::function<dpl_status(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                           void* stream)>
      allgather;
  std::function<dpl_status(dpl_backend* backend)> barrier;
  std::function<const char*()> last_error;
  // Returns DPL_OK at once without kSynchronize.
  std::function<dpl_status(dpl_backend* backend, void* stream)> synchronize;
  // Without kReduceScatter: an allreduce of the whole input and a copy of the rank's slice (host
  // memory, or in place); allgather runs in place through a scratch copy (host memory).
  std::function<dpl_status(dpl_backend* backend, DLTensor* input, DLTensor* output,
                           dpl_reduce_op op, void* stream)>
      reduce_scatter;
  // Only with kAbort (empty without): from any thread, while one call of the instance runs.
  std::function<dpl_status(dpl_backend* backend)> abort;
  // Only with kSendReceive (empty without).
  std::function<dpl_status(dpl_backend* backend, const DLTensor* send, int32_t to,
                           DLTensor* receive, int32_t from, void* stream)>
      send_receive;
};

}  // namespace dpl::plugin_host
